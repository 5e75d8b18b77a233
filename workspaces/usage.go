package workspaces

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// AddBranchUsage adds to u (the storage of a fork network, from
// repositories.Service.Usage) its workspaces' database and Redis
// branches with their snapshots, when that branching is configured and
// its brancher can measure (lockstep.BranchUsager), and the network's
// checkpoints. A workspace without a branch (abandoned, promoted, not
// created yet) adds nothing.
func (s *Service) AddBranchUsage(ctx context.Context, u *api.Usage) error {
	repos, err := s.store.ListRepos(ctx, lockstep.RepoFilter{Network: u.Network})
	if err != nil {
		return err
	}
	measure := func(b any) (*api.BranchUsage, lockstep.BranchUsager) {
		if bu, ok := b.(lockstep.BranchUsager); ok {
			return &api.BranchUsage{}, bu
		}
		return nil, nil
	}
	var dbU, rdU *api.BranchUsage
	var dbM, rdM lockstep.BranchUsager
	if dbs := s.br.Databases(); dbs != nil {
		dbU, dbM = measure(dbs)
	}
	if rds := s.br.Redises(); rds != nil {
		rdU, rdM = measure(rds)
	}
	add := func(to *api.BranchUsage, m lockstep.BranchUsager, ws string) error {
		if to == nil {
			return nil
		}
		sz, err := m.Usage(ctx, ws)
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return nil
		}
		if err != nil {
			return err
		}
		to.Branches++
		to.Bytes += sz.Bytes
		to.Snapshots += sz.Snapshots
		to.SnapshotBytes += sz.SnapshotBytes
		to.TotalBytes += sz.Bytes + sz.SnapshotBytes
		return nil
	}
	for _, r := range repos {
		if !r.IsWorkspace() {
			continue
		}
		if err := add(dbU, dbM, r.Name); err != nil {
			return err
		}
		if err := add(rdU, rdM, r.Name); err != nil {
			return err
		}
		cs, err := s.store.Checkpoints(ctx, r.ID, 1000)
		if err != nil {
			return err
		}
		for _, c := range cs {
			u.Checkpoints.Checkpoints++
			if c.DBSnapshot != "" {
				u.Checkpoints.DatabaseSnapshots++
			}
			if c.RedisSnapshot != "" {
				u.Checkpoints.RedisSnapshots++
			}
		}
	}
	u.Databases, u.Redis = dbU, rdU
	return nil
}
