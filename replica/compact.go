package replica

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/lockstep-hq/lockstep"
)

// leaseTTL bounds how long a killed replica's compaction or GC lease
// blocks the others; a running one renews it every leaseTTL/4.
const leaseTTL = 2 * time.Minute

// holdLease claims name and renews it until the returned stop is called;
// ok is false when another replica holds it, or this one does already.
// The database lease is the replica's (a claim by its holder succeeds
// while it holds it), so the leases held in this process are tracked
// too: without that a GC and a compaction of one network on the same
// replica ran at once, and the compaction removed from the cache a pack
// the GC was reading (a GC failing with "no such file", seen by
// e2e/gcrace_test.go), and the first to finish released the other's lease.
func (m *Manager) holdLease(ctx context.Context, name string) (func(), bool, error) {
	m.leaseMu.Lock()
	if m.leases[name] {
		m.leaseMu.Unlock()
		return func() {}, false, nil
	}
	if m.leases == nil {
		m.leases = map[string]bool{}
	}
	m.leases[name] = true
	m.leaseMu.Unlock()
	free := func() {
		m.leaseMu.Lock()
		delete(m.leases, name)
		m.leaseMu.Unlock()
	}
	release, ok, err := lockstep.HoldLease(ctx, m.cfg.Packs, name, m.cfg.Holder, leaseTTL, func(err error) {
		m.cfg.Log.Warn("object store: lease not renewed", "lease", name, "error", err)
	})
	if err != nil || !ok {
		free()
		return release, ok, err
	}
	return func() {
		release()
		free()
	}, true, nil
}

// Compact folds the network's live packs into one, on one replica at a
// time (a lease per network): the new pack holds every object of the
// packs it replaces — reachable or not (failed attempts are evidence; an
// upload waiting for its ref is not lost) — and is uploaded, then
// registered while the old ones are retired, in one transaction. When
// another compaction retired one of them first, the result is discarded.
// The old packs stay in the bucket for the grace period (GC).
func (n *Network) Compact(ctx context.Context) error {
	stop, ok, err := n.m.holdLease(ctx, "compact:"+n.name)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	defer stop()

	n.refreshMu.Lock()
	err = n.catchUp(ctx)
	n.refreshMu.Unlock()
	if err != nil {
		return err
	}
	recs, _, err := n.m.cfg.Packs.NetworkPacks(ctx, n.name)
	if err != nil {
		return err
	}
	local, err := n.localPacks()
	if err != nil {
		return err
	}
	var live []string
	for _, r := range recs {
		// A pack registered since the catch-up (another replica's write)
		// stays live: the next compaction folds it.
		if r.Live() && local[r.Hash] {
			live = append(live, r.Hash)
		}
	}
	if len(live) < 2 {
		return nil
	}
	oids, err := n.packObjects(live)
	if err != nil {
		return err
	}
	names := n.objectNames(ctx)

	base := filepath.Join(n.Dir(), "objects", "pack", ".tmp_pack-compact")
	var in bytes.Buffer
	for _, h := range oids {
		in.WriteString(h.String())
		if p, ok := names[h]; ok && p != "" {
			in.WriteByte(' ')
			in.WriteString(p)
		}
		in.WriteByte('\n')
	}
	cmd := exec.CommandContext(ctx, "git", "-c", "gc.auto=0", "-c", "pack.threads=2", "pack-objects", "-q", "--non-empty", "--delta-base-offset", base)
	cmd.Dir = n.Dir()
	cmd.Env = append(os.Environ(), "GIT_DIR="+n.Dir(), "GIT_CONFIG_NOSYSTEM=1")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("compact %s: git pack-objects: %v: %s", n.name, err, strings.TrimSpace(stderr.String()))
	}
	h := strings.TrimSpace(string(out))
	if !plumbing.IsHash(h) {
		return fmt.Errorf("compact %s: git pack-objects printed %q", n.name, out)
	}
	tmpPack, tmpIdx := base+"-"+h+".pack", base+"-"+h+".idx"
	defer os.Remove(tmpPack)
	defer os.Remove(tmpIdx)
	for _, l := range live {
		if l == h {
			return nil // the same pack (nothing to fold)
		}
	}

	limit := n.m.cfg.Grace / 2
	start := time.Now()
	uctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := n.m.cfg.Objects.PutPack(uctx, n.name, h, tmpPack, tmpIdx); err != nil {
		return unavailable("upload compacted pack", err)
	}
	if took := time.Since(start); took > limit {
		return lockstep.Errorf(lockstep.EUNAVAILABLE, "compact %s: the upload took %s, more than half the grace period", n.name, took.Round(time.Millisecond))
	}
	rec := lockstep.PackRecord{Network: n.name, Hash: h, Objects: len(oids)}
	if fi, err := os.Stat(tmpPack); err == nil {
		rec.PackBytes = fi.Size()
	}
	if fi, err := os.Stat(tmpIdx); err == nil {
		rec.IdxBytes = fi.Size()
	}
	gen, err := n.m.cfg.Packs.ReplacePacks(ctx, rec, live)
	if c := lockstep.ErrorCode(err); c == lockstep.EREFCONFLICT || c == lockstep.ECONFLICT {
		return nil // another replica compacted first: ours is garbage for GC
	}
	if err != nil {
		return err
	}
	// Publish locally: pack, then index; then drop the packs it replaced.
	if err := os.Rename(tmpPack, n.packPath(h, "pack")); err != nil {
		return fmt.Errorf("compact %s: %w", n.name, err)
	}
	if err := os.Rename(tmpIdx, n.packPath(h, "idx")); err != nil {
		return fmt.Errorf("compact %s: %w", n.name, err)
	}
	for _, l := range live {
		os.Remove(n.packPath(l, "idx"))
		os.Remove(n.packPath(l, "pack"))
	}
	if err := n.Reload(); err != nil {
		return err
	}
	n.publish(gen)
	return nil
}

// packObjects lists every object of the given local packs, from their
// indexes.
func (n *Network) packObjects(hashes []string) ([]plumbing.Hash, error) {
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	for _, h := range hashes {
		f, err := os.Open(n.packPath(h, "idx"))
		if err != nil {
			return nil, fmt.Errorf("compact %s: pack %s not in the cache: %w", n.name, h, err)
		}
		idx := idxfile.NewMemoryIndex()
		err = idxfile.NewDecoder(bufio.NewReader(f)).Decode(idx)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("compact %s: read index of %s: %w", n.name, h, err)
		}
		it, err := idx.Entries()
		if err != nil {
			return nil, err
		}
		for {
			e, err := it.Next()
			if err != nil {
				break
			}
			if !seen[e.Hash] {
				seen[e.Hash] = true
				out = append(out, e.Hash)
			}
		}
		it.Close()
	}
	return out, nil
}

// objectNames maps reachable objects to their paths (git rev-list
// --objects --all), which pack-objects uses to find good deltas. Best
// effort: without it the pack is as complete, only larger.
func (n *Network) objectNames(ctx context.Context) map[plumbing.Hash]string {
	cmd := exec.CommandContext(ctx, "git", "rev-list", "--objects", "--all")
	cmd.Dir = n.Dir()
	cmd.Env = append(os.Environ(), "GIT_DIR="+n.Dir(), "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	names := map[plumbing.Hash]string{}
	if err != nil {
		return names
	}
	for _, line := range strings.Split(string(out), "\n") {
		oid, path, _ := strings.Cut(line, " ")
		if plumbing.IsHash(oid) {
			names[plumbing.NewHash(oid)] = path
		}
	}
	return names
}
