package lockstep

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// canonicalEntry fixes the field order and encodings of an operations-log
// entry for hashing. Times are UTC microseconds so that a round trip through
// either database yields the same bytes.
type canonicalEntry struct {
	Seq        int64           `json:"seq"`
	ID         string          `json:"id"`
	Time       int64           `json:"time_us"`
	KeyID      string          `json:"key_id"`
	KeyName    string          `json:"key_name"`
	Op         string          `json:"op"`
	Result     string          `json:"result"`
	ReadOnly   bool            `json:"read_only"`
	Repo       string          `json:"repo"`
	Refs       []RefMove       `json:"refs"`
	Objects    int             `json:"objects"`
	Bytes      int64           `json:"bytes"`
	DurationUS int64           `json:"duration_us"`
	TraceID    string          `json:"trace_id"`
	Follows    string          `json:"follows"`
	Details    json.RawMessage `json:"details"`
	// IdemKey is omitted when empty, so entries written before it existed
	// hash as they did.
	IdemKey  string `json:"idempotency_key,omitempty"`
	PrevHash string `json:"prev_hash"`
}

// CanonicalDetails encodes an entry's details the way they are stored and
// hashed ("{}" when empty).
func CanonicalDetails(d map[string]any) json.RawMessage {
	if len(d) == 0 {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(d)
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

// TruncateTime is the precision of every stored timestamp.
func TruncateTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// EntryHash returns the hex SHA-256 of the entry's canonical encoding, which
// includes PrevHash: each entry commits to the whole chain before it.
// details is the stored (canonical) encoding of e.Details.
func EntryHash(e *OpEntry, details json.RawMessage) string {
	sum := sha256.Sum256(CanonicalEntry(e, details))
	return hex.EncodeToString(sum[:])
}

// CanonicalEntry returns the bytes EntryHash hashes: a JSON object whose
// first field is "seq", third "time_us" and last "prev_hash" (a store may
// splice those three into the rest itself, as Postgres's append does).
func CanonicalEntry(e *OpEntry, details json.RawMessage) []byte {
	refs := e.Refs
	if refs == nil {
		refs = []RefMove{}
	}
	c := canonicalEntry{
		Seq: e.Seq, ID: e.ID, Time: e.Time.UnixMicro(), KeyID: e.KeyID, KeyName: e.KeyName,
		Op: e.Op, Result: e.Result, ReadOnly: e.ReadOnly, Repo: e.Repo, Refs: refs,
		Objects: e.Objects, Bytes: e.Bytes, DurationUS: e.DurationUS, TraceID: e.TraceID,
		Follows: e.Follows, Details: details, IdemKey: e.IdempotencyKey, PrevHash: e.PrevHash,
	}
	b, _ := json.Marshal(c)
	return b
}

// OpFilter selects operations-log entries: entries after seq After, of one
// repository and/or one key, at most Limit of them, oldest first.
type OpFilter struct {
	Repo string
	// Repos, when not nil, keeps only the entries of these repositories
	// (a scoped key's scope); an empty non-nil list keeps none.
	Repos []string
	KeyID string
	Op    string
	After int64 // oldest first: entries after this seq; newest first: before it (0: from the end)
	Limit int
	// Newest lists newest first.
	Newest bool
}

// VerifyResult is the outcome of checking the whole chain.
type VerifyResult struct {
	OK       bool   `json:"ok"`
	Entries  int64  `json:"entries"`
	FirstBad *int64 `json:"first_bad"`
	Reason   string `json:"reason,omitempty"`
}
