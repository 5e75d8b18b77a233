package web

import (
	"github.com/lockstep-hq/lockstep"
)

// What a key may read of the operations log, in one place: the API
// (/api/v1/oplog) and the UI (its oplog pages, the failed runs and marks
// of the workspace and task pages, the live events) all go through these.
// An agent key sees its own operations only (a failed run's command,
// stdout and stderr included); admin, reviewer and ci keys see every
// operation.

// opVisible reports whether k may see an operation made by keyID.
func opVisible(k *lockstep.Key, keyID string) bool {
	if k == nil {
		return false
	}
	return k.Role != lockstep.RoleAgent || keyID == k.ID
}

// ownOpsOnly reports whether k sees only its own operations.
func ownOpsOnly(k *lockstep.Key) bool { return k == nil || k.Role == lockstep.RoleAgent }

// visibleOps narrows f to the operations k may see: an agent's filter is
// pinned to its own key, and asking for another key's is refused.
func visibleOps(k *lockstep.Key, f lockstep.OpFilter) (lockstep.OpFilter, error) {
	if k == nil {
		return f, lockstep.Errorf(lockstep.EUNAUTH, "missing API key: send Authorization: Bearer <key>")
	}
	if ownOpsOnly(k) {
		if f.KeyID != "" && f.KeyID != k.ID {
			return f, lockstep.Errorf(lockstep.EFORBIDDEN, "an agent key may read only its own operations")
		}
		f.KeyID = k.ID
	}
	return f, nil
}
