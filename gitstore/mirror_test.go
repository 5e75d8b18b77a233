package gitstore

import (
	"errors"
	"io/fs"
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

// TestSyncMirrorAfterACrashMidRefWrite: a server SIGKILLed while it wrote
// a mirror ref leaves "<ref>.lock" behind; restarted at once (a service
// manager restarts in well under the 10 s after which a lock counts as
// stale), its start-up SyncMirror must still write the ref. It used to
// fail with "lock ref: file exists", leaving the ref out of what git
// serves until the ref moved again or the next restart.
func TestSyncMirrorAfterACrashMidRefWrite(t *testing.T) {
	n := MustOpen(t)
	c1, _ := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "one\n"}}, nil, 1700000000)
	c2, _ := mustPush(t, n, []tarEntry{{Name: "a.txt", Body: "two\n"}}, []plumbing.Hash{c1}, 1700000001)
	must(t, n.MirrorRef("r", "refs/heads/main", c1))
	// The crash: the lock of main's next value written, not yet renamed,
	// and a new ref's lock before its first write.
	ns := filepath.Join(n.Dir(), "refs", "namespaces", "r", "refs")
	must(t, os.WriteFile(filepath.Join(ns, "heads", "main.lock"), []byte(c2.String()+"\n"), 0o644))
	must(t, os.MkdirAll(filepath.Join(ns, "tags"), 0o755))
	must(t, os.WriteFile(filepath.Join(ns, "tags", "v1.lock"), nil, 0o644))
	n.Close()

	again, err := Open(n.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.SyncMirror("r", map[string]plumbing.Hash{"refs/heads/main": c2, "refs/tags/v1": c1}); err != nil {
		t.Fatalf("start-up sync after a crash mid-write: %v", err)
	}
	for ref, want := range map[string]plumbing.Hash{"heads/main": c2, "tags/v1": c1} {
		b, err := os.ReadFile(filepath.Join(ns, filepath.FromSlash(ref)))
		if err != nil || strings.TrimSpace(string(b)) != want.String() {
			t.Errorf("mirror %s after the sync: %q, %v; want %s", ref, b, err, want)
		}
		if _, err := os.Stat(filepath.Join(ns, filepath.FromSlash(ref)) + ".lock"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the crash's lock of %s is still there: %v", ref, err)
		}
	}
}
