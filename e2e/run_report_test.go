package e2e

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunReportsReachTheServer: every `lockstep run` with a workspace
// reports to the server. A failed run, then two retries: each retry
// started from the instance the previous rollback verified clean, so the
// purity index is 100% (on /metrics and the runs page); every capture,
// failure, rollback and verification is in a run.report entry; the
// failed run's report says what it wrote inside --dir.
func TestRunReportsReachTheServer(t *testing.T) {
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
	state, roots := t.TempDir(), t.TempDir()
	run := func(want int, cmd ...string) {
		t.Helper()
		args := append([]string{"run", "--workspace", "ws", "--dir", work, "--driver", "copy", "--state-root", state,
			"--contain", "dir", "--instance-roots", roots, "--"}, cmd...)
		r := s.CLIEnv(t, s.AdminKey, work, []string{"XDG_CACHE_HOME=" + t.TempDir()}, args...)
		if r.Code != want {
			t.Fatalf("run %v: exit %d, want %d\n%s", cmd, r.Code, want, r.Stderr)
		}
		if strings.Contains(r.Stderr, "could not report") {
			t.Fatalf("run %v: the report was not sent:\n%s", cmd, r.Stderr)
		}
	}
	run(3, "sh", "-c", "echo bad > new.txt; exit 3")
	run(1, "false")
	run(0, "true")

	entries := s.api(t, s.AdminKey, "GET", "/oplog?op=run.report&repo=ws", nil, 200)["entries"].([]any)
	if len(entries) != 3 {
		t.Fatalf("%d run.report entries, want 3", len(entries))
	}
	events := map[string]int{}
	for i, e := range entries {
		d := e.(map[string]any)["details"].(map[string]any)
		if d["captured"] == true {
			events["capture"]++
		}
		if d["succeeded"] != true {
			events["failure"]++
		}
		if d["rolled_back"] == true {
			events["rollback"]++
		}
		if p := d["purity"].(map[string]any); p["checked"] == true {
			events["verification"]++
			if p["clean"] != true {
				t.Errorf("run %d: rollback not clean: %v", i, d["residue"])
			}
		}
		if wantRetry := i > 0; d["retry"] != wantRetry || d["retry_from_clean"] != wantRetry {
			t.Errorf("run %d: retry %v from clean %v, want %v", i, d["retry"], d["retry_from_clean"], wantRetry)
		}
		if d["manifest_bytes"].(float64) <= 0 || d["tree_bytes"].(float64) <= 0 {
			t.Errorf("run %d: no storage overhead measured: %v", i, d)
		}
	}
	// 3 captures, 2 failures, 2 rollbacks, 2 verifications: all logged.
	if events["capture"] != 3 || events["failure"] != 2 || events["rollback"] != 2 || events["verification"] != 2 {
		t.Fatalf("events in the oplog %v", events)
	}
	first := entries[0].(map[string]any)["details"].(map[string]any)
	wrote, _ := first["wrote"].([]any)
	found := false
	for _, w := range wrote {
		w := w.(map[string]any)
		found = found || (w["path"] == filepath.Join(work, "new.txt") && w["kind"] == "created" && w["outside"] == false)
	}
	if !found {
		t.Fatalf("the failed run's report does not say it created new.txt: %v", wrote)
	}

	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lockstep_run_retries_total{from_clean="true"} 2`, "lockstep_run_purity_index 1", "lockstep_run_rollback_seconds_count 2",
		`lockstep_run_audit_events_total{event="capture",logged="true"} 3`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
