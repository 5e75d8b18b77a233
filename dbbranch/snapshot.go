package dbbranch

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
)

// Snapshot is a copy of a branch at a checkpoint.
type Snapshot struct {
	ID        string
	Database  string
	SizeBytes int64
	CreatedAt time.Time
}

// Snapshot copies workspace's branch into snapshot id (CREATE DATABASE …
// TEMPLATE branch). A snapshot is a checkpoint boundary: new connections to
// the branch are refused for the duration of the copy and the agent's open
// sessions are terminated (a template must have no other session); they
// reconnect with the same DSN afterwards. Beyond MaxSnapshots the oldest
// snapshots are dropped, in the background (DROP DATABASE forces a
// checkpoint, which can take seconds on a busy cluster).
//
// Errors: invalid_argument for a bad name or id; not_found if the
// workspace has no branch; already_exists if the id is taken.
func (m *Manager) Snapshot(ctx context.Context, workspace, id string) (*Snapshot, error) {
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	if err := validateSnapshotID(id); err != nil {
		return nil, err
	}
	wh := m.names.wsHash(workspace)
	var out *Snapshot
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		b := find(dbs, kindBranch)
		if b == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no database branch", workspace)
		}
		name := m.names.snapshot(wh, id)
		for _, d := range dbs {
			if d.Name == name {
				return lockstep.Errorf(lockstep.ECONFLICT, "workspace %q already has snapshot %q", workspace, id)
			}
		}
		if err := m.setAllowConn(ctx, conn, b.Name, false); err != nil {
			return err
		}
		// Re-allow even if the copy fails (a crash is repaired later).
		reallowed := false
		defer func() {
			if !reallowed {
				m.setAllowConn(context.WithoutCancel(ctx), conn, b.Name, true)
			}
		}()
		if err := m.terminate(ctx, conn, b.Name); err != nil {
			return err
		}
		if err := m.createDB(ctx, conn, name, b.Name, false); err != nil {
			return err
		}
		md := meta{Kind: "snapshot", Repo: b.Meta.Repo, Workspace: workspace, Snapshot: id, Created: time.Now().UTC()}
		stmts := append(restrictSQL(name, ""), commentSQL(name, md), allowSQL(b.Name, true))
		if err := m.run(ctx, conn, stmts...); err != nil {
			return fmt.Errorf("finish snapshot %s: %w", name, err)
		}
		reallowed = true
		size, err := m.dbSize(ctx, conn, name)
		if err != nil {
			return err
		}
		out = &Snapshot{ID: id, Database: name, SizeBytes: size, CreatedAt: md.Created}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.scheduleWorkspace(wh)
	return out, nil
}

// Snapshots lists workspace's snapshots, oldest first. Errors: not_found if
// the workspace has no branch.
func (m *Manager) Snapshots(ctx context.Context, workspace string) ([]Snapshot, error) {
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	wh := m.names.wsHash(workspace)
	var out []Snapshot
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		if find(dbs, kindBranch) == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no database branch", workspace)
		}
		for _, d := range m.live(snapshotsOf(dbs)) {
			size, err := m.dbSize(ctx, conn, d.Name)
			if err != nil {
				return err
			}
			out = append(out, Snapshot{ID: d.Meta.Snapshot, Database: d.Name, SizeBytes: size, CreatedAt: d.Meta.Created})
		}
		return nil
	})
	return out, err
}

// DropSnapshot drops one snapshot. Errors: not_found if it does not exist.
func (m *Manager) DropSnapshot(ctx context.Context, workspace, id string) error {
	if err := validateName("workspace", workspace); err != nil {
		return err
	}
	if err := validateSnapshotID(id); err != nil {
		return err
	}
	wh := m.names.wsHash(workspace)
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		name := m.names.snapshot(wh, id)
		for _, d := range dbs {
			if d.Name == name {
				if err := m.dropDB(ctx, conn, d); err != nil {
					return err
				}
				if sp := find(dbs, kindRestSpare); sp != nil && sp.Meta.Snapshot == id {
					return m.dropDB(ctx, conn, sp)
				}
				return nil
			}
		}
		return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no snapshot %q", workspace, id)
	})
	if err == nil {
		m.scheduleWorkspace(wh)
	}
	return err
}

// Restore replaces workspace's branch with a copy of snapshot id, under the
// same name, so the agent's DSN stays valid; the agent's sessions are
// terminated. If the warm spare is a copy of that snapshot (the latest, by
// default) this is two renames; otherwise CREATE DATABASE … TEMPLATE
// snapshot. The old branch is renamed aside first and dropped afterwards
// (in the background with Warm), so a failure puts it back.
//
// Errors: invalid_argument; not_found if the snapshot does not exist;
// unavailable if a session could not be ended.
func (m *Manager) Restore(ctx context.Context, workspace, id string) (*Branch, error) {
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	if err := validateSnapshotID(id); err != nil {
		return nil, err
	}
	wh := m.names.wsHash(workspace)
	var out *Branch
	warm := false
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		var snap *dbInfo
		for _, d := range m.live(snapshotsOf(dbs)) {
			if d.Meta.Snapshot == id {
				snap = d
			}
		}
		if snap == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no snapshot %q", workspace, id)
		}
		name := m.names.name(kindBranch, wh, workspace)
		trash := m.trashName(wh, 0)
		md := meta{Kind: "branch", Repo: snap.Meta.Repo, Workspace: workspace, Created: time.Now().UTC(), Restored: id}
		b := find(dbs, kindBranch)
		sp := find(dbs, kindRestSpare)
		useSpare := m.cfg.Warm && sp.complete() && sp.Meta.Snapshot == id
		// swap: one transaction puts the old branch aside (closed) and the
		// spare in its place with grants and comment.
		swap := func() error {
			var stmts []string
			if b != nil {
				stmts = append(stmts, renameSQL(b.Name, trash), allowSQL(trash, false))
			}
			stmts = append(stmts, renameSQL(sp.Name, name))
			stmts = append(stmts, m.finishBranchSQL(name, md)...)
			return m.run(ctx, conn, stmts...)
		}
		if b != nil {
			md.Created = b.Meta.Created
			// No session on the branch: swap right away. A session that
			// arrives meanwhile makes RENAME fail (55006) and the swap roll
			// back; then close, terminate, and go on as usual.
			idle := false
			if useSpare {
				if err := conn.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = $1)", b.Name).Scan(&idle); err != nil {
					return err
				}
			}
			if idle && swap() == nil {
				warm = true
			} else {
				if err := m.setAllowConn(ctx, conn, b.Name, false); err != nil {
					return err
				}
				if err := m.terminate(ctx, conn, b.Name); err != nil {
					m.setAllowConn(context.WithoutCancel(ctx), conn, b.Name, true)
					return err
				}
			}
		} else if err := m.run(ctx, conn, m.workspaceRoleSQL(snap.Meta.Repo, workspace)...); err != nil {
			return fmt.Errorf("role for %s: %w", workspace, err)
		}
		if useSpare && !warm && swap() == nil {
			warm = true
		}
		if !warm {
			if b != nil {
				if err := m.run(ctx, conn, renameSQL(b.Name, trash)); err != nil {
					if !isCode(err, "55006") {
						// Cancelled, connection lost …: the branch is untouched.
						m.setAllowConn(context.WithoutCancel(ctx), conn, b.Name, true)
						return fmt.Errorf("restore %s: put the branch aside: %w", workspace, err)
					}
					// A session outlived pg_terminate_backend's wait: drop
					// (FORCE) instead; the restore then cannot be undone.
					if err := m.dropDB(ctx, conn, b); err != nil {
						m.setAllowConn(context.WithoutCancel(ctx), conn, b.Name, true)
						return lockstep.E("dbbranch.Restore", lockstep.EUNAVAILABLE, fmt.Sprintf("restore %s: cannot end the sessions on %s", workspace, b.Name), err)
					}
					b = nil
				}
			}
			cctx := ctx
			if b == nil {
				// The old branch is gone: a cancelled caller must not leave
				// the workspace without one, so the copy runs to the end.
				cctx = context.WithoutCancel(ctx)
			}
			if err := m.createDB(cctx, conn, name, snap.Name, false); err != nil {
				if b != nil { // put the old branch back
					m.run(context.WithoutCancel(ctx), conn, renameSQL(trash, name), allowSQL(name, true))
				}
				return err
			}
			if err := m.finishBranch(ctx, conn, name, md); err != nil {
				return err
			}
		}
		out = m.branchOf(workspace, &md, name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if warm {
		m.warmRestores.Add(1)
	} else {
		m.coldRestores.Add(1)
	}
	m.scheduleWorkspace(wh) // also drops the old branch
	return out, nil
}

func (m *Manager) scheduleWorkspace(wh string) {
	m.schedule("workspace:"+wh, func(ctx context.Context) error { return m.maintainWorkspace(ctx, wh) })
}

// maintainWorkspace is the workspace's background work. Under the
// workspace lock it repairs the workspace, marks as debris the old branches
// Restore put aside and the snapshots beyond MaxSnapshots, and, with Warm,
// keeps one spare copy of the latest snapshot with the branch's grants
// already applied. Then, without the lock (a DROP DATABASE forces a
// checkpoint and can take seconds), it drops the debris.
func (m *Manager) maintainWorkspace(ctx context.Context, wh string) error {
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		b := find(dbs, kindBranch)
		var junk []*dbInfo
		for _, d := range dbs {
			if d.Kind == kindTrash && b != nil && d.Meta != nil && !d.Invalid {
				junk = append(junk, d)
			}
		}
		snaps := snapshotsOf(dbs)
		for len(snaps) > m.cfg.MaxSnapshots {
			junk = append(junk, snaps[0])
			snaps = snaps[1:]
		}
		var latest *dbInfo
		if len(snaps) > 0 {
			latest = snaps[len(snaps)-1]
		}
		sp := find(dbs, kindRestSpare)
		if sp != nil && (!m.cfg.Warm || latest == nil || sp.Meta.Snapshot != latest.Meta.Snapshot || b == nil) {
			junk = append(junk, sp)
			sp = nil
		}
		if len(junk) > 0 {
			// Renamed out of the way too, so the names can be reused at once.
			var stmts []string
			for i, d := range junk {
				name := d.Name
				if d.Kind != kindTrash {
					name = m.trashName(wh, i)
					stmts = append(stmts, renameSQL(d.Name, name))
				}
				stmts = append(stmts, commentSQL(name, meta{Kind: "debris", Workspace: d.Meta.Workspace, Created: time.Now().UTC()}))
			}
			if err := m.run(ctx, conn, stmts...); err != nil {
				return fmt.Errorf("mark debris: %w", err)
			}
		}
		if !m.cfg.Warm || sp != nil || latest == nil || b == nil {
			return nil
		}
		ws := latest.Meta.Workspace
		name := m.names.name(kindRestSpare, wh, ws)
		if err := m.createDB(ctx, conn, name, latest.Name, false); err != nil {
			return err
		}
		md := meta{Kind: "restore-spare", Repo: latest.Meta.Repo, Workspace: ws, Snapshot: latest.Meta.Snapshot, Created: time.Now().UTC()}
		stmts := append(restrictSQL(name, m.names.name(kindRole, wh, ws)), commentSQL(name, md))
		if err := m.run(ctx, conn, stmts...); err != nil {
			return fmt.Errorf("finish restore spare %s: %w", name, err)
		}
		m.refills.Add(1)
		return nil
	})
	if err != nil {
		return err
	}
	return m.withLocks(ctx, nil, func(conn *pgx.Conn) error {
		dbs, err := m.listDBs(ctx, conn, wh)
		if err != nil {
			return err
		}
		for _, d := range dbs {
			if d.debris() {
				if err := m.dropDB(ctx, conn, d); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// trashName is a fresh name for a database on its way out; names sort by
// time, so repair can find the newest old branch.
func (m *Manager) trashName(wh string, i int) string {
	return m.names.prefix + "_" + string(kindTrash) + "_" + wh + fmt.Sprintf("_%016x", time.Now().UnixNano()+int64(i))
}

// Usage is the size of workspace's branch database and of its snapshots
// (pg_database_size each). Errors: not_found if the workspace has no
// branch.
func (m *Manager) Usage(ctx context.Context, workspace string) (lockstep.BranchSize, error) {
	if err := validateName("workspace", workspace); err != nil {
		return lockstep.BranchSize{}, err
	}
	wh := m.names.wsHash(workspace)
	var out lockstep.BranchSize
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		b := find(dbs, kindBranch)
		if b == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no database branch", workspace)
		}
		if out.Bytes, err = m.dbSize(ctx, conn, b.Name); err != nil {
			return err
		}
		for _, d := range m.live(snapshotsOf(dbs)) {
			size, err := m.dbSize(ctx, conn, d.Name)
			if err != nil {
				return err
			}
			out.Snapshots++
			out.SnapshotBytes += size
		}
		return nil
	})
	return out, err
}
