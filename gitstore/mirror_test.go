package gitstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
)

// TestSyncMirrorSkipsBadRefs: refs an older server let into the store (a
// trailing dot, "ab" beside "ab/cd") are reported and skipped; every other
// ref is mirrored and git is happy with the result (issue 9: one such ref
// made every restart fail).
func TestSyncMirrorSkipsBadRefs(t *testing.T) {
	n := MustOpen(t)
	c, _ := mustPush(t, n, []tarEntry{{Name: "README", Body: "x\n"}}, nil, 1700000000)
	must(t, n.MirrorHEAD("base", "main"))
	err := n.SyncMirror("base", map[string]plumbing.Hash{
		"refs/heads/main":  c,
		"refs/heads/foo.":  c,
		"refs/heads/ab":    c,
		"refs/heads/ab/cd": c,
		"refs/heads/HEAD":  c, // odd, but git takes it: mirrored
		"refs/heads/zz":    plumbing.ZeroHash,
	})
	var me *MirrorError
	if !errors.As(err, &me) {
		t.Fatalf("SyncMirror = %v, want a *MirrorError", err)
	}
	var got []string
	for _, p := range me.Problems {
		got = append(got, p.Ref)
	}
	if strings.Join(got, " ") != "refs/heads/ab/cd refs/heads/foo. refs/heads/zz" {
		t.Fatalf("problems %v (%v)", got, err)
	}
	refs := git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "for-each-ref", "--format=%(refname)", "refs/namespaces/base/refs/")
	want := "refs/namespaces/base/refs/heads/HEAD\nrefs/namespaces/base/refs/heads/ab\nrefs/namespaces/base/refs/heads/main\n"
	if refs != want {
		t.Fatalf("mirrored refs:\n%s\nwant\n%s", refs, want)
	}
	if _, err := os.Stat(filepath.Join(n.Dir(), "refs/namespaces/base/HEAD")); err != nil {
		t.Fatalf("HEAD symref: %v", err)
	}
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")
}

// TestMirrorHEADWritesOnlyOnChange: start-up calls MirrorHEAD for every
// repository; rewriting an unchanged file needs free space (issue 9: no
// start on a full disk).
func TestMirrorHEADWritesOnlyOnChange(t *testing.T) {
	n := MustOpen(t)
	must(t, n.MirrorHEAD("base", "main"))
	path := filepath.Join(n.Dir(), "lockstep", "heads", "base")
	ino := func() uint64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := ino()
	must(t, n.MirrorHEAD("base", "main"))
	if ino() != before {
		t.Fatal("MirrorHEAD rewrote an unchanged heads file")
	}
	must(t, n.MirrorHEAD("base", "trunk"))
	if b, _ := os.ReadFile(path); string(b) != "refs/heads/trunk\n" {
		t.Fatalf("heads file %q after a change", b)
	}
}
