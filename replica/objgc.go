package replica

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// CollectGarbage drops the network's cruft older than opts.Cutoff in
// object-storage mode (repo/gc.go says what cruft is). The live objects
// of the live packs holding cruft registered before the cutoff go into a
// new pack, which is uploaded; then the commit point (opts.Commit: the
// store's CommitGC) registers it and retires the old packs in the same
// transaction that checks the refs and records the GC. The retired packs
// stay in the bucket for the grace period (GC deletes them), so a replica
// still reading them finds them; this replica drops them from its cache
// at once, the others at their next catch-up (the generation moved).
//
// Packs in the cache that the database does not list (a write of this
// replica between its upload and its registration) and packs registered
// after the cutoff are roots: their objects and what they name stay. A
// pack registered by another replica after this GC read the list is not
// touched; a ref naming one of its objects moves either before the
// commit point (which then refuses: the ref moved to an object this GC
// did not see) or after it (the write is refused if it checked its
// objects before the commit point, see lockstep.RefUpdate.ObjectsSince).
func (n *Network) CollectGarbage(ctx context.Context, opts gitstore.GCOptions) (gitstore.GCStats, error) {
	var st gitstore.GCStats
	// No compaction of this network meanwhile (each would retire the
	// other's packs; the loser's commit would be refused anyway).
	stop, ok, err := n.m.holdLease(ctx, "compact:"+n.name)
	if err != nil {
		return st, err
	}
	if !ok {
		return st, lockstep.Errorf(lockstep.ECONFLICT, "gc %s: a compaction of the network is running; try again", n.name)
	}
	defer stop()

	n.refreshMu.Lock()
	err = n.catchUp(ctx)
	n.refreshMu.Unlock()
	if err != nil {
		return st, err
	}
	recs, _, err := n.m.cfg.Packs.NetworkPacks(ctx, n.name)
	if err != nil {
		return st, err
	}
	local, err := n.localPacks()
	if err != nil {
		return st, err
	}
	known := map[string]lockstep.PackRecord{}
	for _, r := range recs {
		known[r.Hash] = r
	}
	type packInfo struct {
		hash    string
		entries []gitstore.PackEntry
	}
	var old []packInfo
	roots := append([]plumbing.Hash(nil), opts.Roots...)
	for h := range local {
		r, registered := known[h]
		if registered && !r.Live() {
			continue // retired: its objects are in a live pack
		}
		ents, err := gitstore.ReadPackEntries(n.packPath(h, "idx"))
		if err != nil {
			return st, err
		}
		if registered && r.RegisteredAt.Before(opts.Cutoff) {
			old = append(old, packInfo{h, ents})
			continue
		}
		for _, e := range ents {
			roots = append(roots, e.Hash)
		}
	}
	reach, err := n.Reachable(ctx, roots)
	if err != nil {
		return st, err
	}
	var retire []string
	keep := map[plumbing.Hash]bool{}
	for _, p := range old {
		drop := 0
		var dropBytes int64
		for _, e := range p.entries {
			if !reach[e.Hash] {
				drop++
				dropBytes += e.Packed
			}
		}
		if drop == 0 {
			continue
		}
		retire = append(retire, p.hash)
		st.Packs++
		st.Objects += drop
		st.Bytes += dropBytes
		for _, e := range p.entries {
			if reach[e.Hash] {
				keep[e.Hash] = true
			}
		}
	}
	if opts.DryRun || len(retire) == 0 {
		return st, nil
	}

	var rec *lockstep.PackRecord
	var tmpPack, tmpIdx, h string
	if len(keep) > 0 {
		oids := make([]plumbing.Hash, 0, len(keep))
		for k := range keep {
			oids = append(oids, k)
		}
		base := filepath.Join(n.Dir(), "objects", "pack", ".tmp_pack-gc")
		ph, err := n.WritePack(ctx, oids, base)
		if err != nil {
			return st, err
		}
		h = ph.String()
		tmpPack, tmpIdx = base+"-"+h+".pack", base+"-"+h+".idx"
		defer os.Remove(tmpPack)
		defer os.Remove(tmpIdx)
		limit := n.m.cfg.Grace / 2
		start := time.Now()
		uctx, cancel := context.WithTimeout(ctx, limit)
		err = n.m.cfg.Objects.PutPack(uctx, n.name, h, tmpPack, tmpIdx)
		cancel()
		if err != nil {
			return st, unavailable("upload gc pack", err)
		}
		if took := time.Since(start); took > limit {
			return st, lockstep.Errorf(lockstep.EUNAVAILABLE, "gc %s: the upload took %s, more than half the grace period", n.name, took.Round(time.Millisecond))
		}
		rec = &lockstep.PackRecord{Network: n.name, Hash: h, Objects: len(oids)}
		if fi, err := os.Stat(tmpPack); err == nil {
			rec.PackBytes = fi.Size()
		}
		if fi, err := os.Stat(tmpIdx); err == nil {
			rec.IdxBytes = fi.Size()
		}
	}
	gen, err := opts.Commit(rec, retire)
	if err != nil {
		return st, err // the uploaded pack, unregistered, is garbage for the bucket GC
	}
	// This replica's cache follows at once: the new pack in, the retired
	// ones out (a write arriving now must not find a dropped object).
	n.refreshMu.Lock()
	defer n.refreshMu.Unlock()
	if rec != nil {
		if err := os.Rename(tmpPack, n.packPath(h, "pack")); err != nil {
			return st, err
		}
		if err := os.Rename(tmpIdx, n.packPath(h, "idx")); err != nil {
			return st, err
		}
	}
	for _, r := range retire {
		os.Remove(n.packPath(r, "idx"))
		os.Remove(n.packPath(r, "pack"))
	}
	if err := n.Reload(); err != nil {
		return st, err
	}
	if err := n.catchUp(ctx); err != nil {
		n.m.cfg.Log.Warn("object store: catch-up after gc", "network", n.name, "error", err)
	}
	n.publish(gen)
	return st, nil
}
