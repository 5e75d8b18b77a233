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

// Object GC's side of the metadata store (issue 28, migration 0021,
// docs/replicas.md "Object GC"). network_state.gc_at is the time of the
// last GC that dropped objects of the network; a ref move whose objects
// were checked before it is refused (checkGCSince), and the GC's commit
// refuses when a ref moved to something it did not see (CommitGC). Both
// take the network's state row, so one of them waits for the other.

var _ lockstep.GCStore = (*DB)(nil)

// GCNetworks lists every network that has a repository or a live pack
// registered (object storage: a network whose repositories are gone still
// holds packs in the bucket), by name.
func (s *DB) GCNetworks(ctx context.Context) (out []string, err error) {
	ctx, span := s.start(ctx, "GCNetworks")
	defer func() { err = end(span, err) }()
	rows, err := s.db.QueryContext(ctx, `SELECT network FROM repos UNION SELECT network FROM network_packs WHERE retired_at IS NULL ORDER BY network`)
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

// GCRoots reads the refs of network's repositories, and the attempts and
// checkpoints of those that still have a ref (not purged), in one
// transaction.
func (s *DB) GCRoots(ctx context.Context, network string) (roots lockstep.GCRoots, err error) {
	ctx, span := s.start(ctx, "GCRoots")
	defer func() { err = end(span, err) }()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		refs, err := networkRefs(ctx, tx, network)
		if err != nil {
			return err
		}
		roots.Refs = refs
		// A purged workspace (no ref left) retains nothing: its attempt
		// rows stay for the log, its objects become cruft.
		rows, err := tx.QueryContext(ctx, `SELECT a.commit_oid FROM attempts a JOIN repos r ON r.id = a.repo_id
			WHERE r.network = $1 AND EXISTS (SELECT 1 FROM refs f WHERE f.repo_id = r.id)
			UNION SELECT c.commit_oid FROM checkpoints c JOIN repos r ON r.id = c.repo_id
			WHERE r.network = $1 AND EXISTS (SELECT 1 FROM refs f WHERE f.repo_id = r.id)`, network)
		if err != nil {
			return fmt.Errorf("read retained commits of %s: %w", network, err)
		}
		defer rows.Close()
		for rows.Next() {
			var oid string
			if err := rows.Scan(&oid); err != nil {
				return err
			}
			roots.Retained = append(roots.Retained, oid)
		}
		return rows.Err()
	})
	return roots, err
}

type querier interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// networkRefs reads every ref of network's repositories.
func networkRefs(ctx context.Context, q querier, network string) (out []lockstep.NetworkRef, err error) {
	rows, err := q.QueryContext(ctx, `SELECT r.name, f.name, f.oid, f.updated_at FROM repos r JOIN refs f ON f.repo_id = r.id
		WHERE r.network = $1 ORDER BY r.name, f.name`, network)
	if err != nil {
		return nil, fmt.Errorf("read refs of %s: %w", network, err)
	}
	defer rows.Close()
	for rows.Next() {
		var nr lockstep.NetworkRef
		var u int64
		if err := rows.Scan(&nr.Repo, &nr.Name, &nr.OID, &u); err != nil {
			return nil, err
		}
		nr.UpdatedAt = fromMicros(u)
		out = append(out, nr)
	}
	return out, rows.Err()
}

// CommitGC: see lockstep.GCStore.
func (s *DB) CommitGC(ctx context.Context, network string, check func([]lockstep.NetworkRef) error, p *lockstep.PackRecord, retire []string) (g int64, err error) {
	ctx, span := s.start(ctx, "CommitGC")
	defer func() { err = end(span, err) }()
	if p != nil {
		if err := checkPack(*p); err != nil {
			return 0, err
		}
	}
	retire = slices.Clone(retire)
	slices.Sort(retire)
	retire = slices.Compact(retire)
	for _, h := range retire {
		if err := lockstep.CheckPackHash(h); err != nil {
			return 0, err
		}
		if p != nil && h == p.Hash {
			return 0, lockstep.Errorf(lockstep.EINVALID, "pack %s of network %s cannot replace itself", h, network)
		}
	}
	now := micros(s.now())
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		// The state row first: a ref move checking ObjectsSince holds it
		// shared (checkGCSince), so it and this transaction are ordered.
		if _, err := tx.ExecContext(ctx, `INSERT INTO network_state (network, generation, gc_at) VALUES ($1, 0, $2)
			ON CONFLICT (network) DO UPDATE SET gc_at = $2`, network, now); err != nil {
			return fmt.Errorf("record gc of %s: %w", network, err)
		}
		refs, err := networkRefs(ctx, tx, network)
		if err != nil {
			return err
		}
		if err := check(refs); err != nil {
			return err
		}
		changed := false
		var stamp []string // the records this transaction registers or retires
		if p != nil {
			q := *p
			q.Network = network
			inserted, retired, err := insertPack(ctx, tx, q, now)
			if err != nil {
				return err
			}
			if retired {
				return lockstep.Errorf(lockstep.ECONFLICT, "pack %s of network %s is registered and retired: a retired pack is never made live again", q.Hash, network)
			}
			changed = inserted
			if inserted {
				stamp = append(stamp, q.Hash)
			}
		}
		for _, h := range retire {
			res, err := tx.ExecContext(ctx, `UPDATE network_packs SET retired_at = $1 WHERE network = $2 AND hash = $3 AND retired_at IS NULL`, now, network, h)
			if err != nil {
				return fmt.Errorf("retire pack %s: %w", h, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				return lockstep.Errorf(lockstep.EREFCONFLICT, "pack %s of network %s is no longer live (a compaction replaced it): the gc changed nothing", h, network).
					WithDetails(map[string]any{"network": network, "pack": h})
			}
			changed = true
			stamp = append(stamp, h)
		}
		if changed {
			g, err = s.bumpGeneration(ctx, tx, network, stamp...)
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

// checkGCSince refuses the updates whose ObjectsSince is not after the
// last object GC of their repository's network: the GC may have dropped
// an object the write found before it. The state row is read shared
// (PostgreSQL), so a GC committing meanwhile waits for this transaction
// and then sees its refs.
func (s *DB) checkGCSince(ctx context.Context, tx *sql.Tx, updates []lockstep.RefUpdate) error {
	seen := map[int64]bool{}
	for _, u := range updates {
		if u.ObjectsSince.IsZero() || u.New == lockstep.ZeroOID || seen[u.RepoID] {
			continue
		}
		seen[u.RepoID] = true
		q := `SELECT st.gc_at FROM repos r JOIN network_state st ON st.network = r.network WHERE r.id = $1`
		if s.dialect == "postgres" {
			q += ` FOR SHARE OF st`
		}
		var at int64
		err := tx.QueryRowContext(ctx, q, u.RepoID).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			continue // never collected
		}
		if err != nil {
			return fmt.Errorf("read gc time of %s: %w", u.Repo, err)
		}
		if at > 0 && at >= micros(u.ObjectsSince) {
			return lockstep.Errorf(lockstep.EUNAVAILABLE, "an object gc of %s's network ran during this write (at %s): nothing was changed; retry the write",
				u.Repo, fromMicros(at).UTC().Format(time.RFC3339Nano))
		}
	}
	return nil
}
