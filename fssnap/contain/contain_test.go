package contain

import (
	"encoding/json"
	"os"
	"strings"

	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
)

func TestMain(m *testing.M) {
	MaybeHelper()
	fstest.MaybeNobody()
	os.Exit(m.Run())
}

// TestPlan: writable local mounts are overlaid, /proc and /sys bound with
// their submounts, read-only, pseudo and remote mounts written through
// with a reason, shared and excluded paths left to their own bind, and
// of mounts stacked on one path only the visible one counts.
func TestPlan(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	mounts := []MountInfo{
		{Path: "/proc", FSType: "proc"},
		{Path: "/proc/sys/fs/binfmt_misc", FSType: "binfmt_misc"},
		{Path: "/", FSType: "ext4"},
		{Path: "/dev", FSType: "devtmpfs"},
		{Path: "/dev/shm", FSType: "tmpfs"},
		{Path: "/dev/shm", FSType: "tmpfs", RO: true}, // stacked: this one is visible
		{Path: "/sys", FSType: "sysfs"},
		{Path: "/sys/fs/cgroup", FSType: "tmpfs"},
		{Path: "/mnt/ro", FSType: "ext4", RO: true},
		{Path: "/mnt/nfs", FSType: "nfs4"},
		{Path: "/mnt/fuse", FSType: "fuse.sshfs"},
		{Path: "/work/dir", FSType: "overlay"},
		{Path: "/work/dir/sub", FSType: "tmpfs"},
		{Path: "/var/lib/state/contain/x", FSType: "tmpfs"},
		{Path: file, FSType: "ext4"},
		{Path: "/tmp", FSType: "tmpfs"},
		{Path: "/tmp/other-run/contain/y", FSType: "tmpfs", Source: "lockstep-contain"}, // another run's layers
	}
	got := map[string]string{}
	for _, m := range Plan(mounts, []string{"/work/dir"}, []string{"/var/lib/state"}) {
		got[m.Path] = m.Mode
		if m.Mode == ModeBind && !m.RO(mounts) && m.Reason == "" {
			t.Errorf("%s written through without a reason", m.Path)
		}
	}
	want := map[string]string{"/proc": ModeRBind, "/sys": ModeRBind, "/": ModeOverlay, "/dev": ModeBind, "/dev/shm": ModeBind,
		"/mnt/ro": ModeBind, "/mnt/nfs": ModeBind, "/mnt/fuse": ModeBind, file: ModeBind, "/tmp": ModeOverlay}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plan\n got %v\nwant %v", got, want)
	}
	if unescape(`/a\040b`) != "/a b" {
		t.Fatal("mountinfo escapes")
	}
}

// RO reports whether m is read-only in mounts (the plan gives no reason
// for those: read-only needs none).
func (m Mount) RO(mounts []MountInfo) bool {
	ro := false
	for _, mi := range mounts {
		if mi.Path == m.Path {
			ro = mi.RO
		}
	}
	return ro
}

func prepare(tb testing.TB) *Session {
	tb.Helper()
	if err := Available(); err != nil {
		tb.Skipf("containment unavailable: %v", err)
	}
	s, err := Prepare(Options{StateRoot: tb.TempDir(), Cwd: "/"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Discard() }) // before TempDir's removal
	return s
}

// TestChangesAndDiscard: a contained command's writes (a file, a
// deletion) are listed from the upper directories and never reach the
// real filesystem; Discard removes them and Discarded proves it.
func TestChangesAndDiscard(t *testing.T) {
	s := prepare(t)
	real := t.TempDir()
	os.WriteFile(filepath.Join(real, "old"), []byte("x"), 0o644)
	self, _ := os.Executable()
	args := s.Wrap(self, []string{"sh", "-c", "echo new > " + real + "/new && rm " + real + "/old"})
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = sysProcAttr(s)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("contained command: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(real, "new")); err == nil {
		t.Fatal("the write reached the real filesystem")
	}
	if _, err := os.Stat(filepath.Join(real, "old")); err != nil {
		t.Fatal("the deletion reached the real filesystem")
	}
	ch, err := s.Changes()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, c := range ch {
		kinds[c.Path] = c.Kind
	}
	if kinds[filepath.Join(real, "new")] != "created" || kinds[filepath.Join(real, "old")] != "deleted" {
		t.Fatalf("changes %+v", ch)
	}
	if err := s.Discard(); err != nil {
		t.Fatal(err)
	}
	if err := s.Discarded(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkContainSetupTeardown: the tmpfs and plan (Prepare), one
// contained /bin/true (namespace, overlays, chroot, exec) and Discard.
func BenchmarkContainSetupTeardown(b *testing.B) {
	self, _ := os.Executable()
	for b.Loop() {
		s := prepare(b)
		args := s.Wrap(self, []string{"true"})
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = sysProcAttr(s)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		if err := s.Discard(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContainSetupTeardownUserns: the same by MechanismUserns
// (clone CLONE_NEWUSER|CLONE_NEWNS, the split plan, a userxattr overlay
// per entry, layers as directories, removed), the layers under the state
// root or (LOCKSTEP_BENCH_LAYERS=tmpfs) on a tmpfs. Run
// as root, which takes the same steps; the unprivileged run is
// TestUsernsChangesAndDiscard's.
func BenchmarkContainSetupTeardownUserns(b *testing.B) {
	if err := AvailableUserns(); err != nil {
		b.Skipf("user namespaces unavailable: %v", err)
	}
	self, _ := os.Executable()
	state := b.TempDir()
	layers := state // the state root's filesystem; LOCKSTEP_BENCH_LAYERS=tmpfs: a tmpfs, as UserLayerRoot finds one
	if os.Getenv("LOCKSTEP_BENCH_LAYERS") == "tmpfs" {
		layers = fstest.Tmpfs(b)
	}
	for b.Loop() {
		s, err := Prepare(Options{StateRoot: state, LayerRoot: layers, Cwd: "/", Mechanism: MechanismUserns})
		if err != nil {
			b.Fatal(err)
		}
		args := s.Wrap(self, []string{"true"})
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = sysProcAttr(s)
		if out, err := cmd.CombinedOutput(); err != nil {
			s.Discard()
			b.Fatalf("%v %s", err, out)
		}
		if err := s.Discard(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContainCheck: listing a run's writes and proving its layers
// are gone (the containment check after a rollback).
func BenchmarkContainCheck(b *testing.B) {
	s := prepare(b)
	defer s.Discard()
	for b.Loop() {
		if _, err := s.Changes(); err != nil {
			b.Fatal(err)
		}
		s.Discarded() // exists: the cost of the proof is what is measured
	}
}

// TestWalkSkipsVanished: an entry of an upper directory that is gone by
// the time the walk reaches it (a process of the run still dying, a
// copy-up finishing) is skipped; before, the walk stopped there and the
// run's listing lost every later entry, e.g. a whole /tmp.
func TestWalkSkipsVanished(t *testing.T) {
	upper := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(upper, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Session{Mounts: []Mount{{Path: "/real", Mode: ModeOverlay, Upper: upper}}}
	var seen []string
	err := s.walk(func(real, _ string, _ os.FileInfo, _, _ bool) error {
		if real == "/real/a" {
			os.Remove(filepath.Join(upper, "b")) // read by the walk, gone before it is visited
		}
		seen = append(seen, real)
		return nil
	})
	if err != nil || !reflect.DeepEqual(seen, []string{"/real/a", "/real/c"}) {
		t.Fatalf("walk = %v, %v; want /real/a and /real/c", seen, err)
	}
}

// TestHelperSkipsVanishedEntry: an entry of the plan removed before the
// helper mounts it (another process's temporary file, as in /dev/shm
// while other tests run) is skipped, not made read-only: the command
// runs. Before the fix the helper failed with "read-only …: no such file
// or directory" (exit 126).
func TestHelperSkipsVanishedEntry(t *testing.T) {
	s := prepare(t)
	dir := t.TempDir()
	vanished := filepath.Join(dir, "vanished")
	s.Mounts = append(s.Mounts, Mount{Path: vanished, Mode: ModeReadOnly}, Mount{Path: vanished + "-dir", Mode: ModeBind})
	spec, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Base, "spec.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	args := s.Wrap(self, []string{"sh", "-c", "echo ran; test ! -e " + vanished})
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = sysProcAttr(s)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ran") {
		t.Fatalf("contained command with a vanished entry: %v %s", err, out)
	}
	if err := s.Discard(); err != nil {
		t.Fatal(err)
	}
}
