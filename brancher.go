package lockstep

import "context"

// DatabaseBranch is a workspace's own Postgres database, copied from its
// base repository's template.
type DatabaseBranch struct {
	Workspace string
	Repo      string // the base repository whose template it was copied from
	Database  string
	Role      string
	DSN       string // postgres://role:password@host:port/database
}

// DatabaseTemplate is a base repository's binding to a template database.
type DatabaseTemplate struct {
	Repo   string
	Source string // the user's database the template was copied from
}

// Brancher is the database-branching seam: it gives every workspace its
// own copy of its base repository's template database, and snapshots of
// it for checkpoints. The workspaces service creates and drops branches
// as workspaces are forked and abandoned, the checkpoints service
// snapshots and restores them. dbbranch (CREATE DATABASE … TEMPLATE on a
// Postgres server) is the implementation.
//
// Error contract: not_found when the template, branch or snapshot does not
// exist; conflict when CreateBranch finds the branch already created (a
// concurrent create); invalid_argument for a bad name; unavailable when the
// branch server cannot be reached; anything else is internal.
type Brancher interface {
	// BindTemplate copies the database template into repo's template.
	BindTemplate(ctx context.Context, repo, template string) error
	// RefreshTemplate re-copies repo's template from its source.
	RefreshTemplate(ctx context.Context, repo string) error
	// Template returns repo's template binding.
	Template(ctx context.Context, repo string) (*DatabaseTemplate, error)
	// CreateBranch creates workspace's branch from repo's template.
	CreateBranch(ctx context.Context, repo, workspace string) (*DatabaseBranch, error)
	// Branch returns workspace's branch.
	Branch(ctx context.Context, workspace string) (*DatabaseBranch, error)
	// DropBranch drops workspace's branch and its snapshots.
	DropBranch(ctx context.Context, workspace string) error
	// Snapshot copies workspace's branch into the snapshot id.
	Snapshot(ctx context.Context, workspace, id string) error
	// DropSnapshot drops the snapshot id of workspace.
	DropSnapshot(ctx context.Context, workspace, id string) error
	// Restore replaces workspace's branch by a copy of snapshot id under
	// the same name and role (the workspace's DSN stays valid).
	Restore(ctx context.Context, workspace, id string) error
}

// BranchSize is the storage of one workspace's branch (database or Redis)
// and of its checkpoint snapshots.
type BranchSize struct {
	Bytes         int64
	Snapshots     int
	SnapshotBytes int64
}

// BranchUsager is implemented by branchers that can measure a
// workspace's branch (the storage accounting, GET /repos/{repo}/usage).
// Usage returns not_found when the workspace has no branch.
type BranchUsager interface {
	Usage(ctx context.Context, workspace string) (BranchSize, error)
}
