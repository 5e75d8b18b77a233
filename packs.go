package lockstep

import (
	"context"
	"time"
)

// PackRecord is one pack of a fork network registered in the metadata
// store (object-storage mode, issue #11): the pack's bytes live in the
// object store under its name (the pack checksum), the record says whether
// it is live.
type PackRecord struct {
	Network string `json:"network"`
	// Hash is the pack checksum (40 hex digits): the name of
	// pack-<hash>.pack and .idx.
	Hash      string `json:"hash"`
	PackBytes int64  `json:"pack_bytes"`
	IdxBytes  int64  `json:"idx_bytes"`
	Objects   int    `json:"objects"`
	// RegisteredAt is when the record was inserted (set by the store).
	RegisteredAt time.Time `json:"registered_at"`
	// RetiredAt is zero while the pack is live; set when a compaction
	// replaced it (its objects are in a newer pack).
	RetiredAt time.Time `json:"retired_at,omitzero"`
	// Inline says the pack's bytes are kept in the metadata database
	// with this record (InlinePackStore), not in the object store.
	Inline bool `json:"inline,omitempty"`
}

// CheckPackHash refuses anything but a pack name: 40 lowercase hex
// digits (the pack checksum; the bucket's object names are made of it).
func CheckPackHash(h string) error {
	if len(h) != 40 {
		return Errorf(EINVALID, "pack hash %q: want 40 hex digits", h)
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return Errorf(EINVALID, "pack hash %q: want 40 lowercase hex digits", h)
		}
	}
	return nil
}

// Live reports whether the pack is in the network's live list.
func (p PackRecord) Live() bool { return p.RetiredAt.IsZero() }

// NetworkRef is one ref of one repository of a network.
type NetworkRef struct {
	Repo string
	Ref
}

// PackStore keeps what several replicas must agree on about a network's
// objects: its list of live packs and its generation, a counter that
// every change a replica's cache must follow bumps (a pack registered or
// retired, a ref of any repository of the network created, moved or
// deleted — the ref changes bump it inside their own transaction), plus
// named leases (one compaction per network, one GC at a time).
//
// Error contract: unknown networks are not errors (generation 0, no
// packs); ReplacePacks returns ref_conflict when one of the packs it
// retires is no longer live (someone else compacted first) and changes
// nothing; other errors are the store's (unavailable, internal).
type PackStore interface {
	// RegisterPack inserts p as live (RegisteredAt is set by the store)
	// and bumps the network's generation, in one transaction; it returns
	// the new generation. Registering a pack that is already registered
	// (live or retired) changes nothing and returns the current
	// generation.
	RegisterPack(ctx context.Context, p PackRecord) (int64, error)
	// ReplacePacks registers p and retires every pack named in old, in one
	// transaction, bumping the generation once; see the error contract.
	// p may already be live (kept as it is); p registered and retired is
	// already_exists (a retired pack is never made live again: GC may be
	// deleting its objects); p named in old, or a malformed name, is
	// invalid_argument.
	ReplacePacks(ctx context.Context, p PackRecord, old []string) (int64, error)
	// NetworkPacks returns every registered pack of network (live and
	// retired), oldest first, and the generation read in the same
	// transaction (snapshot).
	NetworkPacks(ctx context.Context, network string) ([]PackRecord, int64, error)
	// NetworkGeneration returns the network's generation (0 if never
	// bumped): one indexed read, done before serving a network.
	NetworkGeneration(ctx context.Context, network string) (int64, error)
	// NetworkRefs returns every ref of every repository of network, by
	// repository then ref name.
	NetworkRefs(ctx context.Context, network string) ([]NetworkRef, error)
	// PackNetworks lists the networks that have registered packs, by name.
	PackNetworks(ctx context.Context) ([]string, error)
	// DeletePackRecord removes a pack's record (GC, after its objects
	// were deleted from the object store). Deleting a live pack is
	// refused (invalid_argument); an unknown pack is not an error.
	DeletePackRecord(ctx context.Context, network, hash string) error
	// ClaimLease takes the named lease for holder until now+ttl and
	// reports whether it holds it: true when the lease was free, expired
	// or already holder's (then it is extended). Of concurrent claimants
	// of a free lease exactly one gets true. An empty name or holder, or
	// a ttl that is not positive, is invalid_argument.
	ClaimLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease frees the lease if holder holds it.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// InlinePackStore is a PackStore that can keep small packs' bytes in
// their records (docs/replicas.md "Small packs"): a write's pack is then
// registered with its bytes in one transaction and never reaches the
// object store, and every replica downloads it from the database. Such a
// record is a pack record like any other (Inline set in NetworkPacks):
// compaction and GC retire it, and the bucket GC deletes it (and its
// bytes) once retired for the grace period.
type InlinePackStore interface {
	PackStore
	// RegisterInlinePack is RegisterPack with the pack's and its index's
	// bytes stored in the record; p's sizes must be theirs
	// (invalid_argument otherwise). A pack already registered changes
	// nothing and returns the current generation.
	RegisterInlinePack(ctx context.Context, p PackRecord, pack, idx []byte) (int64, error)
	// InlinePack returns the bytes of an inline pack; not_found when the
	// record is gone (GC) or keeps no bytes.
	InlinePack(ctx context.Context, network, hash string) (pack, idx []byte, err error)
}

// PackChange is a pack record as a catch-up reads it (PackChangeStore):
// with the bytes of a live inline pack (nil otherwise).
type PackChange struct {
	PackRecord
	Pack, Idx []byte
}

// PackChangeStore is a PackStore that lists only what changed: a
// replica's catch-up then reads the records registered or retired since
// the generation its cache reflects, not every record of the network
// (docs/replicas.md "Catching up").
type PackChangeStore interface {
	PackStore
	// PackChanges returns the records of network registered or retired
	// after generation since, oldest first, each live inline one with its
	// bytes, and the generation, read in one snapshot: every change up to
	// that generation is listed. Records written by a version that did
	// not stamp their generation are always listed. A record deleted
	// since (GC, after its retirement) is not.
	PackChanges(ctx context.Context, network string, since int64) ([]PackChange, int64, error)
}

// GCRoots is what an object GC of a network must keep, read in one
// snapshot: every ref of every repository of the network, and the
// commits retention keeps without a ref (the attempts and checkpoints of
// repositories that still have a ref, i.e. not purged; failed runs'
// evidence is pushed as an attempt).
type GCRoots struct {
	Refs     []NetworkRef
	Retained []string
}

// GCStore is the metadata side of object GC (issue 28, docs/replicas.md
// "Object GC"). Errors: unavailable and internal are the store's;
// CommitGC returns what check returns (conflict when a ref moved to an
// object the GC did not see) and the codes of ReplacePacks.
type GCStore interface {
	// GCNetworks lists every network that has a repository, by name.
	GCNetworks(ctx context.Context) ([]string, error)
	// GCRoots reads network's refs and retained commits in one snapshot.
	GCRoots(ctx context.Context, network string) (GCRoots, error)
	// CommitGC is the commit point of a GC of network, one transaction:
	// it locks the network's state row (a ref move with ObjectsSince
	// waits for it, or it for the move), reads the network's refs and
	// passes them to check (an error aborts and is returned), records the
	// GC's time (RefUpdate.ObjectsSince) and, when p is not nil or
	// retire is not empty, registers p and retires the packs of retire
	// (object-storage mode; p nil: the GC's result has no live object).
	// It returns the network's generation.
	CommitGC(ctx context.Context, network string, check func([]NetworkRef) error, p *PackRecord, retire []string) (int64, error)
}

// HoldLease claims the named lease in ps for holder and renews it every
// ttl/4 until the returned stop is called (which releases it); ok is
// false when another holder has it. A failed renewal is passed to warn
// (the lease may then expire under a long run: what it guards must stay
// correct without it).
func HoldLease(ctx context.Context, ps PackStore, name, holder string, ttl time.Duration, warn func(error)) (stop func(), ok bool, err error) {
	ok, err = ps.ClaimLease(ctx, name, holder, ttl)
	if err != nil || !ok {
		return func() {}, ok, err
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(ttl / 4)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := ps.ClaimLease(ctx, name, holder, ttl); err != nil {
					warn(err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		ps.ReleaseLease(rctx, name, holder)
	}, true, nil
}
