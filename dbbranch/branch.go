package dbbranch

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep"
)

// Branch is a workspace's database.
type Branch struct {
	Workspace    string
	Repo         string
	Database     string
	Role         string
	DSN          string // postgres://role:password@host:port/database, host and port of the admin URL
	CreatedAt    time.Time
	RestoredFrom string // the snapshot of the last Restore, if any
}

func (m *Manager) branchOf(ws string, md *meta, db string) *Branch {
	role := m.names.name(kindRole, m.names.wsHash(ws), ws)
	return &Branch{Workspace: ws, Repo: md.Repo, Database: db, Role: role,
		DSN: m.dsn(role, password(m.cfg.Secret, ws), db), CreatedAt: md.Created, RestoredFrom: md.Restored}
}

// CreateBranch creates workspace's database branch from repo's template
// copy, and its LOGIN role. With a ready warm spare this is a rename; the
// spare is then refilled in the background.
//
// The role is a member (INHERIT) of the repository's owner role, which owns
// every object copied from the template, so the agent's migrations can
// ALTER and DROP them and CREATE new tables (the owner role owns the
// schemas; the role has CREATE on its database). The role has CONNECT on
// its branch only: PUBLIC's CONNECT is revoked on every Lockstep database,
// and the owner role itself can connect nowhere.
//
// Errors: invalid_argument for bad names; not_found if repo has no
// template; already_exists if the workspace already has a branch;
// unavailable if the server is down.
func (m *Manager) CreateBranch(ctx context.Context, repo, workspace string) (*Branch, error) {
	if err := validateName("repository", repo); err != nil {
		return nil, err
	}
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	rh, wh := m.names.repoHash(repo), m.names.wsHash(workspace)
	m.noteFork(rh, time.Now())
	var out *Branch
	warm := false
	err := m.withLocks(ctx, []lockSpec{repoLock(rh, true), wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		if b := find(dbs, kindBranch); b != nil {
			return lockstep.Errorf(lockstep.ECONFLICT, "workspace %q already has a database branch (%s)", workspace, b.Name)
		}
		rdbs, err := m.listDBs(ctx, conn, rh)
		if err != nil {
			return err
		}
		t := find(rdbs, kindTemplate)
		if !t.complete() {
			if find(rdbs, kindStaging) != nil {
				return errRepoNeedsRepair
			}
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %q has no template database (bind one first)", repo)
		}
		name := m.names.name(kindBranch, wh, workspace)
		md := meta{Kind: "branch", Repo: repo, Workspace: workspace, Created: time.Now().UTC()}
		roleSQL := m.workspaceRoleSQL(repo, workspace)
		for _, sp := range readySpares(rdbs, t) {
			if !m.cfg.Warm {
				break
			}
			if !m.claim(sp.Name) {
				continue // a concurrent CreateBranch here is renaming it
			}
			// One transaction: role, rename, grants, comment. Another
			// process may have taken the spare (3D000): try the next one,
			// then go cold.
			stmts := append(slices.Clone(roleSQL), renameSQL(sp.Name, name))
			stmts = append(stmts, m.finishBranchSQL(name, md)...)
			err := m.run(ctx, conn, stmts...)
			m.unclaim(sp.Name)
			if err == nil {
				warm = true
				break
			} else if !isUndefinedDB(err) && !isCode(err, "55006") {
				return fmt.Errorf("rename spare into branch: %w", err)
			}
		}
		if !warm {
			if err := m.run(ctx, conn, roleSQL...); err != nil {
				return fmt.Errorf("role for %s: %w", workspace, err)
			}
			if err := m.createDB(ctx, conn, name, t.Name, false); err != nil {
				return err
			}
			if err := m.finishBranch(ctx, conn, name, md); err != nil {
				return err
			}
		}
		out = m.branchOf(workspace, &md, name)
		return nil
	})
	if err == errRepoNeedsRepair {
		if err := m.repairRepoLocked(ctx, rh); err != nil {
			return nil, err
		}
		return m.CreateBranch(ctx, repo, workspace)
	}
	if err != nil {
		return nil, err
	}
	if warm {
		m.warmBranches.Add(1)
	} else {
		m.coldBranches.Add(1)
	}
	m.scheduleTemplateSpare(rh)
	return out, nil
}

// workspaceRoleSQL creates or updates the workspace's LOGIN role (the
// password follows the secret) and makes it a member of the repository's
// owner role.
func (m *Manager) workspaceRoleSQL(repo, ws string) []string {
	role := m.names.name(kindRole, m.names.wsHash(ws), ws)
	owner := m.names.name(kindOwnerRole, m.names.repoHash(repo), repo)
	attrs := "LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD " + quoteLiteral(scramVerifier(m.cfg.Secret, ws, password(m.cfg.Secret, ws)))
	do := "DO $do$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = " + quoteLiteral(role) + ") THEN " +
		"ALTER ROLE " + ident(role) + " " + attrs + "; ELSE CREATE ROLE " + ident(role) + " " + attrs + "; END IF; END $do$"
	return []string{do, "GRANT " + ident(owner) + " TO " + ident(role)}
}

// finishBranchSQL makes name a usable branch: only its role may connect,
// the comment says whose it is, connections allowed. Idempotent.
func (m *Manager) finishBranchSQL(name string, md meta) []string {
	md.Kind = "branch"
	role := m.names.name(kindRole, m.names.wsHash(md.Workspace), md.Workspace)
	return append(restrictSQL(name, role), commentSQL(name, md), allowSQL(name, true))
}

func (m *Manager) finishBranch(ctx context.Context, conn *pgx.Conn, name string, md meta) error {
	if err := m.run(ctx, conn, m.finishBranchSQL(name, md)...); err != nil {
		return fmt.Errorf("finish branch %s: %w", name, err)
	}
	return nil
}

// Branch returns workspace's existing branch. Errors: not_found.
func (m *Manager) Branch(ctx context.Context, workspace string) (*Branch, error) {
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	wh := m.names.wsHash(workspace)
	var out *Branch
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh, false)
		if err != nil {
			return err
		}
		b := find(dbs, kindBranch)
		if b == nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no database branch", workspace)
		}
		out = m.branchOf(workspace, b.Meta, b.Name)
		return nil
	})
	return out, err
}

// DropBranch drops workspace's branch, its snapshots, its spare copies and
// its role. Errors: not_found if the workspace has none of them.
func (m *Manager) DropBranch(ctx context.Context, workspace string) error {
	if err := validateName("workspace", workspace); err != nil {
		return err
	}
	wh := m.names.wsHash(workspace)
	return m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		found, err := m.dropWorkspace(ctx, conn, wh, workspace)
		if err == nil && !found {
			return lockstep.Errorf(lockstep.ENOTFOUND, "workspace %q has no database branch", workspace)
		}
		return err
	})
}

// dropWorkspace drops every database of the workspace hash and its role.
// Caller holds the workspace lock.
func (m *Manager) dropWorkspace(ctx context.Context, conn *pgx.Conn, wh, ws string) (found bool, err error) {
	dbs, err := m.listDBs(ctx, conn, wh)
	if err != nil {
		return false, err
	}
	// The branch first: it is the only one agents connect to.
	for _, k := range []byte{kindBranch, kindTrash, kindRestSpare, kindSnapshot} {
		for _, d := range dbs {
			if d.Kind == k {
				found = true
				if err := m.dropDB(ctx, conn, d); err != nil {
					return found, err
				}
			}
		}
	}
	role := m.names.name(kindRole, wh, ws)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
		return found, err
	}
	if exists {
		if _, err := conn.Exec(ctx, "DROP ROLE IF EXISTS "+ident(role)); err != nil {
			return found, err
		}
	}
	return found || exists, nil
}

// DropRepo drops every branch (with snapshots, spares and roles) made from
// repo's template, the template copy, its spare and the owner role.
// Errors: not_found if the repository has nothing.
func (m *Manager) DropRepo(ctx context.Context, repo string) error {
	if err := validateName("repository", repo); err != nil {
		return err
	}
	rh := m.names.repoHash(repo)
	return m.withLocks(ctx, []lockSpec{repoLock(rh, false)}, func(conn *pgx.Conn) error {
		all, err := m.listDBs(ctx, conn, "")
		if err != nil {
			return err
		}
		found := false
		wss := map[string]string{} // hash → workspace
		for _, d := range all {
			if d.Meta != nil && d.Meta.Repo == repo && d.Meta.Workspace != "" && m.names.wsHash(d.Meta.Workspace) == d.Hash {
				wss[d.Hash] = d.Meta.Workspace
			}
		}
		for wh, ws := range wss {
			unlock, err := m.lockOn(ctx, conn, lockKey(tagWS, wh))
			if err != nil {
				return err
			}
			f, err := m.dropWorkspace(ctx, conn, wh, ws)
			unlock()
			if err != nil {
				return err
			}
			found = found || f
		}
		for _, d := range all {
			if d.Hash == rh && (d.Kind == kindTemplate || d.Kind == kindStaging || d.Kind == kindTplSpare) {
				found = true
				if err := m.dropDB(ctx, conn, d); err != nil {
					return err
				}
			}
		}
		owner := m.names.name(kindOwnerRole, rh, repo)
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", owner).Scan(&exists); err != nil {
			return err
		}
		if exists {
			found = true
			if _, err := conn.Exec(ctx, "DROP ROLE "+ident(owner)); err != nil {
				return err
			}
		}
		if !found {
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %q has no template or branches", repo)
		}
		return nil
	})
}

// repairWorkspace finishes or undoes what a crash left in a workspace's
// databases and returns them. Caller holds the workspace lock.
//
//   - a branch without a comment (interrupted CREATE), or whose comment
//     names another workspace, is dropped;
//   - if the branch is gone, the newest trash (the old branch a Restore
//     renamed aside) is renamed back;
//   - a branch left refusing connections (interrupted Snapshot or Restore)
//     is finished again;
//   - incomplete snapshots and spares are dropped;
//   - with dropTrash, trash and debris are dropped (otherwise the
//     background does it, so a foreground call does not pay a DROP
//     DATABASE, which forces a checkpoint).
func (m *Manager) repairWorkspace(ctx context.Context, conn *pgx.Conn, wh string, dropTrash bool) ([]*dbInfo, error) {
	all, err := m.listDBs(ctx, conn, wh)
	if err != nil {
		return nil, err
	}
	changed := false
	if dropTrash {
		for _, d := range all {
			if d.debris() {
				if err := m.dropDB(ctx, conn, d); err != nil {
					return nil, err
				}
				changed = true
			}
		}
	}
	dbs := withoutDebris(all)
	b := find(dbs, kindBranch)
	if b != nil && (!b.complete() || b.Meta.Workspace == "" || m.names.wsHash(b.Meta.Workspace) != wh) {
		if err := m.dropDB(ctx, conn, b); err != nil {
			return nil, err
		}
		b, changed = nil, true
	}
	var trash []*dbInfo // oldest first: names end with the time in hex
	for _, d := range dbs {
		if d.Kind == kindTrash {
			trash = append(trash, d)
		}
	}
	if b == nil {
		for i := len(trash) - 1; i >= 0; i-- {
			tr := trash[i]
			if !tr.complete() || tr.Meta.Workspace == "" || m.names.wsHash(tr.Meta.Workspace) != wh {
				continue
			}
			name := m.names.name(kindBranch, wh, tr.Meta.Workspace)
			stmts := append([]string{renameSQL(tr.Name, name)}, m.finishBranchSQL(name, *tr.Meta)...)
			if err := m.run(ctx, conn, stmts...); err != nil {
				return nil, fmt.Errorf("put back %s: %w", tr.Name, err)
			}
			trash = append(trash[:i], trash[i+1:]...)
			changed = true
			break
		}
	} else if !b.AllowConn || b.Meta.Kind != "branch" {
		if err := m.finishBranch(ctx, conn, b.Name, *b.Meta); err != nil {
			return nil, err
		}
		changed = true
	}
	if dropTrash {
		for _, tr := range trash {
			if err := m.dropDB(ctx, conn, tr); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	for _, d := range dbs {
		if (d.Kind == kindSnapshot || d.Kind == kindRestSpare) && !d.complete() {
			if err := m.dropDB(ctx, conn, d); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	if changed {
		all, err := m.listDBs(ctx, conn, wh)
		return withoutDebris(all), err
	}
	return dbs, nil
}
