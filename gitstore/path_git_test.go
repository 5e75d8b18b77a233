package gitstore

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestPathRulesAgainstGitFsck uses real git as the oracle: each name is
// written as a tree entry (a file, a directory and a symlink) with `git
// hash-object --literally`, and one `git fsck --strict` judges every
// tree. Whatever git flags, our rules must refuse; whatever we accept, git
// must accept. (We may refuse more: invalid UTF-8, ".git\u00a0".)
func TestPathRulesAgainstGitFsck(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	names := append([]string{}, pathSeeds...)
	names = append(names, ".gitmodules", ".GITMODULES.", ".gitmodules::$DATA", "gitmod~1", "GI7EBA~1", "gi7eba~9",
		".gitattributes", "gitatt~1", ".gitignore", ".mailmap", "a\\.gitmodules", ".gitmodules\u200c", "x.git", "gi~1t",
		".git\u200f", "\ufeff.GiT", ".git\u00a0")
	gd := t.TempDir()
	git(t, gd, nil, "init", "-q", "--bare")
	blob := hashObject(t, gd, "blob", "x\n", false)
	type tcase struct{ name, kind, sub string }
	var cases []tcase
	var paths []string
	seen := map[string]bool{}
	tmp := t.TempDir()
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "/\x00") || seen[name] {
			continue
		}
		seen[name] = true
		for _, kind := range []string{"file", "directory", "symlink"} {
			mode := map[string]string{"file": "100644", "symlink": "120000", "directory": "40000"}[kind]
			target := blob
			subOid := ""
			if kind == "directory" {
				// A subtree of its own: git reports a non-blob
				// .gitmodules on the subtree, not on its parent.
				body := rawTree([3]string{"100644", "f" + strconv.Itoa(len(paths)), blob})
				p := filepath.Join(tmp, "sub"+strconv.Itoa(len(paths)))
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
				subOid = plumbing.ComputeHash(plumbing.TreeObject, []byte(body)).String()
				cases = append(cases, tcase{kind: "subtree"})
				target = subOid
			}
			p := filepath.Join(tmp, strconv.Itoa(len(paths)))
			if err := os.WriteFile(p, []byte(rawTree([3]string{mode, name, target})), 0o644); err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
			cases = append(cases, tcase{name, kind, subOid})
		}
	}
	cmd := exec.Command("git", "--git-dir="+gd, "hash-object", "-w", "-t", "tree", "--literally", "--stdin-paths")
	cmd.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hash-object: %v", err)
	}
	oids := strings.Fields(string(out))
	if len(oids) != len(cases) {
		t.Fatalf("%d trees written, want %d", len(oids), len(cases))
	}
	fsck, _ := exec.Command("git", "--git-dir="+gd, "fsck", "--strict", "--no-dangling").CombinedOutput()
	flagged := map[string]string{}
	for _, line := range strings.Split(string(fsck), "\n") {
		for _, prefix := range []string{"error in tree ", "warning in tree ", "error in blob ", "warning in blob "} {
			if rest, ok := strings.CutPrefix(line, prefix); ok && len(rest) >= 40 {
				flagged[rest[:40]] += rest[41:] + " "
			}
		}
	}
	blobFlag := flagged[blob] // .gitmodules content is judged on the blob
	checked := 0
	for i, c := range cases {
		if c.kind == "subtree" {
			continue
		}
		why, gitFlags := flagged[oids[i]]
		if w, ok := flagged[c.sub]; ok {
			why, gitFlags = why+w, true
		}
		ours := validateComponent(c.name) == nil
		special := ""
		if ours {
			var err error
			if special, err = checkSpecialEntry(c.name, c.name, c.kind); err != nil {
				ours = false
			}
		}
		if gitFlags && ours {
			t.Errorf("%s %q: git fsck --strict flags it (%s) but we accept it", c.kind, c.name, why)
		}
		if ours && special != "" && blobFlag != "" {
			if err := checkSpecialContent(special, 2, []byte("x\n")); err == nil {
				t.Errorf("%s %q: git flags its content (%s), we accept it", c.kind, c.name, blobFlag)
			}
		}
		if !gitFlags && !ours && !looksLikeDotGit(c.name) && strings.ToValidUTF8(c.name, "") == c.name {
			t.Logf("%s %q: we refuse, git accepts", c.kind, c.name)
		}
		checked++
	}
	if checked < 100 || len(flagged) < 30 {
		t.Fatalf("only %d cases, %d flagged by git: the oracle did not run as intended\n%s", checked, len(flagged), fsck)
	}
}
