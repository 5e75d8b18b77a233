package lockstep

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Idempotency records (docs/idempotency.md). A request that carries an
// Idempotency-Key claims a record (owner key id, key) before it runs; the
// transaction that commits the operation's effect also marks the record
// committed and stores the answer its log entry carries, so a retry after a crash
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

// IdemClaim is the request-scoped side of a claimed idempotency key. It
// carries data only: the metadata store consults it inside every
// transaction that appends an operations-log entry, where the entry
// records the key and the record turns committed with the answer the
// entry carries (OpEntry.Answer), atomically with the effect.
type IdemClaim struct {
	Owner, Key, Token string
	// Status is the route's success status, set by the web layer (which
	// alone knows routes): a value an entry carries is stored with it; a
	// 204 stores no body (and is stored even when no value is carried).
	// A carried error is stored as its error envelope with status 0: the
	// web layer maps its code to a status when it replays it.
	Status int
	// Deferred, when set, means the record is not in the store yet (a
	// route whose effect is one transaction, docs/idempotency.md): the
	// first commit under the claim inserts it, with this record's owner,
	// key, fingerprint, method, path and times, and a concurrent
	// duplicate that committed first makes that transaction fail. A
	// success answer carried by such a commit is stored as done: it is the
	// final answer, and the web layer sends exactly it.
	Deferred *IdemRecord

	mu      sync.Mutex
	lost    bool
	commits []IdemCommit
}

// IdemCommit is an answer the store wrote with a commit under a claim.
type IdemCommit struct {
	State  string // IdemCommitted or IdemDone
	Status int    // 0: nothing carried, or a refusal (Body is its error envelope)
	Header map[string]string
	Body   []byte
}

// Refusal reports whether the commit stored a refused write's answer.
func (ic IdemCommit) Refusal() bool { return ic.Status == 0 && len(ic.Body) > 0 }

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

// Answer is what the store writes on the record for the value an entry
// carries (OpEntry.Answer), rendered when the entry is appended (so the
// fields the store fills in a pointer are in it). A value: the claim's
// status, a JSON body with its secrets redacted (RedactSecrets). An
// error: status 0 and its error envelope (the web layer maps the code to
// a status). No value: nothing to store (ok false), except for a 204.
func (c *IdemClaim) Answer(v any) (ic IdemCommit, ok bool) {
	if v == nil {
		if c.Status == 204 {
			return IdemCommit{Status: 204, Header: map[string]string{}}, true
		}
		return IdemCommit{}, false
	}
	if err, isErr := v.(error); isErr {
		return IdemCommit{Header: jsonHeader(), Body: ErrorEnvelope(err)}, true
	}
	if c.Status == 204 {
		return IdemCommit{Status: 204, Header: map[string]string{}}, true
	}
	b, err := json.Marshal(v)
	if err != nil {
		return IdemCommit{}, false
	}
	st := c.Status
	if st == 0 {
		st = 200
	}
	return IdemCommit{Status: st, Header: jsonHeader(), Body: RedactSecrets(b)}, true
}

func jsonHeader() map[string]string {
	return map[string]string{"Content-Type": "application/json; charset=utf-8"}
}

// ErrorEnvelope is the JSON error answer of err, as the web layer writes
// it: {"error":{"code","message","details"}}.
func ErrorEnvelope(err error) []byte {
	b, _ := json.Marshal(errorEnvelope{Error: errorEnvelopeDetail{Code: ErrorCode(err), Message: ErrorMessage(err), Details: ErrorDetails(err)}})
	return b
}

// ErrorEnvelopeCode returns the code of an error envelope ("" when body is
// not one).
func ErrorEnvelopeCode(body []byte) string {
	var e errorEnvelope
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

type errorEnvelope struct {
	Error errorEnvelopeDetail `json:"error"`
}

type errorEnvelopeDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// SecretFields are the JSON field names that carry a secret shown once
// (a new API key's secret, a rotated hook secret). Whatever the route, a
// stored answer never holds them.
var SecretFields = map[string]bool{"secret": true}

// RedactSecrets is the one place a stored answer loses its secrets: every
// field named in SecretFields, at any depth of the JSON answer, is
// dropped and replaced by "<field>_withheld": true, so a replay says the
// secret was shown once and is not kept. Used for every route, on the
// answer an entry carries and on the answer the handler wrote alike.
func RedactSecrets(body []byte) []byte {
	if len(body) == 0 || !bytes.Contains(body, []byte(`"secret`)) {
		return body
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return body
	}
	if !redactValue(v) {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}

// redactValue drops secret fields from a decoded JSON value in place and
// reports whether it dropped any.
func redactValue(v any) bool {
	changed := false
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if SecretFields[k] {
				delete(x, k)
				x[k+"_withheld"] = true
				changed = true
				continue
			}
			if redactValue(e) {
				changed = true
			}
		}
	case []any:
		for _, e := range x {
			if redactValue(e) {
				changed = true
			}
		}
	}
	return changed
}
