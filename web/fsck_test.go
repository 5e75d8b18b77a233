package web_test

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// gitT runs the git CLI isolated from the machine's configuration.
type gitT struct {
	t    *testing.T
	home string
}

func (g gitT) run(dir string, stdin []byte, args ...string) (string, error) {
	full := append([]string{"-c", "user.name=Agent", "-c", "user.email=agent@example.com", "-c", "init.defaultBranch=main"}, args...)
	cmd := exec.Command("git", full...)
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + g.home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "PATH=" + os.Getenv("PATH")}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func (g gitT) must(dir string, stdin []byte, args ...string) string {
	g.t.Helper()
	out, err := g.run(dir, stdin, args...)
	if err != nil {
		g.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return out
}

// badEntry is a tree entry git fsck --strict flags.
type badEntry struct {
	label string
	name  string // the entry's name in the root tree
	kind  string // "dir" (holding a file "config"), "symlink", "file"
	body  string // file content or symlink target
	msg   string // in our refusal
}

var badEntries = []badEntry{
	{"ntfs-ads", ".git::$INDEX_ALLOCATION", "dir", "", "component is reserved"},
	{"hfs-zwnj", ".g\u200cit", "dir", "", "component is reserved"},
	{"hfs-zwj-upper", ".GIT\u200d", "dir", "", "component is reserved"},
	{"nbsp", ".git\u00a0", "dir", "", "component is reserved"},
	{"ntfs-short", "git~1", "dir", "", "component is reserved"},
	{"ntfs-trailing", ".git. .", "dir", "", "component is reserved"},
	{"gitmodules-dir", ".gitmodules", "dir", "", ".gitmodules must be a regular file"},
	{"gitmodules-short-dir", "GITMOD~1", "dir", "", ".gitmodules must be a regular file"},
	{"gitmodules-symlink", ".gitmodules", "symlink", "x", ".gitmodules must be a regular file"},
	{"gitattributes-symlink", ".gitattributes.", "symlink", "x", ".gitattributes must be a regular file"},
	{"gitmodules-url", ".gitmodules", "file", "[submodule \"x\"]\n\tpath = x\n\turl = -oProxyCommand=evil\n", "disallowed submodule url"},
	{"gitmodules-name", ".gitmodules", "file", "[submodule \"../../x\"]\n\tpath = x\n\turl = https://example.com/x\n", "disallowed submodule name"},
}

// rawTreeEntry encodes one tree entry.
func rawTreeEntry(mode, name, oid string) []byte {
	h, _ := hex.DecodeString(oid)
	return append([]byte(mode+" "+name+"\x00"), h...)
}

// TestRefusesWhatGitFsckFlags: every name and file git fsck --strict
// flags is refused with a clear message through each way objects enter a
// repository — a tar upload, the object upload, a real `git push` — and
// afterwards the repository passes git fsck --strict and clones with
// transfer.fsckObjects.
func TestRefusesWhatGitFsckFlags(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	f, dataDir := uploadServerDir(t, 8)
	g := gitT{t: t, home: t.TempDir()}
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"shop"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	u, _ := url.Parse(f.srv.URL + "/git/shop.git")
	u.User = url.UserPassword("x", f.admin)
	work := filepath.Join(t.TempDir(), "shop")
	g.must("", nil, "clone", "-q", u.String(), work)
	os.WriteFile(filepath.Join(work, "README"), []byte("hi\n"), 0o644)
	g.must(work, nil, "add", "-A")
	g.must(work, nil, "commit", "-q", "-m", "first")
	g.must(work, nil, "push", "-q", "origin", "main")
	head := g.must(work, nil, "rev-parse", "HEAD")
	readme := g.must(work, nil, "rev-parse", "HEAD:README")

	for _, b := range badEntries {
		t.Run(b.label, func(t *testing.T) {
			// The crafted tree: README plus the bad entry, sorted by git's
			// rules (a directory sorts as name + "/").
			var entry []byte
			switch b.kind {
			case "dir":
				blob := g.must(work, []byte("x\n"), "hash-object", "-w", "--stdin")
				sub := g.must(work, rawTreeEntry("100644", "config", blob), "hash-object", "-w", "-t", "tree", "--literally", "--stdin")
				entry = rawTreeEntry("40000", b.name, sub)
			case "symlink":
				blob := g.must(work, []byte(b.body), "hash-object", "-w", "--stdin")
				entry = rawTreeEntry("120000", b.name, blob)
			case "file":
				blob := g.must(work, []byte(b.body), "hash-object", "-w", "--stdin")
				entry = rawTreeEntry("100644", b.name, blob)
			}
			readmeEntry := rawTreeEntry("100644", "README", readme)
			var tree []byte
			if b.name < "README" {
				tree = append(append(tree, entry...), readmeEntry...)
			} else {
				tree = append(append(tree, readmeEntry...), entry...)
			}
			treeOID := g.must(work, tree, "hash-object", "-w", "-t", "tree", "--literally", "--stdin")
			commit := g.must(work, nil, "commit-tree", "-p", head, "-m", "bad "+b.label, treeOID)

			// 1. A real git push: refused, and git shows why.
			out, err := g.run(work, nil, "push", "origin", commit+":refs/heads/bad-"+b.label)
			if err == nil || !strings.Contains(out, b.msg) {
				t.Errorf("git push: err %v, output does not say %q:\n%s", err, b.msg, out)
			}

			// 2. The object upload of the CLI's incremental push.
			packBytes := packObjectsBytes(t, g, work, commit+"\n^"+head+"\n")
			req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/repos/shop/objects", bytes.NewReader(packBytes))
			req.Header.Set("Authorization", "Bearer "+f.admin)
			req.Header.Set("Content-Type", "application/x-git-packfile")
			checkRefusal(t, "object upload", req, b.msg)

			// 3. A tar upload of the same worktree.
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			add := func(h *tar.Header, body string) {
				h.Size = int64(len(body))
				if h.Typeflag == tar.TypeSymlink {
					h.Size = 0
				}
				if h.Mode == 0 {
					h.Mode = 0o644
				}
				tw.WriteHeader(h)
				if h.Typeflag == tar.TypeReg {
					tw.Write([]byte(body))
				}
			}
			add(&tar.Header{Name: "README", Typeflag: tar.TypeReg}, "hi\n")
			switch b.kind {
			case "dir":
				add(&tar.Header{Name: b.name + "/config", Typeflag: tar.TypeReg}, "x\n")
			case "symlink":
				add(&tar.Header{Name: b.name, Typeflag: tar.TypeSymlink, Linkname: b.body}, "")
			case "file":
				add(&tar.Header{Name: b.name, Typeflag: tar.TypeReg}, b.body)
			}
			tw.Close()
			req, _ = http.NewRequest("PUT", f.srv.URL+"/api/v1/repos/shop/worktree?branch=main&expect_oid="+head, bytes.NewReader(buf.Bytes()))
			req.Header.Set("Authorization", "Bearer "+f.admin)
			req.Header.Set("Content-Type", "application/x-tar")
			checkRefusal(t, "tar upload", req, b.msg)
		})
	}

	// Nothing bad entered: main did not move, the stores pass git fsck
	// --strict, and a clone that checks every object works.
	if got := g.must(work, nil, "ls-remote", "origin", "refs/heads/*"); !strings.Contains(got, head+"\trefs/heads/main") || strings.Contains(got, "bad-") {
		t.Fatalf("refs after the refusals:\n%s", got)
	}
	fscked := 0
	filepath.WalkDir(dataDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "objects" {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), "HEAD")); err == nil {
				if out, err := g.run("", nil, "--git-dir="+filepath.Dir(p), "fsck", "--strict", "--no-dangling"); err != nil || strings.Contains(out, "warning") {
					t.Errorf("git fsck --strict %s: %v\n%s", filepath.Dir(p), err, out)
				}
				fscked++
			}
		}
		return nil
	})
	if fscked == 0 {
		t.Fatal("no object store found to fsck")
	}
	clone := filepath.Join(t.TempDir(), "check")
	g.must("", nil, "clone", "-q", "-c", "transfer.fsckObjects=true", u.String(), clone)
}

func packObjectsBytes(t *testing.T, g gitT, dir, revs string) []byte {
	t.Helper()
	cmd := exec.Command("git", "pack-objects", "--revs", "--stdout", "-q")
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + g.home, "GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(revs)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pack-objects: %v", err)
	}
	return out
}

func checkRefusal(t *testing.T, what string, req *http.Request, msg string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), string(lockstep.EINVALID)) || !strings.Contains(string(body), jsonQuote(msg)) {
		t.Errorf("%s: %d %s, want 400 invalid_argument saying %q", what, resp.StatusCode, body, msg)
	}
}

// jsonQuote returns msg as it appears inside a JSON string.
func jsonQuote(msg string) string {
	q := fmt.Sprintf("%q", msg)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `\"`)
}
