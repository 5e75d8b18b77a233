package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep/fssnap/contain"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// killMarked kills every live process whose command line carries marker
// and returns what it killed.
func killMarked(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cl), marker) {
			continue
		}
		stat, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		var pid int
		fmt.Sscan(e.Name(), &pid)
		syscall.Kill(pid, syscall.SIGKILL)
		out = append(out, strings.ReplaceAll(string(cl), "\x00", " "))
	}
	return out
}

// damageScript is issue 22's example plus a systemd user unit, a crontab
// entry, an at job and a process that double-forks, clears its
// environment, leaves the run's cgroup and listens on a TCP port. The
// locations come from the environment (P_TMP, P_VARTMP, P_OPT, P_CRON,
// P_AT); the daemon writes "up" to $READY when it listens.
const damageScript = `echo bad >> a.txt
mkdir -p "$P_TMP" "$P_VARTMP"
echo ghost > "$P_TMP/probe"
echo x > ~/.probe
echo x > "$P_VARTMP/probe"
mkdir -p "$P_OPT/app" && echo changed > "$P_OPT/app/conf"
mkdir -p ~/.config/systemd/user && printf '[Service]\nExecStart=/bin/true\n' > ~/.config/systemd/user/probe.service
mkdir -p "$P_CRON" && echo '* * * * * /bin/true' > "$P_CRON/root"
mkdir -p "$P_AT" && echo 'true' > "$P_AT/a0001"
(setsid env -i /bin/sh -c 'for f in /sys/fs/cgroup/unified/cgroup.procs /sys/fs/cgroup/cgroup.procs; do [ -w $f ] && echo $$ > $f && break; done; exec /usr/bin/python3 -c "import socket,sys,time; s=socket.socket(); s.bind((\"127.0.0.1\",0)); s.listen(); open(sys.argv[1],\"w\").write(\"up\"); time.sleep(600)" '"$READY $MARK"'' &)
for i in $(seq 500); do [ -s "$READY" ] && break; sleep 0.02; done
exit 1`

type containReport struct {
	RunID     string `json:"run_id"`
	Succeeded bool   `json:"succeeded"`
	Contain   string `json:"contain"`
	Purity    struct {
		Checked, Clean, Instance bool
	} `json:"purity"`
	Residue []struct {
		Kind, Path, Detail string
		PID                int
	} `json:"residue"`
	Outside []struct{ Path, Kind string } `json:"outside"`
}

// TestRunContainsTheInstance: issue 22's "done when". As root, a failed
// contained run leaves nothing anywhere — the writes to /tmp, ~, /var/tmp,
// /opt, the user unit, the crontab and at spools land in the run's
// overlays and are discarded, the escaped listener is killed — and the
// report says clean. The same damage with --contain=dir (on locations the
// test owns) is reported item by item as residue, with exit status 10, the
// workspace marked failed, and --on-residue quarantine refusing the next
// run until cleared.
func TestRunContainsTheInstance(t *testing.T) {
	if err := contain.Available(); err != nil {
		t.Skipf("instance containment unavailable: %v", err)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 for the listener")
	}
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"a.txt": "a\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app"); err != nil {
		t.Fatalf("push: %v %s", err, out)
	}
	for _, ws := range []string{"ws1", "ws2"} {
		s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": ws}, 201)
	}
	mark := "lockstep-contain-" + randHex(6)
	t.Cleanup(func() { killMarked(mark) })

	run := func(t *testing.T, ws, work, home string, env []string, args ...string) (containReport, e2ekit.CLIResult) {
		t.Helper()
		env = append(env, "HOME="+home, "MARK="+mark, "XDG_CACHE_HOME="+t.TempDir())
		all := append([]string{"run", "--workspace", ws, "--dir", work, "--driver", "copy", "--json"}, args...)
		all = append(all, "--", "sh", "-c", damageScript)
		r := s.CLIEnv(t, s.AdminKey, work, env, all...)
		var rep containReport
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
			t.Fatalf("report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
		}
		return rep, r
	}

	t.Run("contained", func(t *testing.T) {
		tmp := t.TempDir()
		work, home, state, shared := filepath.Join(tmp, "work"), filepath.Join(tmp, "home"), filepath.Join(tmp, "state"), filepath.Join(tmp, "shared")
		for _, d := range []string{home, shared} {
			os.MkdirAll(d, 0o755)
		}
		if out, err := s.cli(t, s.AdminKey, "checkout", "ws1", work); err != nil {
			t.Fatalf("checkout: %v %s", err, out)
		}
		// The real system locations, with names no one else uses: the
		// run may write them only in its overlays.
		sys := map[string]string{"P_TMP": "/tmp/" + mark, "P_VARTMP": "/var/tmp/" + mark, "P_OPT": "/opt/" + mark,
			"P_CRON": "/var/spool/cron/crontabs/" + mark, "P_AT": "/var/spool/cron/atjobs/" + mark}
		t.Cleanup(func() { // only reached if containment failed: never leave them
			for _, p := range sys {
				os.RemoveAll(p)
			}
		})
		env := []string{"READY=" + filepath.Join(shared, "ready")}
		for k, v := range sys {
			env = append(env, k+"="+v)
		}
		env = append(env, "P_TMP=/tmp/"+mark+"-t") // a file directly in /tmp
		env = append(env, "P_VARTMP=/var/tmp/"+mark+"-v")
		rep, r := run(t, "ws1", work, home, env, "--state-root", state, "--share", shared)
		if r.Code != 1 {
			t.Fatalf("exit %d, want the command's 1\n%s\n%s", r.Code, r.Stdout, r.Stderr)
		}
		if rep.Contain != "instance" || !rep.Purity.Checked || !rep.Purity.Clean || !rep.Purity.Instance || len(rep.Residue) > 0 {
			t.Fatalf("report: %+v\n%s", rep, r.Stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(work, "a.txt")); string(b) != "a\n" {
			t.Fatalf("a.txt not restored: %q", b)
		}
		if _, err := os.Stat(filepath.Join(shared, "ready")); err != nil {
			t.Fatalf("the listener never came up (the test proves nothing): %v\n%s", err, r.Stderr)
		}
		for _, p := range []string{"/tmp/" + mark + "-t", "/var/tmp/" + mark + "-v", "/opt/" + mark, sys["P_CRON"], sys["P_AT"],
			filepath.Join(home, ".probe"), filepath.Join(home, ".config")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s exists after the failed contained run", p)
			}
		}
		if left := killMarked(mark); len(left) > 0 {
			t.Errorf("the run's listener survived: %v", left)
		}
		listed := map[string]bool{}
		for _, c := range rep.Outside {
			listed[c.Path] = true
		}
		for _, p := range []string{"/tmp/" + mark + "-t/probe", "/opt/" + mark + "/app/conf", filepath.Join(home, ".probe"),
			filepath.Join(home, ".config/systemd/user/probe.service"), sys["P_CRON"] + "/root"} {
			if !listed[p] {
				t.Errorf("the report does not list %s among the writes outside --dir: %+v", p, rep.Outside)
			}
		}
		// Forensics: what the run wrote, inside and outside --dir.
		show := s.CLIEnv(t, s.AdminKey, "", nil, "run", "show", rep.RunID, "--state-root", state, "--json")
		var rec struct {
			Inside, Outside []struct{ Path, Kind, Type string }
		}
		if show.Code != 0 || json.Unmarshal([]byte(show.Stdout), &rec) != nil {
			t.Fatalf("run show: %d %s %s", show.Code, show.Stdout, show.Stderr)
		}
		if len(rec.Inside) != 1 || rec.Inside[0].Path != filepath.Join(work, "a.txt") || rec.Inside[0].Kind != "modified" || len(rec.Outside) < 5 {
			t.Fatalf("run show: %+v", rec)
		}
	})

	t.Run("dir only", func(t *testing.T) {
		tmp := t.TempDir()
		work, home, state, shared := filepath.Join(tmp, "work"), filepath.Join(tmp, "home"), filepath.Join(tmp, "state"), filepath.Join(tmp, "shared")
		root := filepath.Join(tmp, "machine") // the "system" locations, owned by the test
		for _, d := range []string{home, shared, root} {
			os.MkdirAll(d, 0o755)
		}
		if out, err := s.cli(t, s.AdminKey, "checkout", "ws2", work); err != nil {
			t.Fatalf("checkout: %v %s", err, out)
		}
		loc := map[string]string{"P_TMP": root + "/tmp", "P_VARTMP": root + "/var/tmp", "P_OPT": root + "/opt",
			"P_CRON": root + "/spool/crontabs", "P_AT": root + "/spool/atjobs"}
		for _, k := range []string{"P_TMP", "P_VARTMP", "P_OPT", "P_CRON", "P_AT"} {
			os.MkdirAll(loc[k], 0o755)
		}
		env := []string{"READY=" + filepath.Join(shared, "ready"), "LOCKSTEP_INSTANCE_ROOTS=" + root + ":" + home,
			"LOCKSTEP_CRONTAB_DIR=" + loc["P_CRON"], "LOCKSTEP_AT_SPOOL=" + loc["P_AT"]}
		for k, v := range loc {
			env = append(env, k+"="+v)
		}
		qfile := filepath.Join(tmp, "quarantine-ran")
		rep, r := run(t, "ws2", work, home, env, "--state-root", state, "--contain=dir", "--share", shared,
			"--on-residue", "quarantine", "--machine", "e2e-box-"+mark, "--quarantine-command", "cp \"$LOCKSTEP_RESIDUE_FILE\" "+qfile)
		if r.Code != 10 {
			t.Fatalf("exit %d, want 10 (residue)\n%s\n%s", r.Code, r.Stdout, r.Stderr)
		}
		if rep.Contain != "dir" || rep.Purity.Clean || !strings.Contains(r.Stderr, "ROLLBACK IMPURE") {
			t.Fatalf("report: %+v\n%s", rep, r.Stderr)
		}
		kinds := map[string][]string{}
		for _, it := range rep.Residue {
			kinds[it.Kind] = append(kinds[it.Kind], it.Path+it.Detail)
		}
		for _, k := range []string{"process", "socket", "crontab", "at_job", "systemd_unit", "file"} {
			if len(kinds[k]) == 0 {
				t.Errorf("no %s residue reported: %+v", k, rep.Residue)
			}
		}
		files := strings.Join(kinds["file"], " ")
		for _, p := range []string{loc["P_TMP"] + "/probe", loc["P_VARTMP"] + "/probe", loc["P_OPT"] + "/app/conf", home + "/.probe"} {
			if !strings.Contains(files, p) {
				t.Errorf("file residue does not name %s: %v", p, kinds["file"])
			}
		}
		if b, _ := os.ReadFile(filepath.Join(work, "a.txt")); string(b) != "a\n" {
			t.Fatalf("a.txt not restored: %q", b)
		}
		if len(killMarked(mark)) == 0 {
			t.Errorf("the residue process was not alive to be killed: the report named %v", kinds["process"])
		}
		// The workspace records the residue.
		ws := s.api(t, s.AdminKey, "GET", "/repos/ws2", nil, 200)
		if ws["status"] != "failed" {
			t.Errorf("workspace after residue: %v", ws)
		}
		// Quarantine: the command ran, the next run refuses until cleared.
		if _, err := os.Stat(qfile); err != nil {
			t.Errorf("--quarantine-command did not run: %v", err)
		}
		again := s.CLIEnv(t, s.AdminKey, work, []string{"XDG_CACHE_HOME=" + t.TempDir()}, "run", "--no-server", "--dir", work, "--driver", "copy", "--state-root", state, "--", "true")
		if again.Code != 11 || !strings.Contains(again.Stderr, "quarantined") {
			t.Fatalf("a run on a quarantined machine: exit %d\n%s", again.Code, again.Stderr)
		}
		// Marked dirty with the server too: the run's report names the
		// machine as quarantined, the runs page lists it.
		quarantineReports := func() (quarantined, cleared int) {
			t.Helper()
			for _, e := range s.api(t, s.AdminKey, "GET", "/oplog?op=run.report&repo=ws2", nil, 200)["entries"].([]any) {
				d := e.(map[string]any)["details"].(map[string]any)
				if d["machine"] != "e2e-box-"+mark {
					t.Errorf("run report of machine %v, want e2e-box-%s", d["machine"], mark)
				}
				if d["quarantined"] == true {
					quarantined++
				}
				if d["unquarantine"] == true {
					cleared++
				}
			}
			return quarantined, cleared
		}
		if q, c := quarantineReports(); q != 1 || c != 0 {
			t.Errorf("server: %d quarantined and %d cleared reports, want 1 and 0", q, c)
		}
		if r := s.CLIEnv(t, s.AdminKey, "", nil, "run", "unquarantine", "--state-root", state); r.Code != 0 || !strings.Contains(r.Stdout, "cleared on the server") {
			t.Fatalf("unquarantine: %d %s %s", r.Code, r.Stdout, r.Stderr)
		}
		if q, c := quarantineReports(); q != 1 || c != 1 {
			t.Errorf("server after unquarantine: %d quarantined and %d cleared reports, want 1 and 1", q, c)
		}
		again = s.CLIEnv(t, s.AdminKey, work, []string{"XDG_CACHE_HOME=" + t.TempDir()}, "run", "--no-server", "--dir", work, "--driver", "copy", "--state-root", state, "--", "true")
		if again.Code != 0 {
			t.Fatalf("a run after unquarantine: exit %d\n%s", again.Code, again.Stderr)
		}
	})
}

// TestRunWithoutBranchingDoesNotRetry: issue 22 item 6. Against a server
// without database branching, `lockstep run --workspace W -- false` asks
// for the workspace's database once, gets not_configured and goes on: no
// retry (before, a 503 with Retry-After: 5 was retried six times, 25 s).
func TestRunWithoutBranchingDoesNotRetry(t *testing.T) {
	t.Parallel()
	s := startRunServer(t)
	s.api(t, s.AdminKey, "POST", "/repos", map[string]string{"name": "app"}, 201)
	base := t.TempDir()
	writeTree(t, base, map[string]string{"a.txt": "a\n"})
	if out, err := s.cli(t, s.AdminKey, "push", base, "--repo", "app"); err != nil {
		t.Fatalf("push: %v %s", err, out)
	}
	s.api(t, s.AdminKey, "POST", "/repos/app/forks", map[string]string{"name": "ws"}, 201)
	work := t.TempDir()
	if out, err := s.cli(t, s.AdminKey, "checkout", "ws", work); err != nil {
		t.Fatalf("checkout: %v %s", err, out)
	}
	r := s.CLIEnv(t, s.AdminKey, work, []string{"XDG_CACHE_HOME=" + t.TempDir()}, "run", "--workspace", "ws", "--dir", work,
		"--driver", "copy", "--state-root", t.TempDir(), "--", "false")
	if r.Code != 1 {
		t.Fatalf("exit %d, want false's 1\n%s", r.Code, r.Stderr)
	}
	if strings.Contains(r.Stderr, "retrying") || strings.Contains(r.Stderr, "DATABASE_URL") {
		t.Fatalf("the run retried (or complained about) the database it does not have:\n%s", r.Stderr)
	}
	// The answer itself: 501 not_configured, no Retry-After.
	resp := s.Call(t, "GET", "/api/v1/repos/ws/database", s.AdminKey, nil, "")
	e2ekit.RequireError(t, "database without branching", resp, 501, "not_configured")
}
