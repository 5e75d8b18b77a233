package dbbranch

import (
	"context"

	"github.com/lockstep-hq/lockstep"
)

// Brancher adapts a Manager to the lockstep.Brancher seam.
type Brancher struct{ M *Manager }

var _ lockstep.Brancher = Brancher{}

func branchOut(b *Branch) *lockstep.DatabaseBranch {
	if b == nil {
		return nil
	}
	return &lockstep.DatabaseBranch{Workspace: b.Workspace, Repo: b.Repo, Database: b.Database, Role: b.Role, DSN: b.DSN}
}

// BindTemplate implements lockstep.Brancher.
func (a Brancher) BindTemplate(ctx context.Context, repo, template string) error {
	return a.M.BindTemplate(ctx, repo, template)
}

// RefreshTemplate implements lockstep.Brancher.
func (a Brancher) RefreshTemplate(ctx context.Context, repo string) error {
	return a.M.RefreshTemplate(ctx, repo)
}

// Template implements lockstep.Brancher.
func (a Brancher) Template(ctx context.Context, repo string) (*lockstep.DatabaseTemplate, error) {
	t, err := a.M.Template(ctx, repo)
	if err != nil {
		return nil, err
	}
	return &lockstep.DatabaseTemplate{Repo: t.Repo, Source: t.Source}, nil
}

// CreateBranch implements lockstep.Brancher.
func (a Brancher) CreateBranch(ctx context.Context, repo, workspace string) (*lockstep.DatabaseBranch, error) {
	b, err := a.M.CreateBranch(ctx, repo, workspace)
	return branchOut(b), err
}

// Branch implements lockstep.Brancher.
func (a Brancher) Branch(ctx context.Context, workspace string) (*lockstep.DatabaseBranch, error) {
	b, err := a.M.Branch(ctx, workspace)
	return branchOut(b), err
}

// DropBranch implements lockstep.Brancher.
func (a Brancher) DropBranch(ctx context.Context, workspace string) error {
	return a.M.DropBranch(ctx, workspace)
}

// Snapshot implements lockstep.Brancher.
func (a Brancher) Snapshot(ctx context.Context, workspace, id string) error {
	_, err := a.M.Snapshot(ctx, workspace, id)
	return err
}

// DropSnapshot implements lockstep.Brancher.
func (a Brancher) DropSnapshot(ctx context.Context, workspace, id string) error {
	return a.M.DropSnapshot(ctx, workspace, id)
}

// Restore implements lockstep.Brancher.
func (a Brancher) Restore(ctx context.Context, workspace, id string) error {
	_, err := a.M.Restore(ctx, workspace, id)
	return err
}

// Usage implements lockstep.BranchUsager.
func (a Brancher) Usage(ctx context.Context, workspace string) (lockstep.BranchSize, error) {
	return a.M.Usage(ctx, workspace)
}

var _ lockstep.BranchUsager = Brancher{}
