package replica_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/filebucket"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitobj/gitobjtest"
	"github.com/lockstep-hq/lockstep/replica"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestContract runs the object-store contract on replica.Network with
// its packs in a file bucket (a temp directory) and its pack list in
// SQLite: no server needed.
func TestContract(t *testing.T) {
	gitobjtest.Run(t, func(t *testing.T) gitobj.Store {
		dir := t.TempDir()
		db, err := sqlstore.Open(context.Background(), filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		b, err := filebucket.New(filepath.Join(dir, "bucket"))
		if err != nil {
			t.Fatal(err)
		}
		m := replica.New(replica.Config{Objects: b, Packs: db, Grace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		t.Cleanup(m.Close)
		n, err := m.Open(filepath.Join(dir, "cache", "net.git"), gitobj.OpenOptions{Fsync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	})
}

// TestContractS3 runs the same contract on the production setup: packs
// in the real S3 server of internal/testenv (versitygw), the pack list
// in Postgres.
func TestContractS3(t *testing.T) {
	gitobjtest.Run(t, func(t *testing.T) gitobj.Store {
		e := newEnv(t)
		return e.replica(time.Second).open(t, "net")
	})
}
