package repositories

import (
	"context"
	"maps"
	"slices"

	"github.com/lockstep-hq/lockstep"
)

// ArchiveRefs creates refs (name → commit, names under refs/archive/) in
// base, in one move whose log entry is op with details: commits a
// workspace's retention keeps before the workspace is purged (the object
// GC keeps whatever a ref names). The commits are already in base's
// network (a workspace's attempts), so no object is written or checked
// again. A ref that already exists is a ref_conflict (nothing moves).
func (s *Service) ArchiveRefs(ctx context.Context, actor *lockstep.Key, base *lockstep.Repo, refs map[string]string, op string, details map[string]any) error {
	if len(refs) == 0 {
		return nil
	}
	m := refMove{Reason: Reason{Op: op, Details: details}, Actor: actor, Repo: base, Checked: true}
	for _, name := range slices.Sorted(maps.Keys(refs)) {
		m.Updates = append(m.Updates, refUpdate{Ref: name, Old: lockstep.ZeroOID, New: refs[name]})
	}
	return s.move(ctx, m)
}
