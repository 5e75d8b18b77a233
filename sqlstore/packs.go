package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// The pack list, generation and leases of object-storage mode (issue #11,
// docs/replicas.md; tables of migration 0010). The generation follows the
// pack list only: ref moves leave it (a cache that misses an object a new
// ref names catches up then).
//
// Times are the store's clock (Options.Now), like every other timestamp
// here: replicas' clocks must agree to well within a lease's ttl.

var _ lockstep.PackStore = (*DB)(nil)
var _ lockstep.InlinePackStore = (*DB)(nil)
var _ lockstep.PackChangeStore = (*DB)(nil)

// checkPack refuses a record the object store could not name.
func checkPack(p lockstep.PackRecord) error {
	if p.Network == "" {
		return lockstep.Errorf(lockstep.EINVALID, "pack %s: the network is empty", p.Hash)
	}
	if err := lockstep.CheckPackHash(p.Hash); err != nil {
		return err
	}
	if p.PackBytes < 0 || p.IdxBytes < 0 || p.Objects < 0 {
		return lockstep.Errorf(lockstep.EINVALID, "pack %s: negative size or object count (pack %d bytes, index %d bytes, %d objects)", p.Hash, p.PackBytes, p.IdxBytes, p.Objects)
	}
	return nil
}

// bumpGeneration adds one to network's generation inside tx and returns
// it (1 for a network never bumped), and stamps the records of stamp
// (the packs the transaction registered or retired) with it
// (changed_gen, migration 0030: PackChanges lists by it). On PostgreSQL
// the upsert holds the row until commit, so concurrent bumps queue and
// each sees the last: the records of generation g commit before any of
// g+1, and a snapshot that reads g sees every record stamped up to g.
func (s *DB) bumpGeneration(ctx context.Context, tx *sql.Tx, network string, stamp ...string) (int64, error) {
	var g int64
	const bump = `INSERT INTO network_state (network, generation) VALUES ($1, 1)
		ON CONFLICT (network) DO UPDATE SET generation = network_state.generation + 1
		RETURNING generation`
	rest := stamp
	var err error
	if s.dialect == "postgres" && len(stamp) > 0 {
		// One round trip for the bump and the first stamp (a write's
		// registration has exactly one).
		err = tx.QueryRowContext(ctx, `WITH b AS (`+bump+`),
			u AS (UPDATE network_packs SET changed_gen = (SELECT generation FROM b) WHERE network = $1 AND hash = $2)
			SELECT generation FROM b`, network, stamp[0]).Scan(&g)
		rest = stamp[1:]
	} else {
		err = tx.QueryRowContext(ctx, bump, network).Scan(&g)
	}
	if err != nil {
		return 0, fmt.Errorf("bump generation of %s: %w", network, err)
	}
	for _, h := range rest {
		if _, err := tx.ExecContext(ctx, `UPDATE network_packs SET changed_gen = $1 WHERE network = $2 AND hash = $3`, g, network, h); err != nil {
			return 0, fmt.Errorf("stamp pack %s: %w", h, err)
		}
	}
	return g, nil
}

// generation reads network's generation (0 if never bumped).
func generation(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, network string) (int64, error) {
	var g int64
	err := q.QueryRowContext(ctx, `SELECT generation FROM network_state WHERE network = $1`, network).Scan(&g)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read generation of %s: %w", network, err)
	}
	return g, nil
}

// insertPack inserts p as live unless a record of it exists; it reports
// whether it inserted and, if not, whether the existing record is retired.
func insertPack(ctx context.Context, tx *sql.Tx, p lockstep.PackRecord, now int64) (inserted, retired bool, err error) {
	return insertPackData(ctx, tx, p, now, nil, nil)
}

// insertPackData is insertPack keeping the pack's bytes in the record
// when pack is not nil (an inline pack).
func insertPackData(ctx context.Context, tx *sql.Tx, p lockstep.PackRecord, now int64, pack, idx []byte) (inserted, retired bool, err error) {
	var pd, id any // NULL: the pack is in the bucket
	if pack != nil {
		pd, id = pack, idx
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO network_packs (network, hash, pack_bytes, idx_bytes, objects, registered_at, pack_data, idx_data)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (network, hash) DO NOTHING`,
		p.Network, p.Hash, p.PackBytes, p.IdxBytes, p.Objects, now, pd, id)
	if err != nil {
		return false, false, fmt.Errorf("insert pack %s: %w", p.Hash, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return true, false, nil
	}
	var r sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT retired_at FROM network_packs WHERE network = $1 AND hash = $2`, p.Network, p.Hash).Scan(&r); err != nil {
		return false, false, fmt.Errorf("read pack %s: %w", p.Hash, err)
	}
	return false, r.Valid, nil
}

// RegisterPack inserts p as live and bumps its network's generation in one
// transaction; a pack already registered (live or retired) changes nothing
// and the current generation is returned.
func (s *DB) RegisterPack(ctx context.Context, p lockstep.PackRecord) (g int64, err error) {
	ctx, span := s.start(ctx, "RegisterPack")
	defer func() { err = end(span, err) }()
	if err := checkPack(p); err != nil {
		return 0, err
	}
	if s.dialect == "postgres" {
		return s.pgRegister(ctx, p, nil, nil)
	}
	return s.registerPack(ctx, p.Network, p.Hash, func(tx *sql.Tx, now int64) (bool, error) {
		inserted, _, err := insertPack(ctx, tx, p, now)
		return inserted, err
	})
}

// pgRegisterSQL registers a pack on PostgreSQL in one statement (one
// round trip in place of BEGIN, insert, bump, COMMIT): when no record of
// the pack exists, the generation is bumped (the state row locked until
// commit, as bumpGeneration) and the record inserted stamped with it;
// the answer is the record's generation, or, for a pack already
// registered, the current one. Two registrations of one new pack racing
// may both bump; the loser inserts nothing and returns the generation it
// read (a bump with no change costs a catch-up a read, nothing more).
const pgRegisterSQL = `WITH ex AS (SELECT 1 FROM network_packs WHERE network = $1 AND hash = $2),
	b AS (INSERT INTO network_state (network, generation) SELECT $1, 1 WHERE NOT EXISTS (SELECT 1 FROM ex)
		ON CONFLICT (network) DO UPDATE SET generation = network_state.generation + 1
		RETURNING generation),
	ins AS (INSERT INTO network_packs (network, hash, pack_bytes, idx_bytes, objects, registered_at, pack_data, idx_data, changed_gen)
		SELECT $1, $2, $3::bigint, $4::bigint, $5::bigint, $6::bigint, $7::bytea, $8::bytea, generation FROM b
		ON CONFLICT (network, hash) DO NOTHING
		RETURNING changed_gen)
	SELECT COALESCE((SELECT changed_gen FROM ins), (SELECT generation FROM network_state WHERE network = $1), 0)`

// pgRegister is registerPack on PostgreSQL (pgRegisterSQL); pack nil: the
// pack is in the bucket.
func (s *DB) pgRegister(ctx context.Context, p lockstep.PackRecord, pack, idx []byte) (g int64, err error) {
	var pd, id any
	if pack != nil {
		pd, id = pack, idx
	}
	err = s.db.QueryRowContext(ctx, pgRegisterSQL, p.Network, p.Hash, p.PackBytes, p.IdxBytes, p.Objects, micros(s.now()), pd, id).Scan(&g)
	if err != nil {
		return 0, fmt.Errorf("register pack %s: %w", p.Hash, err)
	}
	return g, nil
}

// registerPack runs insert (the record, with or without its bytes) and
// bumps the network's generation when it inserted, in one transaction;
// it returns the generation.
func (s *DB) registerPack(ctx context.Context, network, hash string, insert func(tx *sql.Tx, now int64) (bool, error)) (g int64, err error) {
	now := micros(s.now())
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		inserted, err := insert(tx, now)
		if err != nil {
			return err
		}
		if inserted {
			g, err = s.bumpGeneration(ctx, tx, network, hash)
		} else {
			g, err = generation(ctx, tx, network)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return g, nil
}

// RegisterInlinePack is RegisterPack keeping the pack's and its index's
// bytes in the record (lockstep.InlinePackStore).
func (s *DB) RegisterInlinePack(ctx context.Context, p lockstep.PackRecord, pack, idx []byte) (g int64, err error) {
	ctx, span := s.start(ctx, "RegisterInlinePack")
	defer func() { err = end(span, err) }()
	if err := checkPack(p); err != nil {
		return 0, err
	}
	if pack == nil || idx == nil || int64(len(pack)) != p.PackBytes || int64(len(idx)) != p.IdxBytes {
		return 0, lockstep.Errorf(lockstep.EINVALID, "inline pack %s: %d pack bytes and %d index bytes given, the record says %d and %d", p.Hash, len(pack), len(idx), p.PackBytes, p.IdxBytes)
	}
	if s.dialect == "postgres" {
		return s.pgRegister(ctx, p, pack, idx)
	}
	return s.registerPack(ctx, p.Network, p.Hash, func(tx *sql.Tx, now int64) (bool, error) {
		inserted, _, err := insertPackData(ctx, tx, p, now, pack, idx)
		return inserted, err
	})
}

// InlinePack returns an inline pack's bytes; not_found when its record is
// gone or keeps no bytes (the pack is in the bucket).
func (s *DB) InlinePack(ctx context.Context, network, hash string) (pack, idx []byte, err error) {
	ctx, span := s.start(ctx, "InlinePack")
	defer func() { err = end(span, err) }()
	if err := lockstep.CheckPackHash(hash); err != nil {
		return nil, nil, err
	}
	err = s.db.QueryRowContext(ctx, `SELECT pack_data, idx_data FROM network_packs WHERE network = $1 AND hash = $2`, network, hash).Scan(&pack, &idx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, because(err, lockstep.ENOTFOUND, "pack %s of network %s: no record (deleted by GC)", hash, network)
	}
	if err != nil {
		return nil, nil, err
	}
	if pack == nil || idx == nil {
		return nil, nil, lockstep.Errorf(lockstep.ENOTFOUND, "pack %s of network %s is not kept in the database", hash, network)
	}
	return pack, idx, nil
}

// ReplacePacks registers p and retires every pack of old, in one
// transaction bumping the generation once. A pack of old that is not live
// (retired, or never registered) is ref_conflict and nothing changes.
// p already registered live is kept as it is; p registered and retired is
// already_exists (reviving it could race the GC deleting its objects), as
// is p named in old (invalid_argument).
func (s *DB) ReplacePacks(ctx context.Context, p lockstep.PackRecord, old []string) (g int64, err error) {
	ctx, span := s.start(ctx, "ReplacePacks")
	defer func() { err = end(span, err) }()
	if err := checkPack(p); err != nil {
		return 0, err
	}
	// Retire in one order (sorted, once each): two compactions of one
	// network lock the rows they share in the same order and never
	// deadlock on PostgreSQL.
	old = slices.Clone(old)
	slices.Sort(old)
	old = slices.Compact(old)
	for _, h := range old {
		if err := lockstep.CheckPackHash(h); err != nil {
			return 0, err
		}
		if h == p.Hash {
			return 0, lockstep.Errorf(lockstep.EINVALID, "pack %s of network %s cannot replace itself", p.Hash, p.Network)
		}
	}
	now := micros(s.now())
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		inserted, retired, err := insertPack(ctx, tx, p, now)
		if err != nil {
			return err
		}
		if retired {
			return lockstep.Errorf(lockstep.ECONFLICT, "pack %s of network %s is registered and retired: a retired pack is never made live again", p.Hash, p.Network)
		}
		for _, h := range old {
			res, err := tx.ExecContext(ctx, `UPDATE network_packs SET retired_at = $1 WHERE network = $2 AND hash = $3 AND retired_at IS NULL`, now, p.Network, h)
			if err != nil {
				return fmt.Errorf("retire pack %s: %w", h, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return lockstep.Errorf(lockstep.EREFCONFLICT, "pack %s of network %s is no longer live (another compaction replaced it, or it was never registered): nothing was changed", h, p.Network).
					WithDetails(map[string]any{"network": p.Network, "pack": h})
			}
		}
		if inserted || len(old) > 0 {
			stamp := old
			if inserted {
				stamp = append([]string{p.Hash}, old...)
			}
			g, err = s.bumpGeneration(ctx, tx, p.Network, stamp...)
		} else {
			g, err = generation(ctx, tx, p.Network)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return g, nil
}

// NetworkPacks returns every pack record of network, oldest first, with the
// generation, in one statement: one snapshot on both engines (two SELECTs
// in a READ COMMITTED transaction on PostgreSQL would not be).
func (s *DB) NetworkPacks(ctx context.Context, network string) (out []lockstep.PackRecord, g int64, err error) {
	ctx, span := s.start(ctx, "NetworkPacks")
	defer func() { err = end(span, err) }()
	// One row with a NULL hash when the network has no packs.
	changes, g, err := s.packRows(ctx, network, `SELECT st.g, p.hash, p.pack_bytes, p.idx_bytes, p.objects, p.registered_at, p.retired_at, p.pack_data IS NOT NULL, NULL, NULL
		FROM (SELECT COALESCE((SELECT generation FROM network_state WHERE network = $1), 0) AS g) st
		LEFT JOIN network_packs p ON p.network = $1
		ORDER BY p.registered_at, p.hash`, network)
	for _, c := range changes {
		out = append(out, c.PackRecord)
	}
	return out, g, err
}

// PackChanges returns the records of network changed (registered or
// retired) after generation since, or never stamped (changed_gen 0: an
// older version wrote them), oldest first, each live inline one with its
// bytes, and the generation, in one statement (one snapshot, as
// NetworkPacks).
func (s *DB) PackChanges(ctx context.Context, network string, since int64) (out []lockstep.PackChange, g int64, err error) {
	ctx, span := s.start(ctx, "PackChanges")
	defer func() { err = end(span, err) }()
	return s.packRows(ctx, network, `SELECT st.g, p.hash, p.pack_bytes, p.idx_bytes, p.objects, p.registered_at, p.retired_at, p.pack_data IS NOT NULL,
			CASE WHEN p.retired_at IS NULL THEN p.pack_data END, CASE WHEN p.retired_at IS NULL THEN p.idx_data END
		FROM (SELECT COALESCE((SELECT generation FROM network_state WHERE network = $1), 0) AS g) st
		LEFT JOIN network_packs p ON p.network = $1 AND (p.changed_gen > $2 OR p.changed_gen = 0)
		ORDER BY p.registered_at, p.hash`, network, since)
}

// packRows reads the rows of NetworkPacks and PackChanges: the
// generation, then a record's columns (a NULL hash: no record, the
// generation alone) and its bytes (NULL unless asked for).
func (s *DB) packRows(ctx context.Context, network, query string, args ...any) (out []lockstep.PackChange, g int64, err error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var hash sql.NullString
		var pb, ib, objs, reg sql.NullInt64
		var ret sql.NullInt64
		var inline sql.NullBool
		var pack, idx []byte
		if err := rows.Scan(&g, &hash, &pb, &ib, &objs, &reg, &ret, &inline, &pack, &idx); err != nil {
			return nil, 0, err
		}
		if !hash.Valid {
			continue
		}
		p := lockstep.PackChange{PackRecord: lockstep.PackRecord{Network: network, Hash: hash.String, PackBytes: pb.Int64, IdxBytes: ib.Int64, Objects: int(objs.Int64),
			RegisteredAt: fromMicros(reg.Int64), Inline: inline.Bool}, Pack: pack, Idx: idx}
		if ret.Valid {
			p.RetiredAt = fromMicros(ret.Int64)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	return out, g, nil
}

// NetworkGeneration returns network's generation (0 if never bumped): one
// primary-key read.
func (s *DB) NetworkGeneration(ctx context.Context, network string) (g int64, err error) {
	ctx, span := s.start(ctx, "NetworkGeneration")
	defer func() { err = end(span, err) }()
	return generation(ctx, s.db, network)
}

// NetworkRefs returns every ref of every repository of network, by
// repository then ref name.
func (s *DB) NetworkRefs(ctx context.Context, network string) (out []lockstep.NetworkRef, err error) {
	ctx, span := s.start(ctx, "NetworkRefs")
	defer func() { err = end(span, err) }()
	return networkRefs(ctx, s.db, network)
}

// PackNetworks lists the networks with at least one pack record (live or
// retired), by name.
func (s *DB) PackNetworks(ctx context.Context) (out []string, err error) {
	ctx, span := s.start(ctx, "PackNetworks")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT network FROM network_packs ORDER BY network`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// DeletePackRecord removes a retired pack's record; a live one is refused
// (invalid_argument), an unknown one is not an error. The generation does
// not move: the live list is the same.
func (s *DB) DeletePackRecord(ctx context.Context, network, hash string) (err error) {
	ctx, span := s.start(ctx, "DeletePackRecord")
	defer func() { err = end(span, err) }()
	if err := lockstep.CheckPackHash(hash); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM network_packs WHERE network = $1 AND hash = $2 AND retired_at IS NOT NULL`, network, hash)
		if err != nil {
			return fmt.Errorf("delete pack %s: %w", hash, err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM network_packs WHERE network = $1 AND hash = $2`, network, hash).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("read pack %s: %w", hash, err)
		}
		return lockstep.Errorf(lockstep.EINVALID, "pack %s of network %s is live: only a retired pack's record can be deleted", hash, network)
	})
}

// ClaimLease takes the named lease for holder until now+ttl in one
// statement: an upsert that replaces the row only when it is holder's or
// has expired (expires_at <= now). On PostgreSQL the conflicting row is
// locked and the condition read from its latest version, so of several
// claimants exactly one wins.
func (s *DB) ClaimLease(ctx context.Context, name, holder string, ttl time.Duration) (ok bool, err error) {
	ctx, span := s.start(ctx, "ClaimLease")
	defer func() { err = end(span, err) }()
	switch {
	case name == "":
		return false, lockstep.Errorf(lockstep.EINVALID, "lease name is empty")
	case holder == "":
		return false, lockstep.Errorf(lockstep.EINVALID, "lease %s: the holder is empty", name)
	case ttl <= 0:
		return false, lockstep.Errorf(lockstep.EINVALID, "lease %s: ttl %v is not positive", name, ttl)
	}
	now := s.now()
	var got string
	err = s.db.QueryRowContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= $4
		RETURNING holder`, name, holder, micros(now.Add(ttl)), micros(now)).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim lease %s: %w", name, err)
	}
	return true, nil
}

// ReleaseLease frees the lease if holder holds it; otherwise nothing
// changes.
func (s *DB) ReleaseLease(ctx context.Context, name, holder string) (err error) {
	ctx, span := s.start(ctx, "ReleaseLease")
	defer func() { err = end(span, err) }()
	if _, err := s.db.ExecContext(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder); err != nil {
		return fmt.Errorf("release lease %s: %w", name, err)
	}
	return nil
}
