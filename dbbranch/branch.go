package dbbranch

import (
	"context"
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
	var out *Branch
	warm := false
	err := m.withLocks(ctx, []lockSpec{repoLock(rh, true), wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh)
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
			return lockstep.Errorf(lockstep.ENOTFOUND, "repository %q has no template database (bind one first)", repo)
		}
		if err := m.ensureWorkspaceRole(ctx, conn, repo, workspace); err != nil {
			return err
		}
		name := m.names.name(kindBranch, wh, workspace)
		md := meta{Kind: "branch", Repo: repo, Workspace: workspace, Created: time.Now().UTC()}
		if sp := find(rdbs, kindTplSpare); m.cfg.Warm && sp.complete() && sp.Meta.Kind == "template-spare" && sp.Meta.Gen == t.Meta.Gen {
			// Comment first, then rename: if a crash comes between the
			// rename and finishBranch, repair knows whose branch it is.
			if err := m.setComment(ctx, conn, sp.Name, md); err == nil {
				if err := m.rename(ctx, conn, sp.Name, name); err == nil {
					warm = true
				} else if !isUndefinedDB(err) && !isCode(err, "55006") {
					return err
				}
			} else if !isUndefinedDB(err) {
				return err
			}
		}
		if !warm {
			if err := m.createDB(ctx, conn, name, t.Name, false); err != nil {
				return err
			}
		}
		if err := m.finishBranch(ctx, conn, name, md); err != nil {
			return err
		}
		out = m.branchOf(workspace, &md, name)
		return nil
	})
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

func (m *Manager) ensureWorkspaceRole(ctx context.Context, conn *pgx.Conn, repo, ws string) error {
	role := m.names.name(kindRole, m.names.wsHash(ws), ws)
	owner := m.names.name(kindOwnerRole, m.names.repoHash(repo), repo)
	if err := m.ensureRole(ctx, conn, role, "LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE", password(m.cfg.Secret, ws)); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "GRANT "+ident(owner)+" TO "+ident(role)); err != nil {
		return err
	}
	return nil
}

// finishBranch makes name a usable branch: only its role may connect,
// connections allowed, the comment says whose it is. Idempotent.
func (m *Manager) finishBranch(ctx context.Context, conn *pgx.Conn, name string, md meta) error {
	md.Kind = "branch"
	role := m.names.name(kindRole, m.names.wsHash(md.Workspace), md.Workspace)
	if err := m.restrict(ctx, conn, name, role); err != nil {
		return err
	}
	if err := m.setComment(ctx, conn, name, md); err != nil {
		return err
	}
	return m.setAllowConn(ctx, conn, name, true)
}

// Branch returns workspace's existing branch. Errors: not_found.
func (m *Manager) Branch(ctx context.Context, workspace string) (*Branch, error) {
	if err := validateName("workspace", workspace); err != nil {
		return nil, err
	}
	wh := m.names.wsHash(workspace)
	var out *Branch
	err := m.withLocks(ctx, []lockSpec{wsLock(wh)}, func(conn *pgx.Conn) error {
		dbs, err := m.repairWorkspace(ctx, conn, wh)
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
//   - a branch without a comment (interrupted CREATE) is dropped;
//   - a branch whose comment names another workspace is dropped;
//   - trash (the old branch during Restore) is renamed back if the branch
//     is gone, dropped otherwise;
//   - a branch that is not finished (renamed spare: grants, comment or
//     ALLOW_CONNECTIONS missing, or left disallowed by Snapshot) is finished;
//   - incomplete snapshots and spares are dropped.
func (m *Manager) repairWorkspace(ctx context.Context, conn *pgx.Conn, wh string) ([]*dbInfo, error) {
	dbs, err := m.listDBs(ctx, conn, wh)
	if err != nil {
		return nil, err
	}
	changed := false
	b, tr := find(dbs, kindBranch), find(dbs, kindTrash)
	if b != nil && (!b.complete() || b.Meta.Workspace == "" || m.names.wsHash(b.Meta.Workspace) != wh) {
		if err := m.dropDB(ctx, conn, b); err != nil {
			return nil, err
		}
		b, changed = nil, true
	}
	if tr != nil {
		if b == nil && tr.complete() && tr.Meta.Workspace != "" && m.names.wsHash(tr.Meta.Workspace) == wh {
			name := m.names.name(kindBranch, wh, tr.Meta.Workspace)
			if err := m.rename(ctx, conn, tr.Name, name); err != nil {
				return nil, err
			}
			if err := m.finishBranch(ctx, conn, name, *tr.Meta); err != nil {
				return nil, err
			}
		} else if err := m.dropDB(ctx, conn, tr); err != nil {
			return nil, err
		}
		changed = true
	}
	if b != nil && (b.Meta.Kind != "branch" || !b.AllowConn) {
		md := *b.Meta
		if md.Kind != "branch" {
			if err := m.ensureWorkspaceRole(ctx, conn, md.Repo, md.Workspace); err != nil {
				return nil, err
			}
		}
		if err := m.finishBranch(ctx, conn, b.Name, md); err != nil {
			return nil, err
		}
		changed = true
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
		return m.listDBs(ctx, conn, wh)
	}
	return dbs, nil
}
