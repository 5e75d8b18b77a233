package workspaces

import (
	"context"
	"fmt"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
)

// Sync merges the base repository's default branch into a workspace's
// default branch (deep, same compare-and-swap and conflict rules as a
// merge). Errors: not_found, invalid_argument (not a workspace, bad
// expect_oid), permission_denied, ref_conflict, merge_conflict.
func (s *Service) Sync(ctx context.Context, actor *lockstep.Key, wsName, expect, onConflict string) (*repositories.MergeResponse, error) {
	start := s.now()
	ws, err := s.repos.Repo(ctx, wsName)
	if err != nil {
		return nil, err
	}
	if ws.ForkOf == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "%s is not a workspace (it has no base to sync from)", ws.Name)
	}
	if err := repositories.CheckWritable(actor, ws); err != nil {
		return nil, err
	}
	base, err := s.repos.Repo(ctx, ws.ForkOf)
	if err != nil {
		return nil, err
	}
	req := repositories.MergeRequest{Ours: ws.DefaultBranch, Theirs: base.Name + ":" + base.DefaultBranch, Deep: true, Materialize: true,
		ExpectOID: expect, OnConflict: onConflict, Message: fmt.Sprintf("Sync %s with %s:%s", ws.Name, base.Name, base.DefaultBranch)}
	if req.ExpectOID != "" {
		if err := lockstep.ValidateOID("expect_oid", req.ExpectOID); err != nil {
			return nil, err
		}
	}
	theirs, err := s.repos.Resolve(ctx, ws, req.Theirs)
	if err != nil {
		return nil, err
	}
	return s.repos.Materialize(ctx, actor, ws, req, theirs, repositories.Reason{Op: "sync", Start: start})
}
