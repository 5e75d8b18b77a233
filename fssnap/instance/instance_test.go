package instance

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func config(t testing.TB) Config {
	d := t.TempDir()
	c := Config{CrontabDir: filepath.Join(d, "cron"), AtSpool: filepath.Join(d, "at"), UserUnits: filepath.Join(d, "home/.config/systemd/user"),
		Roots: []string{filepath.Join(d, "root"), filepath.Join(d, "home")}}
	for _, p := range []string{c.CrontabDir, c.AtSpool, c.UserUnits, c.Roots[0]} {
		os.MkdirAll(p, 0o755)
	}
	os.WriteFile(filepath.Join(c.CrontabDir, "root"), []byte("old\n"), 0o600)
	os.WriteFile(filepath.Join(c.Roots[0], "kept"), []byte("k"), 0o644)
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{filepath.Join(c.Roots[0], "kept"), filepath.Join(c.CrontabDir, "root"), c.Roots[0]} {
		os.Chtimes(p, old, old)
	}
	// ctimes cannot be set back: let them age past the check's slack.
	time.Sleep(100 * time.Millisecond)
	return c
}

// TestCheckFindsEachKind: crontab, at job, user unit and file changes are
// residue, named; an unchanged machine is clean.
func TestCheckFindsEachKind(t *testing.T) {
	c := config(t)
	pre := Capture(c)
	if r := Check(pre, c, "", true); len(r.Items) != 0 {
		t.Fatalf("nothing changed, residue %v", r.Items)
	}
	os.WriteFile(filepath.Join(c.CrontabDir, "root"), []byte("new\n"), 0o600)
	os.WriteFile(filepath.Join(c.AtSpool, "a1"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(c.UserUnits, "x.service"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(c.Roots[0], "new"), []byte("x"), 0o600)
	r := Check(pre, c, "", true)
	got := map[string]string{}
	for _, it := range r.Items {
		got[it.Kind+" "+filepath.Base(it.Path)] = it.Detail
	}
	for _, k := range []string{"crontab root", "at_job a1", "systemd_unit x.service", "file new"} {
		if _, ok := got[k]; !ok {
			t.Errorf("missing %s in %v", k, r.Items)
		}
	}
	if _, ok := got["file kept"]; ok {
		t.Errorf("an unchanged file reported: %v", r.Items)
	}
}

// TestCheckAttributesOrphans: an orphan adopted by this process (as a
// child subreaper) that appeared after Capture is residue with its
// listening socket; processes of other pre-existing parents are not.
func TestCheckAttributesOrphans(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs python3")
	}
	if err := prctlSubreaper(); err != nil {
		t.Skipf("no subreaper: %v", err)
	}
	c := Config{}
	pre := Capture(c)
	ready := filepath.Join(t.TempDir(), "ready")
	cmd := exec.Command("/bin/sh", "-c", `(setsid env -i /usr/bin/python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); open(sys.argv[1],"w").write("up"); time.sleep(600)' `+ready+` lockstep-instance-test &)`)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		if b, _ := os.ReadFile(ready); len(b) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := Check(pre, c, "", false)
	var pid int
	var sock bool
	for _, it := range r.Items {
		if it.Kind == KindProcess && strings.Contains(it.Detail, "lockstep-instance-test") {
			pid = it.PID
		}
		if it.Kind == KindSocket && strings.HasPrefix(it.Detail, "tcp 127.0.0.1:") {
			sock = true
		}
	}
	if pid != 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
	}
	if pid == 0 || !sock {
		t.Fatalf("the orphaned listener is not residue: %v", r.Items)
	}
}

// BenchmarkVerify: capture before a run and the whole-instance check
// after it (processes, sockets, spools; the file walk is for dir-only runs
// and is benchmarked separately on a 2,000-entry root).
func BenchmarkVerify(b *testing.B) {
	c := Defaults(os.Getenv("HOME"))
	c.Roots = nil
	for b.Loop() {
		pre := Capture(c)
		Check(pre, c, "", false)
	}
}

func BenchmarkVerifyFileWalk2k(b *testing.B) {
	c := config(b)
	for i := 0; i < 2000; i++ {
		d := filepath.Join(c.Roots[0], "d"+string(rune('a'+i%20)))
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "f"+time.Now().Format("150405.000000000")), nil, 0o644)
	}
	pre := Capture(c)
	for b.Loop() {
		Check(pre, c, "", true)
	}
}
