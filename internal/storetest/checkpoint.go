package storetest

import (
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

func mustCheckpoint(t *testing.T, s lockstep.Store, r *lockstep.Repo, id string, sec int) *lockstep.Checkpoint {
	t.Helper()
	c := &lockstep.Checkpoint{ID: id, RepoID: r.ID, Repo: r.Name, Branch: "main", Commit: oid(sec), Tree: oid(1000 + sec), CreatedAt: at(sec)}
	must(t, s.CreateCheckpoint(bg, c, nil, ent("checkpoint.create")))
	return c
}

func checkpointTests() map[string]test {
	return map[string]test{
		"SnapshotCheckpoints": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			live := mustRepo(t, s, "live", "base")
			gone := mustRepo(t, s, "gone", "base")
			mk := func(r *lockstep.Repo, id string, sec int, db, rd string) {
				c := &lockstep.Checkpoint{ID: id, RepoID: r.ID, Repo: r.Name, Branch: "main", Commit: oid(sec), Tree: oid(1000 + sec), CreatedAt: at(sec), DBSnapshot: db, RedisSnapshot: rd}
				must(t, s.CreateCheckpoint(bg, c, nil, ent("checkpoint.create")))
			}
			mk(live, "ckpt_old", 1, "ckpt_old", "ckpt_old")
			mk(live, "ckpt_nosnap", 2, "", "")
			mk(live, "ckpt_new", 100, "ckpt_new", "")
			mk(gone, "ckpt_gone", 101, "", "ckpt_gone")
			ids := func(before int) string {
				t.Helper()
				cs, err := s.SnapshotCheckpoints(bg, at(before), 10)
				must(t, err)
				var out []string
				for _, c := range cs {
					out = append(out, c.ID+"@"+c.Repo)
				}
				return fmt.Sprint(out)
			}
			if got := ids(50); got != "[ckpt_old@live]" {
				t.Fatalf("SnapshotCheckpoints(before 50) = %s, want the old one with snapshots only", got)
			}
			setStatus(t, s, gone, lockstep.StatusAbandoned, "workspace.abandoned")
			if got := ids(50); got != "[ckpt_old@live ckpt_gone@gone]" {
				t.Fatalf("SnapshotCheckpoints after abandoning gone = %s, want its checkpoint too", got)
			}
			must(t, s.ClearCheckpointSnapshots(bg, live.ID, "ckpt_old", true, false))
			if c, _ := s.Checkpoint(bg, live.ID, "ckpt_old"); c.DBSnapshot != "" || c.RedisSnapshot != "ckpt_old" {
				t.Fatalf("after clearing the database part: %+v", c)
			}
			if got := ids(50); got != "[ckpt_old@live ckpt_gone@gone]" {
				t.Fatalf("a checkpoint with its Redis snapshot left is still listed: %s", got)
			}
			must(t, s.ClearCheckpointSnapshots(bg, live.ID, "ckpt_old", false, true))
			must(t, s.ClearCheckpointSnapshots(bg, gone.ID, "ckpt_gone", true, true))
			if got := ids(1000); got != "[ckpt_new@live]" {
				t.Fatalf("SnapshotCheckpoints(before 1000) after clearing = %s", got)
			}
			wantCode(t, s.ClearCheckpointSnapshots(bg, live.ID, "ckpt_missing", true, true), lockstep.ENOTFOUND)
		},
		"ClearCheckpointSnapshots": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			other := mustRepo(t, s, "other", "base")
			c := &lockstep.Checkpoint{ID: "ckpt_1", RepoID: ws.ID, Repo: ws.Name, Branch: "main", Commit: oid(1), Tree: oid(1001), CreatedAt: at(1), DBSnapshot: "db_1", RedisSnapshot: "rd_1"}
			must(t, s.CreateCheckpoint(bg, c, nil, ent("checkpoint.create")))
			// Each part on its own; the record (commit, tree) stays.
			must(t, s.ClearCheckpointSnapshots(bg, ws.ID, "ckpt_1", false, true))
			if got, err := s.Checkpoint(bg, ws.ID, "ckpt_1"); err != nil || got.DBSnapshot != "db_1" || got.RedisSnapshot != "" {
				t.Fatalf("after clearing the Redis part: %+v, %v", got, err)
			}
			must(t, s.ClearCheckpointSnapshots(bg, ws.ID, "ckpt_1", true, false))
			if got, err := s.Checkpoint(bg, ws.ID, "ckpt_1"); err != nil || got.DBSnapshot != "" || got.Commit != oid(1) || got.Tree != oid(1001) {
				t.Fatalf("after clearing the database part: %+v, %v", got, err)
			}
			// Unknown id, or another workspace's: not_found.
			wantCode(t, s.ClearCheckpointSnapshots(bg, ws.ID, "ckpt_missing", true, true), lockstep.ENOTFOUND)
			wantCode(t, s.ClearCheckpointSnapshots(bg, other.ID, "ckpt_1", true, true), lockstep.ENOTFOUND)
		},
		"CreateCheckpoint": func(t *testing.T, s lockstep.Store) {
			base := mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			hookOn(t, s, base, "hook_all", "*")
			c := &lockstep.Checkpoint{ID: "ckpt_1", RepoID: ws.ID, Repo: ws.Name, Branch: "main", Commit: oid(1), Tree: oid(2), DBSnapshot: "snap_db", RedisSnapshot: "snap_redis", FSSnapshot: "snap-fs",
				Label: "before refactor", KeyName: "agent", DurationMS: 12.5}
			e := ent("checkpoint.create")
			must(t, s.CreateCheckpoint(bg, c, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "checkpoint.created"}}, e))
			// The entry's id becomes c.OpID; the event and the entry are
			// written with the checkpoint.
			if e.ID == "" || c.OpID != e.ID || c.CreatedAt.IsZero() {
				t.Fatalf("checkpoint %+v, entry id %q", c, e.ID)
			}
			got, err := s.Checkpoint(bg, ws.ID, "ckpt_1")
			must(t, err)
			if got.Repo != "ws" || got.Branch != "main" || got.Commit != oid(1) || got.Tree != oid(2) || got.DBSnapshot != "snap_db" || got.RedisSnapshot != "snap_redis" || got.FSSnapshot != "snap-fs" ||
				got.Label != "before refactor" || got.KeyName != "agent" || got.OpID != e.ID || got.DurationMS != 12.5 || !got.CreatedAt.Equal(c.CreatedAt) {
				t.Fatalf("round trip %+v, want %+v", got, c)
			}
			if len(deliveries(t, s, "hook_all")) != 1 {
				t.Fatal("the checkpoint's event was not enqueued")
			}
			wantOps(t, s, "checkpoint.create", 1)
			// The id is unique; a refused checkpoint writes nothing.
			dup := *c
			dup.OpID = ""
			err = s.CreateCheckpoint(bg, &dup, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "checkpoint.created"}}, ent("checkpoint.create"))
			wantCode(t, err, lockstep.ECONFLICT)
			wantOps(t, s, "checkpoint.create", 1)
			if len(deliveries(t, s, "hook_all")) != 1 {
				t.Fatal("a refused checkpoint enqueued its event")
			}
		},
		"Checkpoint": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			other := mustRepo(t, s, "other", "base")
			mustCheckpoint(t, s, ws, "ckpt_1", 1)
			_, err := s.Checkpoint(bg, ws.ID, "ckpt_none")
			wantCode(t, err, lockstep.ENOTFOUND)
			// Another repository's checkpoint is not found through this one.
			_, err = s.Checkpoint(bg, other.ID, "ckpt_1")
			wantCode(t, err, lockstep.ENOTFOUND)
			if c, err := s.Checkpoint(bg, ws.ID, "ckpt_1"); err != nil || c.ID != "ckpt_1" || c.RepoID != ws.ID {
				t.Fatalf("Checkpoint = %+v, %v", c, err)
			}
		},
		"Checkpoints": func(t *testing.T, s lockstep.Store) {
			mustRepo(t, s, "base", "")
			ws := mustRepo(t, s, "ws", "base")
			other := mustRepo(t, s, "other", "base")
			mustCheckpoint(t, s, ws, "ckpt_b", 2)
			mustCheckpoint(t, s, ws, "ckpt_c", 3)
			mustCheckpoint(t, s, ws, "ckpt_a", 1)
			mustCheckpoint(t, s, other, "ckpt_x", 4)
			list := func(limit int) string {
				cs, err := s.Checkpoints(bg, ws.ID, limit)
				must(t, err)
				var out []string
				for _, c := range cs {
					out = append(out, c.ID)
				}
				return fmt.Sprint(out)
			}
			if got := list(0); got != "[ckpt_c ckpt_b ckpt_a]" {
				t.Fatalf("Checkpoints = %s, want newest first", got)
			}
			if got := list(2); got != "[ckpt_c ckpt_b]" {
				t.Fatalf("limit 2: %s", got)
			}
			base, _ := s.RepoByName(bg, "base")
			if cs, err := s.Checkpoints(bg, base.ID, 0); err != nil || len(cs) != 0 {
				t.Fatalf("none: %v %v", cs, err)
			}
		},
	}
}
