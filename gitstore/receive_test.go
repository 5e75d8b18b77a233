package gitstore

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

// packObjects runs `git pack-objects --stdout` in gitDir with revs on stdin.
func packObjects(tb testing.TB, gitDir string, revs string, args ...string) []byte {
	tb.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "pack-objects", "--stdout", "-q"}, args...)...)
	cmd.Stdin = strings.NewReader(revs)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("pack-objects: %v %s", err, stderr.String())
	}
	return out
}

// clientRepo makes a git work repo with files and returns dir and HEAD.
func clientCommit(tb testing.TB, dir string, files map[string]string) string {
	tb.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if strings.HasPrefix(body, "->") {
			os.Remove(p)
			if err := os.Symlink(body[2:], p); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		os.WriteFile(p, []byte(body), 0o644)
	}
	git(tb, dir, nil, "add", "-A")
	git(tb, dir, nil, "commit", "-q", "--allow-empty", "-m", "c")
	return strings.TrimSpace(git(tb, dir, nil, "rev-parse", "HEAD"))
}

func TestReceivePackFromGit(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	big := strings.Repeat("line of text that deltas well\n", 400)
	c1 := clientCommit(t, dir, map[string]string{"a/big.txt": big, "README": "hi\n", "a/link": "->big.txt"})
	gd := filepath.Join(dir, ".git")

	st, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c1+"\n", "--revs")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 6 {
		t.Fatalf("stats %+v", st)
	}
	// Incremental, thin: the changed blob is a ref delta against the
	// stored one.
	c2 := clientCommit(t, dir, map[string]string{"a/big.txt": big + "one more line\n"})
	thin := packObjects(t, gd, c2+"\n^"+c1+"\n", "--revs", "--thin")
	if m := n.Missing([]plumbing.Hash{plumbing.NewHash(c2)}); len(m) != 1 {
		t.Fatalf("missing %v", m)
	}
	st, err = n.ReceivePack(bytes.NewReader(thin), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 4 {
		t.Fatalf("thin stats %+v", st)
	}
	if _, err := n.Commit(plumbing.NewHash(c2)); err != nil {
		t.Fatal(err)
	}
	must(t, n.MirrorRef("r", "refs/heads/main", plumbing.NewHash(c2)))
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")
	// Re-sending is accepted and writes nothing.
	if st, err := n.ReceivePack(bytes.NewReader(thin), Limits{}); err != nil || st.Objects != 0 {
		t.Fatalf("resend: %+v %v", st, err)
	}
}

// badTreePack builds, with git hash-object/mktree (which do not check
// names), a commit whose tree holds bad entries, and packs it.
func badTreePack(t *testing.T, mk func(gd string) string) []byte {
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q", "--bare")
	tree := mk(dir)
	commit := strings.TrimSpace(git(t, dir, nil, "commit-tree", "-m", "bad", tree))
	return packObjects(t, dir, commit+"\n", "--revs")
}

func hashObject(t *testing.T, gd, typ, body string, literally bool) string {
	args := []string{"--git-dir=" + gd, "hash-object", "-w", "-t", typ, "--stdin"}
	if literally {
		args = append(args, "--literally")
	}
	cmd := exec.Command("git", args...)
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hash-object: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// rawTree encodes tree entries (mode, name, hex) without any checks.
func rawTree(entries ...[3]string) string {
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s\x00", e[0], e[1])
		h := plumbing.NewHash(e[2])
		b.Write(h[:])
	}
	return b.String()
}

func TestReceivePackRefusesBadTrees(t *testing.T) {
	tests := []struct {
		name string
		mk   func(gd string) string
		msg  string
	}{
		{"dotdot", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			return hashObject(t, gd, "tree", rawTree([3]string{"100644", "..", b}), true)
		}, `".." component`},
		{"dotgit", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			sub := hashObject(t, gd, "tree", rawTree([3]string{"100644", "config", b}), true)
			return hashObject(t, gd, "tree", rawTree([3]string{"40000", ".GIT", sub}), true)
		}, `".GIT" component is reserved`},
		{"escaping-symlink", func(gd string) string {
			l := hashObject(t, gd, "blob", "../../etc/passwd", false)
			sub := hashObject(t, gd, "tree", rawTree([3]string{"120000", "l", l}), true)
			return hashObject(t, gd, "tree", rawTree([3]string{"40000", "d", sub}), true)
		}, `symlink "d/l" escapes`},
		{"gitattributes-symlink", func(gd string) string {
			l := hashObject(t, gd, "blob", "x", false)
			return hashObject(t, gd, "tree", rawTree([3]string{"120000", ".gitattributes", l}), true)
		}, ".gitattributes must be a regular file"},
		{"absolute-symlink", func(gd string) string {
			l := hashObject(t, gd, "blob", "/etc/passwd", false)
			return hashObject(t, gd, "tree", rawTree([3]string{"120000", "l", l}), true)
		}, "absolute target"},
		{"unsorted", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			return hashObject(t, gd, "tree", rawTree([3]string{"100644", "b", b}, [3]string{"100644", "a", b}), true)
		}, "not in git order"},
		// A file and a directory of the same name sort apart ("a" <
		// "a-b" < "a/"): the duplicate is found however far apart.
		{"duplicate-file-dir", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			sub := hashObject(t, gd, "tree", rawTree([3]string{"100644", "f", b}), true)
			return hashObject(t, gd, "tree", rawTree([3]string{"100644", "a", b}, [3]string{"40000", "a", sub}), true)
		}, `duplicate entry "a"`},
		{"duplicate-file-dir-apart", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			sub := hashObject(t, gd, "tree", rawTree([3]string{"100644", "f", b}), true)
			return hashObject(t, gd, "tree", rawTree([3]string{"100644", "a", b}, [3]string{"100644", "a-b", b}, [3]string{"40000", "a-c", sub}, [3]string{"40000", "a", sub}, [3]string{"100644", "b", b}), true)
		}, `duplicate entry "a"`},
		{"bad-mode", func(gd string) string {
			b := hashObject(t, gd, "blob", "x", false)
			return hashObject(t, gd, "tree", rawTree([3]string{"100664", "a", b}), true)
		}, "non-standard mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := MustOpen(t)
			pack := badTreePack(t, tc.mk)
			before := storeFiles(t, n)
			_, err := n.ReceivePack(bytes.NewReader(pack), Limits{})
			if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), tc.msg) {
				t.Fatalf("err %v, want invalid_argument containing %q", err, tc.msg)
			}
			if after := storeFiles(t, n); len(after) != len(before) {
				t.Fatalf("store changed: %v", after)
			}
		})
	}
}

// A pack of a commit and its tree only: the tree's blob is neither in the
// pack nor stored.
func TestReceivePackMissingEntry(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c := clientCommit(t, dir, map[string]string{"a": "x"})
	tree := strings.TrimSpace(git(t, dir, nil, "rev-parse", "HEAD^{tree}"))
	pack := packObjects(t, filepath.Join(dir, ".git"), c+"\n"+tree+"\n")
	_, err := n.ReceivePack(bytes.NewReader(pack), Limits{})
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "neither in the pack nor stored") {
		t.Fatalf("err %v", err)
	}
	if len(storeFiles(t, n)) != 0 {
		t.Fatal("store changed")
	}
}

// A subtree that was fine deep down escapes once moved to the root.
func TestReceivePackRelocatedSubtree(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c1 := clientCommit(t, dir, map[string]string{"a/b/l": "->../../top", "top": "x"})
	gd := filepath.Join(dir, ".git")
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c1+"\n", "--revs")), Limits{}); err != nil {
		t.Fatal(err)
	}
	// New root tree reusing a/b at the top: b/l -> ../../top escapes.
	ab := strings.TrimSpace(git(t, dir, nil, "rev-parse", "HEAD:a/b"))
	root := hashObject(t, gd, "tree", rawTree([3]string{"40000", "b", ab}), false)
	c2 := strings.TrimSpace(git(t, dir, nil, "commit-tree", "-p", c1, "-m", "move", root))
	_, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c2+"\n^"+c1+"\n", "--revs", "--thin")), Limits{})
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "escapes") {
		t.Fatalf("err %v", err)
	}
}

func TestReceivePackLimits(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c := clientCommit(t, dir, map[string]string{"a": strings.Repeat("x", 5000), "b": "y"})
	pack := packObjects(t, filepath.Join(dir, ".git"), c+"\n", "--revs")
	for _, tc := range []struct {
		lim Limits
		msg string
	}{
		{Limits{MaxFileBytes: 4000}, "is 5000 bytes, over the 4000-byte limit (--max-file-bytes)"},
		{Limits{MaxFiles: 3}, "over the limit of 3"},
		{Limits{MaxUploadBytes: 100}, "larger than 100 bytes"},
		{Limits{MaxUploadBytes: 4000}, "inflates to more than 4000"},
	} {
		_, err := n.ReceivePack(bytes.NewReader(pack), tc.lim)
		if lockstep.ErrorCode(err) != lockstep.ETOOLARGE || !strings.Contains(lockstep.ErrorMessage(err), tc.msg) {
			t.Errorf("%+v: %v", tc.lim, err)
		}
	}
	if _, err := n.ReceivePack(bytes.NewReader(pack[:len(pack)-30]), Limits{}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Errorf("truncated: %v", err)
	}
	if len(storeFiles(t, n)) != 0 {
		t.Fatal("store changed")
	}
}

// A ref delta's result size is checked from the delta header, before
// anything is inflated (the same check stops a small pack from expanding
// into a huge object).
func TestReceivePackDeltaBomb(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c1 := clientCommit(t, dir, map[string]string{"a": strings.Repeat("0123456789\n", 2000)})
	gd := filepath.Join(dir, ".git")
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c1+"\n", "--revs")), Limits{}); err != nil {
		t.Fatal(err)
	}
	c2 := clientCommit(t, dir, map[string]string{"a": strings.Repeat("0123456789\n", 2000) + "more\n"})
	thin := packObjects(t, gd, c2+"\n^"+c1+"\n", "--revs", "--thin")
	_, err := n.ReceivePack(bytes.NewReader(thin), Limits{MaxFileBytes: 22002})
	if lockstep.ErrorCode(err) != lockstep.ETOOLARGE || !strings.Contains(lockstep.ErrorMessage(err), "inflates to 22005 bytes") {
		t.Fatalf("err %v", err)
	}
}

// TestReceivePackRemembersCheckedTrees: the trees of a received pack,
// whose closures validateObjects walked, are in the network's cache of
// checked trees once the pack is stored (a push's ref checks then walk
// none of them again), with their symlinks' reach; a refused pack adds
// none, and the cache keeps its bound.
func TestReceivePackRemembersCheckedTrees(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	c := clientCommit(t, dir, map[string]string{"a/b/l": "->../x", "a/x": "x", "top": "y"})
	gd := filepath.Join(dir, ".git")
	bad := clientCommit(t, dir, map[string]string{"e/l": "->../../../out"})
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, bad+"\n", "--revs")), Limits{}); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("escaping symlink: %v", err)
	}
	n.ascentMu.Lock()
	if len(n.ascentCache) != 0 {
		t.Fatalf("a refused pack left %d trees in the cache", len(n.ascentCache))
	}
	n.ascentMu.Unlock()
	if _, err := n.ReceivePack(bytes.NewReader(packObjects(t, gd, c+"\n", "--revs")), Limits{}); err != nil {
		t.Fatal(err)
	}
	n.ascentMu.Lock()
	defer n.ascentMu.Unlock()
	for path, up := range map[string]int{"": 0, "a": 0, "a/b": 1} {
		h := plumbing.NewHash(strings.TrimSpace(git(t, dir, nil, "rev-parse", c+":"+path)))
		if a, ok := n.ascentCache[h]; !ok || a.up != up {
			t.Errorf("tree %q: cached %v %+v, want up %d", path, ok, a, up)
		}
	}
}
