package replica

import (
	"context"
	"sort"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// GCStats says what one GC run did.
type GCStats struct {
	Networks int `json:"networks"`
	// Deleted counts packs deleted from the bucket (retired, or never
	// registered), Records pack records removed from the database.
	Deleted int `json:"deleted_packs"`
	Records int `json:"deleted_records"`
	// Skipped is true when another replica held the GC lease.
	Skipped bool `json:"skipped,omitempty"`
}

// GC deletes from the bucket the packs that are retired (a compaction
// replaced them) or were never registered (a write that crashed or failed
// after its upload), once they are older than the grace period, and then
// their records. One replica at a time (a lease). The bucket is listed
// before the database is read, so a pack registered meanwhile is seen as
// registered or is younger than the grace period (a write registers
// within half of it, or fails).
func (m *Manager) GC(ctx context.Context) (GCStats, error) {
	var st GCStats
	stop, ok, err := m.holdLease(ctx, "gc")
	if err != nil {
		return st, err
	}
	if !ok {
		st.Skipped = true
		return st, nil
	}
	defer stop()
	set := map[string]bool{}
	fromDB, err := m.cfg.Packs.PackNetworks(ctx)
	if err != nil {
		return st, err
	}
	fromBucket, err := m.cfg.Objects.ListNetworks(ctx)
	if err != nil {
		return st, err
	}
	for _, n := range append(fromDB, fromBucket...) {
		set[n] = true
	}
	nets := make([]string, 0, len(set))
	for n := range set {
		nets = append(nets, n)
	}
	sort.Strings(nets)
	for _, n := range nets {
		if err := m.gcNetwork(ctx, n, &st); err != nil {
			return st, err
		}
		st.Networks++
	}
	return st, nil
}

// listingResolution is added to a listed object's modification time:
// S3 servers report it to the second in listings (truncated), so a pack
// uploaded 0.9 s ago can look 1.9 s old.
const listingResolution = time.Second

func (m *Manager) gcNetwork(ctx context.Context, network string, st *GCStats) error {
	bucket, err := m.cfg.Objects.ListPacks(ctx, network) // first: see GC
	if err != nil {
		return err
	}
	recs, _, err := m.cfg.Packs.NetworkPacks(ctx, network)
	if err != nil {
		return err
	}
	now := m.cfg.Now()
	grace := m.cfg.Grace
	inBucket := map[string]bool{}
	for _, b := range bucket {
		inBucket[b.Hash] = true
	}
	for _, b := range bucket {
		r, registered := findRec(recs, b.Hash)
		switch {
		case registered && r.Live():
			continue
		case registered && now.Sub(r.RetiredAt) <= grace:
			continue
		case !registered && now.Sub(b.Modified.Add(listingResolution)) <= grace:
			continue
		}
		if err := m.cfg.Objects.DeletePack(ctx, network, b.Hash); err != nil {
			return err
		}
		st.Deleted++
		if registered {
			if err := m.cfg.Packs.DeletePackRecord(ctx, network, b.Hash); err != nil {
				return err
			}
			st.Records++
		}
	}
	// Retired records whose objects are gone already (a GC killed between
	// the two deletes).
	for _, r := range recs {
		if !r.Live() && !inBucket[r.Hash] && now.Sub(r.RetiredAt) > grace {
			if err := m.cfg.Packs.DeletePackRecord(ctx, network, r.Hash); err != nil {
				return err
			}
			st.Records++
		}
	}
	return nil
}

func findRec(recs []lockstep.PackRecord, h string) (lockstep.PackRecord, bool) {
	for _, r := range recs {
		if r.Hash == h {
			return r, true
		}
	}
	return lockstep.PackRecord{}, false
}
