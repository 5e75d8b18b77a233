package gitstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// PackCount returns the number of packs the network reads from. Every
// write adds one; Compact folds them back into one.
func (n *Network) PackCount() int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return len(n.packs)
}

// Compact folds every pack (and the loose objects that refs reach) into one
// pack with `git repack -a -d --keep-unreachable`, then reloads. Nothing is
// dropped: objects no ref names yet (an upload waiting for its commit, a
// push that lost its compare-and-swap, a ref the mirror has not caught up
// with) stay in the new pack or stay loose. Readers and writers go on
// meanwhile: packs written during the repack are left alone, a pack
// removed under a reader is still open, and a lookup that misses reloads.
// Without it every push adds a pack, an open file and a lookup table.
func (n *Network) Compact(ctx context.Context) error {
	n.gcMu.Lock()
	defer n.gcMu.Unlock()
	n.compacting.Add(1)
	defer n.compacting.Add(-1)
	cmd := exec.CommandContext(ctx, "git", "-c", "gc.auto=0", "repack", "-a", "-d", "--keep-unreachable", "-q")
	cmd.Dir = n.dir
	cmd.Env = append(os.Environ(), "GIT_DIR="+n.dir, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compact %s: %v: %s", n.dir, err, out)
	}
	return n.Reload()
}

// retryMiss reports whether a lookup that began when n.reloads was epoch
// and missed should look again: a Reload finished meanwhile (the object
// may have moved from a loose file into a pack the lookup did not see),
// or reloadOnMiss reloaded now.
func (n *Network) retryMiss(epoch uint64) bool {
	return n.reloads.Load() != epoch || n.reloadOnMiss()
}

// reloadOnMiss reloads the pack list after a lookup missed, when it may
// have changed: the pack directory's mtime moved, or a Compact is running
// (file times are coarse, so a repack's last rename can keep the mtime
// an earlier reload already saw).
func (n *Network) reloadOnMiss() bool {
	if n.opts.OnMiss != nil && n.opts.OnMiss() {
		return true
	}
	if n.compacting.Load() > 0 {
		return n.Reload() == nil
	}
	return n.reloadIfChanged()
}
