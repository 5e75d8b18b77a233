package gitstore

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

func TestTreeEntriesAndBlob(t *testing.T) {
	n := MustOpen(t)
	c, tree := mustPush(t, n, []tarEntry{
		{Name: "README", Body: "hello\n"},
		{Name: "bin/run", Body: "#!/bin/sh\n", Mode: 0o755},
		{Name: "bin/link", Type: tar.TypeSymlink, Linkname: "run"},
		{Name: "bin/sub/x", Body: "x"},
	}, nil, 1700000000)
	for _, root := range []plumbing.Hash{c, tree} {
		es, err := n.TreeEntries(root, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 2 || es[0].Name != "README" || es[0].Type != "blob" || es[0].Size != 6 || es[1].Name != "bin" || es[1].Type != "tree" || es[1].Mode != "040000" {
			t.Fatalf("root entries %+v", es)
		}
		es, err = n.TreeEntries(root, "/bin/")
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range es {
			got += fmt.Sprintf("%s %s %s %d;", e.Path, e.Mode, e.Type, e.Size)
		}
		if want := "bin/link 120000 symlink 3;bin/run 100755 blob 10;bin/sub 040000 tree 0;"; got != want {
			t.Fatalf("bin entries %s", got)
		}
	}
	info, rc, err := n.Blob(c, "bin/run")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "#!/bin/sh\n" || info.Mode != "100755" || info.Size != 10 {
		t.Fatalf("blob %+v %q", info, b)
	}
	j, _ := json.Marshal(info)
	if !strings.Contains(string(j), `"hash":"`+info.Hash.String()+`"`) {
		t.Fatalf("json %s", j)
	}
	for _, tc := range []struct {
		fn   func() error
		name string
	}{
		{func() error { _, err := n.TreeEntries(c, "nope"); return err }, "missing dir"},
		{func() error { _, err := n.TreeEntries(c, "README"); return err }, "file as dir"},
		{func() error { _, err := n.TreeEntries(c, "README/x"); return err }, "through file"},
		{func() error { _, _, err := n.Blob(c, "bin"); return err }, "dir as blob"},
		{func() error { _, _, err := n.Blob(c, "../etc/passwd"); return err }, "traversal"},
		{func() error { _, err := n.TreeEntries(plumbing.NewHash(strings.Repeat("12", 20)), ""); return err }, "missing object"},
	} {
		if err := tc.fn(); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// Archive output re-ingested gives the same tree, and git agrees.
func TestArchiveRoundTrip(t *testing.T) {
	n := MustOpen(t)
	entries := genTree(3, 50, 100<<10)
	entries = append(entries, tarEntry{Name: "l", Type: tar.TypeSymlink, Linkname: entries[0].Name}, tarEntry{Name: "x.sh", Body: "run", Mode: 0o755})
	c, tree := mustPush(t, n, entries, nil, 1700000000)
	var buf bytes.Buffer
	if err := n.Archive(context.Background(), &buf, c); err != nil {
		t.Fatal(err)
	}
	in, err := IngestTar(context.Background(), bytes.NewReader(buf.Bytes()), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Tree != tree {
		t.Fatalf("round trip tree %s, want %s", in.Tree, tree)
	}
	// Extracted by tar(1) and hashed by git.
	dir := t.TempDir()
	cmd := exec.Command("tar", "-x", "-C", dir)
	cmd.Stdin = bytes.NewReader(buf.Bytes())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v %s", err, out)
	}
	git(t, dir, nil, "init", "-q")
	git(t, dir, nil, "add", "-A")
	if got := strings.TrimSpace(git(t, dir, nil, "write-tree")); got != tree.String() {
		t.Fatalf("git write-tree of extracted archive %s, want %s", got, tree)
	}
}

// history builds, with the git CLI, a history with merges and skewed
// author times, receives it and mirrors main.
func history(t *testing.T) (*Network, string) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q", "-b", "main")
	at := int64(1700000000)
	commit := func(msg string) {
		at += 60
		env := []string{fmt.Sprintf("GIT_COMMITTER_DATE=%d +0000", at), fmt.Sprintf("GIT_AUTHOR_DATE=%d +0000", at)}
		os.WriteFile(filepath.Join(dir, msg+".txt"), []byte(msg+"\n"), 0o644)
		git(t, dir, env, "add", "-A")
		git(t, dir, env, "commit", "-q", "-m", msg)
	}
	commit("a")
	commit("b")
	git(t, dir, nil, "checkout", "-q", "-b", "side")
	commit("s1")
	commit("s2")
	git(t, dir, nil, "checkout", "-q", "main")
	commit("c")
	at += 60
	git(t, dir, []string{fmt.Sprintf("GIT_COMMITTER_DATE=%d +0000", at), fmt.Sprintf("GIT_AUTHOR_DATE=%d +0000", at)}, "merge", "-q", "--no-ff", "-m", "merge side", "side")
	commit("d")
	git(t, dir, nil, "checkout", "-q", "side")
	commit("s3")
	gd := filepath.Join(dir, ".git")
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, "main\nside\n", "--revs")), Limits{}); err != nil {
		t.Fatal(err)
	}
	return n, dir
}

func revParse(t *testing.T, dir, rev string) plumbing.Hash {
	return plumbing.NewHash(strings.TrimSpace(git(t, dir, nil, "rev-parse", rev)))
}

func TestLogMatchesGit(t *testing.T) {
	n, dir := history(t)
	main := revParse(t, dir, "main")
	want := strings.Fields(git(t, dir, nil, "log", "--format=%H", "main"))
	all, err := n.Log(main, 0, plumbing.ZeroHash)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range all {
		got = append(got, c.Hash.String())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("log\n%v\nwant\n%v", got, want)
	}
	// Pages of 3 with the cursor.
	var paged []string
	after := plumbing.ZeroHash
	for {
		page, err := n.Log(main, 3, after)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, c := range page {
			paged = append(paged, c.Hash.String())
		}
		after = page[len(page)-1].Hash
	}
	if strings.Join(paged, " ") != strings.Join(want, " ") {
		t.Fatalf("paged log\n%v\nwant\n%v", paged, want)
	}
	if _, err := n.Log(main, 3, revParse(t, dir, "side")); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("foreign cursor: %v", err)
	}
	j, _ := json.Marshal(all[0])
	if !strings.Contains(string(j), `"hash":"`+want[0]+`"`) || !strings.Contains(string(j), `"committer":{"name":"t"`) {
		t.Fatalf("json %s", j)
	}
}

func TestAncestryMatchesGit(t *testing.T) {
	n, dir := history(t)
	revs := []string{"main", "side", "main~1", "main~1^2", "side~2", "main~3", "main~2"}
	for _, a := range revs {
		for _, b := range revs {
			ha, hb := revParse(t, dir, a), revParse(t, dir, b)
			ahead, behind, err := n.AheadBehind(ha, hb)
			if err != nil {
				t.Fatal(err)
			}
			var wa, wb int
			fmt.Sscan(git(t, dir, nil, "rev-list", "--left-right", "--count", a+"..."+b), &wa, &wb)
			if ahead != wa || behind != wb {
				t.Errorf("AheadBehind(%s, %s) = %d, %d; git %d, %d", a, b, ahead, behind, wa, wb)
			}
			is, err := n.IsAncestor(ha, hb)
			if err != nil {
				t.Fatal(err)
			}
			wantIs := exec.Command("git", "-C", dir, "merge-base", "--is-ancestor", a, b).Run() == nil
			if is != wantIs {
				t.Errorf("IsAncestor(%s, %s) = %v, git %v", a, b, is, wantIs)
			}
		}
	}
	if _, _, err := n.AheadBehind(plumbing.NewHash(strings.Repeat("12", 20)), revParse(t, dir, "main")); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("missing: %v", err)
	}
}

// Compare's patches, applied by `git apply` to base, give head.
func TestCompareAppliesWithGit(t *testing.T) {
	n := MustOpen(t)
	lines := func(k int, tag string) string {
		var sb strings.Builder
		for i := 0; i < 40; i++ {
			if i == k {
				sb.WriteString("changed " + tag + "\n")
			} else {
				fmt.Fprintf(&sb, "line %d\n", i)
			}
		}
		return sb.String()
	}
	base := []tarEntry{
		{Name: "same.txt", Body: "same\n"},
		{Name: "mod.txt", Body: lines(-1, "")},
		{Name: "gone.txt", Body: "bye\n"},
		{Name: "exec.sh", Body: "echo\n"},
		{Name: "kind", Body: "was a file\n"},
		{Name: "bin.dat", Body: "a\x00b"},
		{Name: "deep/a/b/c.txt", Body: "deep\n"},
		{Name: "untouched/x", Body: "x\n"},
		{Name: "nonl.txt", Body: "no newline"},
	}
	head := []tarEntry{
		{Name: "same.txt", Body: "same\n"},
		{Name: "mod.txt", Body: lines(5, "one")[:0] + strings.Replace(lines(5, "one"), "line 30\n", "line thirty\n", 1)},
		{Name: "new.txt", Body: "hi\n"},
		{Name: "exec.sh", Body: "echo\n", Mode: 0o755},
		{Name: "kind", Type: tar.TypeSymlink, Linkname: "same.txt"},
		{Name: "bin.dat", Body: "a\x00c"},
		{Name: "deep/a/b/c.txt", Body: "deeper\n"},
		{Name: "untouched/x", Body: "x\n"},
		{Name: "nonl.txt", Body: "no newline either"},
	}
	cb, _ := mustPush(t, n, base, nil, 1700000000)
	ch, headTree := mustPush(t, n, head, []plumbing.Hash{cb}, 1700000100)
	changes, err := n.Compare(cb, ch, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := map[string]string{}
	var patch strings.Builder
	for _, c := range changes {
		status[c.Path] = c.Status
		patch.WriteString(c.Patch)
	}
	want := map[string]string{"mod.txt": "modified", "gone.txt": "deleted", "new.txt": "added", "exec.sh": "mode_changed",
		"kind": "type_changed", "bin.dat": "modified", "deep/a/b/c.txt": "modified", "nonl.txt": "modified"}
	if fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("statuses %v\nwant %v", status, want)
	}
	for _, c := range changes {
		switch c.Path {
		case "mod.txt":
			if c.Added != 2 || c.Removed != 2 || c.Binary || !strings.HasPrefix(c.Patch, "diff --git a/mod.txt b/mod.txt\n") || strings.Count(c.Patch, "@@ -") != 2 {
				t.Fatalf("mod.txt %+v", c)
			}
		case "bin.dat":
			if !c.Binary || c.Patch != "" {
				t.Fatalf("bin.dat %+v", c)
			}
		}
	}
	// Apply everything but the binary file to a checkout of base.
	dir := t.TempDir()
	var buf bytes.Buffer
	must(t, n.Archive(context.Background(), &buf, cb))
	cmd := exec.Command("tar", "-x", "-C", dir)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	os.WriteFile(filepath.Join(dir, "bin.dat"), []byte("a\x00c"), 0o644)
	git(t, dir, nil, "init", "-q")
	os.WriteFile(filepath.Join(dir, "p.diff"), []byte(patch.String()), 0o644)
	git(t, dir, nil, "apply", "p.diff")
	os.Remove(filepath.Join(dir, "p.diff"))
	git(t, dir, nil, "add", "-A")
	if got := strings.TrimSpace(git(t, dir, nil, "write-tree")); got != headTree.String() {
		t.Fatalf("base + patches = %s, want head %s\n%s", got, headTree, patch.String())
	}
	// MaxPatchBytes.
	small, err := n.Compare(cb, ch, CompareOptions{MaxPatchBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range small {
		if c.Patch != "" || (!c.Binary && !c.PatchTruncated) {
			t.Fatalf("truncation %+v", c)
		}
	}
	all, err := n.Compare(plumbing.ZeroHash, ch, CompareOptions{MaxPatchBytes: 1})
	if err != nil || len(all) != len(head) {
		t.Fatalf("compare with the empty tree: %d changes, %v", len(all), err)
	}
	for _, c := range all {
		if c.Status != "added" || c.Patch != "" || (!c.Binary && c.Added == 0 && c.Path != "kind") {
			t.Fatalf("from empty: %+v", c)
		}
	}
	if same, _ := n.Compare(ch, ch, CompareOptions{}); len(same) != 0 {
		t.Fatalf("self compare %v", same)
	}
}

func TestCompareHugeFile(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 16 MiB file")
	}
	n := MustOpen(t)
	big := strings.Repeat("0123456789abcde\n", (maxDiffBytes/16)+1)
	cb, _ := mustPush(t, n, []tarEntry{{Name: "big", Body: big}}, nil, 1700000000)
	ch, _ := mustPush(t, n, []tarEntry{{Name: "big", Body: big + "one more\n"}}, []plumbing.Hash{cb}, 1700000100)
	changes, err := n.Compare(cb, ch, CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := maxDiffBytes/16 + 1
	if len(changes) != 1 || !changes[0].PatchTruncated || changes[0].Patch != "" || changes[0].Added != lines+1 || changes[0].Removed != lines {
		t.Fatalf("%+v", changes)
	}
}
