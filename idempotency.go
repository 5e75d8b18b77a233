package lockstep

import (
	"context"
	"sync"
	"time"
)

// Idempotency records (docs/idempotency.md). A request that carries an
// Idempotency-Key claims a record (owner key id, key) before it runs; the
// transaction that commits the operation's effect also marks the record
// committed and stores the answer staged so far, so a retry after a crash
// between commit and response gets the first answer instead of a second
// execution.
const (
	IdemRunning   = "running"   // claimed, nothing committed yet
	IdemCommitted = "committed" // an effect committed under the key; the final answer may not be stored yet
	IdemDone      = "done"      // the final answer is stored
)

// IdemRecord is one idempotency key as stored.
type IdemRecord struct {
	Owner       string // API key id of the caller
	Key         string // the Idempotency-Key header
	Fingerprint string // hex SHA-256 of method, route, path params, query and body
	Method      string
	Path        string
	State       string
	Token       string    // the claim of the request executing it (fencing)
	LeaseUntil  time.Time // a running claim is alive until then
	OpID        string    // first operations-log entry committed under the key
	Status      int
	Header      map[string]string
	Body        []byte
	Replays     int
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// IdempotencyStore keeps idempotency records.
type IdempotencyStore interface {
	// ClaimIdem inserts rec as running, or returns the live record that
	// already holds (owner, key); an expired one is replaced.
	ClaimIdem(ctx context.Context, rec *IdemRecord) (existing *IdemRecord, err error)
	// IdemByKey returns not_found when there is no record.
	IdemByKey(ctx context.Context, owner, key string) (*IdemRecord, error)
	// TakeOverIdem hands a running record whose lease ran out to a new
	// claim, only if its token is still oldToken and no operations-log
	// entry carries the key (nothing committed under it). It reports
	// whether the caller now holds the record.
	TakeOverIdem(ctx context.Context, owner, key, oldToken, newToken string, leaseUntil time.Time) (bool, error)
	// ExtendIdem moves a held claim's lease.
	ExtendIdem(ctx context.Context, owner, key, token string, leaseUntil time.Time) error
	// FinishIdem stores the final answer of a held claim (state done).
	FinishIdem(ctx context.Context, owner, key, token string, status int, header map[string]string, body []byte) error
	// ReleaseIdem deletes a held claim under which nothing committed, so a
	// retry executes afresh.
	ReleaseIdem(ctx context.Context, owner, key, token string) error
	// CountIdemReplay counts one replay on the record and on every
	// operations-log entry committed under the key (the replays column is
	// outside the entries' hashes).
	CountIdemReplay(ctx context.Context, owner, key string) error
	// PurgeIdem deletes records that expired before t (never a running one
	// whose lease is alive) and returns how many.
	PurgeIdem(ctx context.Context, t time.Time) (int64, error)
	// OpsByIdemKey returns the operations-log entries committed under a key.
	OpsByIdemKey(ctx context.Context, owner, key string) ([]*OpEntry, error)
}

// IdemClaim is the request-scoped side of a claimed idempotency key. The
// metadata store consults it inside every transaction that appends an
// operations-log entry: the entry records the key, and the record turns
// committed with the answer staged so far, atomically with the effect.
type IdemClaim struct {
	Owner, Key, Token string
	// Render turns a staged value (or error) into the HTTP answer; set by
	// the web layer, which alone knows statuses. ok false: nothing to store.
	Render func(v any, staged bool) (status int, header map[string]string, body []byte, ok bool)
	// Deferred, when set, means the record is not in the store yet (a
	// route whose effect is one transaction, docs/idempotency.md): the
	// first commit under the claim inserts it, with this record's owner,
	// key, fingerprint, method, path and times, and a concurrent
	// duplicate that committed first makes that transaction fail. A
	// success answer staged at such a commit is stored as done: it is the
	// final answer, and the web layer sends exactly it.
	Deferred *IdemRecord

	mu      sync.Mutex
	value   any
	staged  bool
	wraps   []func(any) any
	lost    bool
	commits []IdemCommit
}

// IdemCommit is an answer the store wrote with a commit under a claim.
type IdemCommit struct {
	State  string // IdemCommitted or IdemDone
	Status int    // 0: nothing staged
	Header map[string]string
	Body   []byte
}

// NoteCommit is called by the store inside the transaction that wrote the
// record (the transaction's effect fails the request if it rolls back).
func (c *IdemClaim) NoteCommit(ic IdemCommit) {
	c.mu.Lock()
	c.commits = append(c.commits, ic)
	c.mu.Unlock()
}

// Commits returns the answers written with the request's commits.
func (c *IdemClaim) Commits() []IdemCommit {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]IdemCommit(nil), c.commits...)
}

// MarkLost records that a commit found the key held by another request
// (that transaction failed; the other request's answer is the result).
func (c *IdemClaim) MarkLost() {
	c.mu.Lock()
	c.lost = true
	c.mu.Unlock()
}

// Lost reports whether MarkLost was called.
func (c *IdemClaim) Lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

type idemKey struct{}

// WithIdemClaim returns ctx carrying c.
func WithIdemClaim(ctx context.Context, c *IdemClaim) context.Context {
	return context.WithValue(ctx, idemKey{}, c)
}

// IdemClaimFrom returns the claim of the request, or nil.
func IdemClaimFrom(ctx context.Context) *IdemClaim {
	c, _ := ctx.Value(idemKey{}).(*IdemClaim)
	return c
}

// StageResult records the answer an operation will give if the commit it
// is about to make succeeds (a pointer is rendered when the commit runs,
// so fields the store fills in are included). Without a claim it does
// nothing. An error value stages an error answer (a refused write).
func StageResult(ctx context.Context, v any) {
	if c := IdemClaimFrom(ctx); c != nil {
		c.mu.Lock()
		c.value, c.staged = v, true
		c.mu.Unlock()
	}
}

// StageWrap lets an outer operation turn the inner one's staged value into
// its own answer (promote wraps the merge it lands). Call the returned
// function when the outer operation is done.
func StageWrap(ctx context.Context, f func(inner any) any) (undo func()) {
	c := IdemClaimFrom(ctx)
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	c.wraps = append(c.wraps, f)
	n := len(c.wraps)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if len(c.wraps) >= n {
			c.wraps = c.wraps[:n-1]
		}
		c.mu.Unlock()
	}
}

// Provisional renders the staged answer for the commit being made.
func (c *IdemClaim) Provisional() (status int, header map[string]string, body []byte, ok bool) {
	c.mu.Lock()
	v, staged := c.value, c.staged
	if _, isErr := v.(error); staged && !isErr {
		for i := len(c.wraps) - 1; i >= 0; i-- {
			v = c.wraps[i](v)
		}
	}
	c.mu.Unlock()
	if c.Render == nil {
		return 0, nil, nil, false
	}
	return c.Render(v, staged)
}
