package sqlstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockstep-hq/lockstep"
)

// A fork (or a new repository) on PostgreSQL in one round trip.
//
// The pipelined transaction of pgfast.go needs two round trips because
// the entry's hash covers its seq and prev_hash, which only the head read
// knows. Here the server computes the hash: Go encodes the entry's
// canonical JSON (lockstep.CanonicalEntry) around three holes — seq,
// time_us and prev_hash, the first, third and last fields — and the
// append statement splices the head's values into it and takes the
// SHA-256 (pgAppendHashedSQL). The bytes are the ones EntryHash hashes,
// so the chain and VerifyOps are unchanged. The head is locked by its own
// statement before the append, so the append's snapshot (a new one per
// statement, READ COMMITTED) sees the head and the entry it names; the
// entry's time is raised to its predecessor's if that is later, so times
// still follow seq though Go stamps the entry before the lock.
//
// A fork's entry and answer also carry what the fork takes from its base
// (network, default branch, base commit, the copied branch refs). Those
// are predicted from the last fork of the same base (pgBaseCache), and the
// fork statement checks the prediction against what it copied: a
// mismatch divides by zero, the transaction fails before its COMMIT
// (which the pipeline has sent), is rolled back, and the fork runs again
// in two round trips, reading the base as before (four in all). A prediction is only ever a guess:
// what commits is what the statement read, under the same locks.

// pgAppendHashedSQL appends an entry after the head with its hash
// computed in the statement. Arguments: $1 id, $2 time (µs; raised to the
// previous entry's), $3 key_id, $4 key_name, $5 op, $6 result,
// $7 read_only, $8 repo, $9 refs, $10 objects, $11 bytes,
// $12 duration_us, $13 trace_id, $14 follows, $15 details, $16 idem_key,
// $17 the canonical JSON between seq and time_us, $18 the canonical JSON
// after time_us up to prev_hash's opening quote (pgSplitEntry).
const pgAppendHashedHead = `WITH h AS (SELECT seq + 1 AS seq, hash AS prev,
		greatest($2::bigint, COALESCE((SELECT o.time FROM oplog o WHERE o.seq = oplog_head.seq), 0)) AS time
		FROM oplog_head WHERE id = 1),
	c AS (SELECT seq, prev, time, encode(sha256(convert_to('{"seq":' || seq, 'UTF8') || $17::bytea ||
		convert_to(time::text, 'UTF8') || $18::bytea || convert_to(prev || '"}', 'UTF8')), 'hex') AS hash FROM h),
	o AS (INSERT INTO oplog (seq, id, time, key_id, key_name, op, result, read_only, repo, refs,
			objects, bytes, duration_us, trace_id, follows, details, prev_hash, hash, idem_key)
		SELECT c.seq, $1::text, c.time, $3::text, $4::text, $5::text, $6::text, $7::boolean, $8::text, $9::text,
			$10::bigint, $11::bigint, $12::bigint, $13::text, $14::text, $15::text, c.prev, c.hash, $16::text FROM c
		RETURNING seq, time, prev_hash, hash),
	u AS (UPDATE oplog_head SET seq = c.seq, hash = c.hash FROM c WHERE oplog_head.id = 1)`

var (
	pgAppendHashedSQL = pgAppendHashedHead + ` SELECT seq, time, prev_hash, hash, 1 FROM o`
	// pgAppendHashedIdemSQL also upserts the deferred key (idemUpsertSQL
	// after the 18 arguments above); no row written is a division by zero.
	pgAppendHashedIdemSQL = pgAppendHashedHead + `,
	k AS (` + shiftParams(idemUpsertSQL, 18) + ` RETURNING 1)
	SELECT seq, time, prev_hash, hash, 1 / (SELECT count(*) FROM k)::int FROM o`
)

// pgLockHead locks the head row; the append that follows reads it with a
// snapshot taken after the lock.
const pgLockHead = `SELECT seq FROM oplog_head WHERE id = 1 FOR UPDATE`

// The holes of a canonical entry encoded with seq 0, time 0 and no
// previous hash.
const (
	canonSeqHole  = `{"seq":0`
	canonTimeHole = `,"time_us":0`
	canonPrevHole = `,"prev_hash":""}`
)

// pgSplitEntry returns the canonical encoding of e (details: its stored
// details) without its seq, time_us and prev_hash values, as the two
// pieces pgAppendHashedSQL splices them between; ok is false if the
// encoding does not have the expected shape.
func pgSplitEntry(e *lockstep.OpEntry, details json.RawMessage) (mid, tail []byte, ok bool) {
	c := *e
	c.Seq, c.Time, c.PrevHash = 0, time.UnixMicro(0), ""
	b := lockstep.CanonicalEntry(&c, details)
	// Inside a JSON string every '"' is escaped, so the first `,"time_us":`
	// is the field's.
	i := bytes.Index(b, []byte(canonTimeHole+","))
	if !bytes.HasPrefix(b, []byte(canonSeqHole+",")) || i < 0 || !bytes.HasSuffix(b, []byte(canonPrevHole)) {
		return nil, nil, false
	}
	mid = b[len(canonSeqHole) : i+len(canonTimeHole)-1]
	tail = b[i+len(canonTimeHole) : len(b)-2]
	return mid, tail, true
}

// pgHashedAppend is an entry's append as one statement of a pipelined
// transaction (after pgLockHead), and what reads its result.
type pgHashedAppend struct {
	q      string
	args   []any
	finish func(error) error
	e      *lockstep.OpEntry
}

// pgPrepareAppend stamps entry, names its key's parent and returns its
// hashed append; ok is false when the entry is not one it covers
// (pgIdemArgs) or does not split: the caller then takes the two-batch
// path, with entry as it was.
func (s *DB) pgPrepareAppend(ctx context.Context, entry *lockstep.OpEntry, parent string) (a pgHashedAppend, ok bool) {
	saved := *entry
	s.stampEntry(ctx, entry)
	if parent != "" {
		withParent(entry, parent)
	}
	details := lockstep.CanonicalDetails(entry.Details)
	mid, tail, split := pgSplitEntry(entry, details)
	iargs, finish, covered := s.pgIdemArgs(ctx, entry)
	if !split || !covered {
		*entry = saved
		return a, false
	}
	refs, _ := json.Marshal(nonNilRefs(entry.Refs))
	e := entry
	args := make([]any, 0, 18+len(iargs))
	args = append(args, e.ID, micros(e.Time), e.KeyID, e.KeyName, e.Op, e.Result, e.ReadOnly, e.Repo, string(refs),
		e.Objects, e.Bytes, e.DurationUS, e.TraceID, e.Follows, string(details), e.IdempotencyKey, mid, tail)
	q := pgAppendHashedSQL
	if iargs != nil {
		q = pgAppendHashedIdemSQL
		args = append(args, iargs...)
	}
	return pgHashedAppend{q: q, args: args, finish: finish, e: entry}, true
}

// queue adds the head lock and the append to b.
func (a *pgHashedAppend) queue(b *pgx.Batch) {
	b.Queue(pgLockHead)
	b.Queue(a.q, a.args...)
}

// read reads the head lock's and the append's results and fills in the
// entry's seq, time, prev_hash and hash.
func (a *pgHashedAppend) read(br pgx.BatchResults) error {
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("lock oplog head: %w", err)
	}
	var t int64
	var one int
	err := a.finish(br.QueryRow().Scan(&a.e.Seq, &t, &a.e.PrevHash, &a.e.Hash, &one))
	if err == nil {
		a.e.Time = fromMicros(t)
	}
	return err
}

// pgForkBase is what a fork takes from its base, as the last fork of that
// base found it: the prediction pgForkGuardedSQL checks.
type pgForkBase struct {
	network, defaultBranch, baseCommit string
	names, oids                        []string
}

// pgBaseCache holds the predictions, by base name; bounded (a base with
// many branches, or past maxBases bases, is not predicted).
type pgBaseCache struct {
	mu sync.Mutex
	m  map[string]*pgForkBase
}

const (
	pgMaxPredictedBases = 1024
	pgMaxPredictedRefs  = 256
)

func (c *pgBaseCache) get(base string) *pgForkBase {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[base]
}

func (c *pgBaseCache) put(base string, b *pgForkBase) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(b.names) > pgMaxPredictedRefs {
		delete(c.m, base)
		return
	}
	if c.m == nil {
		c.m = make(map[string]*pgForkBase)
	}
	if b.names == nil || b.oids == nil { // a NULL array would never compare equal
		b.names, b.oids = []string{}, []string{}
	}
	if _, known := c.m[base]; !known && len(c.m) >= pgMaxPredictedBases {
		return
	}
	c.m[base] = b
}

func (c *pgBaseCache) forget(base string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, base)
}

// pgForkGuardedSQL is pgForkRepoSQL that also checks what it copied
// against a prediction ($9 network, $10 default branch, $11 base commit,
// $12 and $13 the branch refs' names and oids ordered by name): it
// returns the new row's id, and divides by zero when there is no base or
// the base is not as predicted.
const pgForkGuardedSQL = `WITH b AS (SELECT id, name, network, default_branch FROM repos WHERE name = $1),
	r AS (INSERT INTO repos (name, network, fork_of, default_branch, status, owner_key_id, owner_name, base_commit, task, created_at, updated_at)
		SELECT $2, b.network, b.name, b.default_branch, $3, $4, $5,
			COALESCE((SELECT oid FROM refs WHERE repo_id = b.id AND name = 'refs/heads/' || b.default_branch), ''), $6, $7, $7
		FROM b RETURNING id, network, default_branch, base_commit),
	f AS (INSERT INTO refs (repo_id, name, oid, updated_at)
		SELECT r.id, x.name, x.oid, $8 FROM r, b, refs x WHERE x.repo_id = b.id AND substr(x.name, 1, 11) = 'refs/heads/'
		RETURNING name, oid)
	SELECT (SELECT id FROM r), 1 / COALESCE((SELECT (r.network = $9::text AND r.default_branch = $10::text AND r.base_commit = $11::text
		AND COALESCE((SELECT array_agg(name ORDER BY name) FROM f), '{}') = $12::text[]
		AND COALESCE((SELECT array_agg(oid ORDER BY name) FROM f), '{}') = $13::text[])::int FROM r), 0)`

// forkOneTrip is ForkRepo's transaction in one round trip, on the
// prediction pb of base; done is false when the base was not as predicted
// (or entry cannot be appended this way), with ws and entry as they were
// and the connection outside any transaction.
func (s *DB) forkOneTrip(ctx context.Context, pc *pgx.Conn, base string, ws *lockstep.Repo, entry *lockstep.OpEntry, fill func([]lockstep.Ref),
	now int64, parent string, pb *pgForkBase) (done bool, err error) {
	savedWS, savedE := *ws, *entry
	ws.Network, ws.ForkOf, ws.DefaultBranch, ws.BaseCommit = pb.network, base, pb.defaultBranch, pb.baseCommit
	if fill != nil {
		copied := make([]lockstep.Ref, len(pb.names))
		for i := range pb.names {
			copied[i] = lockstep.Ref{Name: pb.names[i], OID: pb.oids[i]}
		}
		fill(copied)
	}
	restore := func() { *ws, *entry = savedWS, savedE }
	a, ok := s.pgPrepareAppend(ctx, entry, parent)
	if !ok {
		restore()
		return false, nil
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(pgForkGuardedSQL, base, ws.Name, string(ws.Status), ws.OwnerKeyID, ws.OwnerName, ws.Task, micros(ws.CreatedAt), now,
		pb.network, pb.defaultBranch, pb.baseCommit, pb.names, pb.oids)
	a.queue(b)
	b.Queue("commit")
	br := pc.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil && done {
			err = cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return true, fmt.Errorf("begin: %w", err)
	}
	var one int
	err = br.QueryRow().Scan(&ws.ID, &one)
	var pg *pgconn.PgError
	switch {
	case errors.As(err, &pg) && pg.Code == errDivisionByZero:
		// No base, or not as predicted: roll back, and the caller reads
		// the base (two more round trips).
		s.pgBases.forget(base)
		restore()
		br.Close()
		if _, err := pc.Exec(ctx, "rollback"); err != nil {
			return true, fmt.Errorf("rollback: %w", err)
		}
		return false, nil
	case isUnique(err) && errors.As(err, &pg) && pg.TableName == "repos":
		return true, because(err, lockstep.ECONFLICT, "repository %s already exists", ws.Name)
	case err != nil:
		return true, fmt.Errorf("fork repo: %w", err)
	}
	if err := a.read(br); err != nil {
		return true, err
	}
	if _, err := br.Exec(); err != nil {
		return true, fmt.Errorf("commit: %w", err)
	}
	if err := br.Close(); err != nil {
		return true, err
	}
	s.hooks.deliver(*entry)
	return true, nil
}
