package fstest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Nobody is the unprivileged user (uid and gid 65534) the tests of the
// user-namespace containment run their child as: CI runs as root, which
// would never take that path.
const Nobody = 65534

const envNobody = "LOCKSTEP_TEST_NOBODY_STAGE"

// MaybeNobody is called by TestMain first thing. In the first stage of
// AsNobody (root, in a mount namespace of its own made by clone) it
// detaches every mount under the temporary directory (other tests'
// mounts, which would change what a user namespace can overlay there:
// see contain.PlanUserns), drops to Nobody and re-executes the binary;
// it never returns then.
func MaybeNobody() {
	if os.Getenv(envNobody) != "1" {
		return
	}
	fail := func(what string, err error) {
		os.Stderr.WriteString("fstest nobody: " + what + ": " + err.Error() + "\n")
		os.Exit(3)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		fail("make / private", err)
	}
	tmp := filepath.Clean(os.TempDir())
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fail("mountinfo", err)
	}
	var under []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], tmp+"/") {
			under = append(under, f[4])
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	for _, p := range under {
		unix.Unmount(p, unix.MNT_DETACH) // already gone with its parent: fine
	}
	if err := syscall.Setgroups(nil); err != nil {
		fail("setgroups", err)
	}
	if err := syscall.Setgid(Nobody); err != nil {
		fail("setgid", err)
	}
	if err := syscall.Setuid(Nobody); err != nil {
		fail("setuid", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envNobody+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, envNobody+"=2")
	self, _ := os.Executable()
	fail("exec", syscall.Exec(self, os.Args, env))
}

// IsNobody reports whether this process is AsNobody's child.
func IsNobody() bool { return os.Getenv(envNobody) == "2" }

// Traversable lets Nobody reach dir: dir and its parents up to the
// temporary directory (the test's own) get o+x.
func Traversable(tb testing.TB, dir string) {
	tb.Helper()
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); d != tmp && d != "/" && strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			tb.Fatal(err)
		}
	}
}

// OwnedDir makes a directory under a new temporary directory owned by
// Nobody and reachable by it.
func OwnedDir(tb testing.TB, name string) string {
	tb.Helper()
	d := filepath.Join(tb.TempDir(), name)
	if err := os.Mkdir(d, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chown(d, Nobody, Nobody); err != nil {
		tb.Fatal(err)
	}
	Traversable(tb, d)
	return d
}

// AsNobody runs the test named test of this test binary as Nobody (a
// copy of the binary in a temporary directory, in a mount namespace of
// its own without the mounts under the temporary directory), with env
// added to the environment; it returns the child's standard output and
// error. Skipped unless root.
func AsNobody(tb testing.TB, test string, env []string) (stdout, stderr []byte, err error) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root to start its child as nobody (uid 65534)")
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	bin := filepath.Join(OwnedDir(tb, "bin"), "test.bin")
	in, err := os.Open(self)
	if err != nil {
		tb.Fatal(err)
	}
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(out, in)
		out.Close()
	}
	in.Close()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^"+test+"$", "-test.v")
	cmd.Env = append(append(os.Environ(), env...), envNobody+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.Bytes(), e.Bytes(), err
}
