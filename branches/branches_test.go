package branches_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/branches"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// repos is a fixed set of repository rows (what the repositories
// service answers): base "app", its workspace "ws" and a fork of it.
type repos map[string]*lockstep.Repo

func (r repos) Repo(_ context.Context, name string) (*lockstep.Repo, error) {
	if x, ok := r[name]; ok {
		return x, nil
	}
	return nil, lockstep.Errorf(lockstep.ENOTFOUND, "no repository %s", name)
}

// TestRoomFollowsAWorkspace runs the rules on a real branch server: a
// fork (and a fork of the fork) gets a database from the base's template,
// a finished workspace's is never re-created, a checkpoint snapshots it,
// the promote callback refreshes the template and drops the promoted
// workspace's branch, and a purge records what it dropped.
func TestRoomFollowsAWorkspace(t *testing.T) {
	ctx := context.Background()
	tplURL := testenv.MustPostgresDB(t)
	u, err := url.Parse(tplURL)
	if err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	rand.Read(b[:])
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: testenv.PostgresURL(t), Prefix: "r" + hex.EncodeToString(b[:]), Secret: []byte("test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ws := range []string{"ws", "ws2", "done"} {
			m.DropBranch(context.Background(), ws)
		}
		m.DropRepo(context.Background(), "app")
		m.Close()
	})
	rs := repos{
		"app":  {Name: "app"},
		"ws":   {Name: "ws", ForkOf: "app", Status: lockstep.StatusActive},
		"ws2":  {Name: "ws2", ForkOf: "ws", Status: lockstep.StatusActive},
		"done": {Name: "done", ForkOf: "app", Status: lockstep.StatusAbandoned},
	}
	room := branches.New(dbbranch.Brancher{M: m}, nil, rs, nil, nil)
	t.Cleanup(room.Close)
	if err := m.BindTemplate(ctx, "app", strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatal(err)
	}

	room.AfterFork(ctx, "app", "ws")
	room.AfterFork(ctx, "ws", "ws2") // a fork of a fork: the root's template
	room.Wait()
	for _, ws := range []string{"ws", "ws2"} {
		if _, err := m.Branch(ctx, ws); err != nil {
			t.Fatalf("no database branch for %s after the fork: %v", ws, err)
		}
	}
	if _, err := room.Database(ctx, rs["done"]); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("finished workspace: %v, want not_found (never re-created)", err)
	}
	if _, err := m.Branch(ctx, "done"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("a finished workspace's branch was created: %v", err)
	}

	snaps, err := room.Snapshot(ctx, rs["ws"], "cp1")
	if err != nil || snaps.Database != "cp1" || snaps.Redis != "" {
		t.Fatalf("snapshot: %+v %v", snaps, err)
	}
	if err := room.RestoreDatabase(ctx, "ws", "cp1"); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if err := room.RestoreRedis(ctx, "ws", "cp1"); lockstep.ErrorCode(err) != lockstep.ENOTCONFIGURED {
		t.Fatalf("redis restore with redis off: %v, want not_configured", err)
	}

	room.AfterPromote(ctx, "app", "ws")
	room.Wait()
	if _, err := m.Branch(ctx, "ws"); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("promoted workspace's branch after AfterPromote: %v, want not_found", err)
	}

	details := map[string]any{}
	room.Purge(ctx, "ws2", details)
	if details["database_branch"] != "dropped" || details["redis_branch"] != "off" {
		t.Fatalf("purge details %v", details)
	}
	room.Purge(ctx, "ws2", details)
	if details["database_branch"] != "none" {
		t.Fatalf("second purge details %v", details)
	}
}
