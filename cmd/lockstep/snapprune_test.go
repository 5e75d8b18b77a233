package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/fssnap"
)

func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

// TestSnapshotPrune: every run used to keep its snapshot forever. prune
// keeps the newest --keep, keeps failed runs' for --keep-failed, drops a
// never-started run's; --dry-run changes nothing; --json reports it.
func TestSnapshotPrune(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644)
	env := map[string]string{"LOCKSTEP_SNAPSHOT_STATE": state, "LOCKSTEP_SNAPSHOT_DRIVER": "copy", "LOCKSTEP_SNAPSHOT_DATA": t.TempDir()}
	var ids []string
	for i := 0; i < 4; i++ {
		out, errb, err := runCLI(t, env, "snapshot", "take", dir, "--json")
		if err != nil {
			t.Fatalf("take: %v %s", err, errb)
		}
		var r struct {
			Snapshot fssnap.Snapshot `json:"snapshot"`
		}
		json.Unmarshal([]byte(out), &r)
		ids = append(ids, r.Snapshot.ID)
		time.Sleep(10 * time.Millisecond) // distinct creation times order them
	}
	// ids[0] (oldest) is a failed run's, ids[3] (newest) a refused run's.
	recordRun(state, runRecord{Snapshot: ids[0], Outcome: runFailed, At: time.Now()})
	recordRun(state, runRecord{Snapshot: ids[3], Outcome: runNotRun, At: time.Now()})

	out, errb, err := runCLI(t, env, "snapshot", "prune", dir, "--keep", "1", "--dry-run", "--json")
	if err != nil {
		t.Fatalf("prune --dry-run: %v %s", err, errb)
	}
	var res struct {
		DryRun    bool        `json:"dry_run"`
		Snapshots []pruneItem `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || !res.DryRun || len(res.Snapshots) != 4 {
		t.Fatalf("prune --dry-run --json: %v\n%s", err, out)
	}
	want := map[string]string{ids[3]: "drop", ids[2]: "keep", ids[1]: "drop", ids[0]: "keep"}
	for _, it := range res.Snapshots {
		if want[it.ID] != it.Action {
			t.Errorf("snapshot %s (%s): %s (%s), want %s", it.ID, it.Outcome, it.Action, it.Reason, want[it.ID])
		}
	}
	list := func() string {
		out, _, err := runCLI(t, env, "snapshot", "list", dir)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, id := range ids {
		if !strings.Contains(list(), id) {
			t.Fatalf("--dry-run dropped %s", id)
		}
	}
	if _, errb, err := runCLI(t, env, "snapshot", "prune", dir, "--keep", "1"); err != nil {
		t.Fatalf("prune: %v %s", err, errb)
	}
	l := list()
	for id, act := range want {
		if strings.Contains(l, id) != (act == "keep") {
			t.Errorf("after prune, snapshot %s listed=%v, want %s:\n%s", id, strings.Contains(l, id), act, l)
		}
	}
	// The failed run's snapshot goes once --keep-failed has passed.
	if _, _, err := runCLI(t, env, "snapshot", "prune", dir, "--keep", "1", "--keep-failed", "1ns"); err != nil {
		t.Fatal(err)
	}
	if l := list(); strings.Contains(l, ids[0]) || !strings.Contains(l, ids[2]) {
		t.Errorf("after --keep-failed passed: %s", l)
	}
}
