package repositories

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// Usage is the storage of repo's fork network (GET /repos/{repo}/usage,
// admins): the objects directory on this replica's disk (loose objects,
// packs and their indexes; in object-storage mode the local cache), and
// in object-storage mode the packs the database lists in the bucket,
// live and retired (retired packs are freed by the bucket's GC once older
// than --object-grace). A network's objects are shared by the base and
// all its workspaces, so every repository of a network reports the same
// numbers. Errors: not_found if the repository does not exist.
func (s *Service) Usage(ctx context.Context, actor *lockstep.Key, name string) (*api.Usage, error) {
	if actor == nil || actor.Role != lockstep.RoleAdmin {
		return nil, lockstep.Errorf(lockstep.EFORBIDDEN, "storage usage is shown to admins only")
	}
	r, err := s.Repo(ctx, name)
	if err != nil {
		return nil, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	u := &api.Usage{Repo: r.Name, Network: r.Network}
	dir := filepath.Join(n.Dir(), "objects")
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile (a compaction)
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case strings.HasPrefix(rel, "pack"+string(filepath.Separator)) && strings.HasSuffix(rel, ".pack"):
			u.Disk.Packs++
			u.Disk.PackBytes += info.Size()
		case strings.HasPrefix(rel, "pack"+string(filepath.Separator)):
			u.Disk.IndexBytes += info.Size() // .idx, .rev, .keep, .mtimes
		case len(rel) == 41 && rel[2] == filepath.Separator:
			u.Disk.LooseObjects++
			u.Disk.LooseBytes += info.Size()
		default:
			u.Disk.OtherBytes += info.Size() // info/, temp files
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	u.Disk.TotalBytes = u.Disk.PackBytes + u.Disk.IndexBytes + u.Disk.LooseBytes + u.Disk.OtherBytes
	if ps, ok := s.store.(lockstep.PackStore); ok {
		packs, _, err := ps.NetworkPacks(ctx, r.Network)
		if err != nil {
			return nil, err
		}
		if len(packs) > 0 {
			b := &api.BucketUsage{}
			for _, p := range packs {
				if p.RetiredAt.IsZero() {
					b.LivePacks++
					b.LiveBytes += p.PackBytes + p.IdxBytes
				} else {
					b.RetiredPacks++
					b.RetiredBytes += p.PackBytes + p.IdxBytes
				}
			}
			u.Bucket = b
		}
	}
	repos, err := s.store.ListRepos(ctx, lockstep.RepoFilter{Network: r.Network})
	if err != nil {
		return nil, err
	}
	for _, o := range repos {
		if o.IsWorkspace() {
			u.Workspaces++
		}
	}
	return u, nil
}
