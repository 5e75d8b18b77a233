package txrun_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/fssnap"
	"github.com/lockstep-hq/lockstep/fssnap/internal/fstest"
	"github.com/lockstep-hq/lockstep/fssnap/txrun"
)

// TestForensicsRecordAndRetention: a failed run (dir only) keeps what it
// wrote inside --dir — created, modified, deleted, with sizes — readable
// by run id; records older than the window are pruned, newer ones kept.
func TestForensicsRecordAndRetention(t *testing.T) {
	drv, dir, opts := fstest.Driver(t, fssnap.NameCopy, func(d string) {
		os.WriteFile(filepath.Join(d, "a"), []byte("a"), 0o644)
		os.WriteFile(filepath.Join(d, "gone"), []byte("12345"), 0o644)
	})
	keep := t.TempDir()
	rep, err := txrun.Run(context.Background(), txrun.Options{Dir: dir, Args: []string{"sh", "-c", "echo more >> a; rm gone; printf 123 > new; exit 3"},
		Driver: drv, Snap: opts, Forensics: keep})
	if err != nil || rep.Succeeded || rep.Forensics == "" {
		t.Fatalf("run: %v %+v", err, rep)
	}
	// The copy driver repaired by the forensics' comparison: the
	// rollback is exact and verified.
	if !rep.Purity.Checked || !rep.Purity.Clean {
		t.Fatalf("rollback purity %+v", rep.Purity)
	}
	for name, want := range map[string]string{"a": "a", "gone": "12345"} {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != want {
			t.Fatalf("%s after rollback: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Fatalf("new after rollback: %v", err)
	}
	rec, err := txrun.LoadRecord(keep, rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sizes := map[string]int64{}
	for _, c := range rec.Inside {
		got[filepath.Base(c.Path)] = c.Kind
		sizes[filepath.Base(c.Path)] = c.Size
	}
	if got["a"] != "modified" || got["gone"] != "deleted" || got["new"] != "created" || sizes["new"] != 3 || sizes["gone"] != 5 || rec.Status != "exit code 3" {
		t.Fatalf("record %+v", rec)
	}
	if _, err := txrun.LoadRecord(keep, "../etc"); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("a path as run id: %v", err)
	}
	if _, err := txrun.LoadRecord(keep, "nosuch"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("unknown run: %v", err)
	}
	// Retention: within the window kept, beyond it dropped.
	if n, err := txrun.PruneRecords(keep, time.Hour, time.Now()); err != nil || n != 0 {
		t.Fatalf("prune within the window: %d %v", n, err)
	}
	if n, err := txrun.PruneRecords(keep, time.Hour, time.Now().Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune beyond the window: %d %v", n, err)
	}
	if _, err := txrun.LoadRecord(keep, rep.RunID); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("after prune: %v", err)
	}
}
