package lockstep

import (
	"context"
	"time"
)

// Store is the metadata store: keys, the operations log, repositories and
// their refs. It is the source of truth for branch heads because its
// compare-and-swap is a conditional update inside a transaction that also
// appends the operations-log entry announcing it. Implementations: package
// sqlstore (SQLite and PostgreSQL), checked by one contract suite.
type Store interface {
	KeyStore
	OpStore
	RepoStore
	GateStore
	CheckpointStore
	IdempotencyStore
	EffectStore
	// Ping checks that the store answers (used by /readyz).
	Ping(ctx context.Context) error
	Close() error
}

// KeyStore keeps API keys.
type KeyStore interface {
	// CreateKey inserts k and appends entry in the same transaction.
	// Returns already_exists if the prefix is taken.
	CreateKey(ctx context.Context, k *Key, entry *OpEntry) error
	// KeyByPrefix returns not_found if no key has that prefix.
	KeyByPrefix(ctx context.Context, prefix string) (*Key, error)
	// ListKeys returns every key, revoked ones included, oldest first.
	ListKeys(ctx context.Context) ([]*Key, error)
	// RevokeKey marks a key revoked, and every key it minted
	// (transitively), and appends entry. Returns not_found for
	// an unknown id; revoking twice keeps the first time.
	RevokeKey(ctx context.Context, id string, at time.Time, entry *OpEntry) error
	// TouchKey records the key's last use.
	TouchKey(ctx context.Context, id string, at time.Time) error
	// CountKeys returns the number of keys that are not revoked.
	CountKeys(ctx context.Context) (int, error)
	// SetKeyQuota sets (nil: clears) a key's active-workspace quota and
	// appends entry. Returns not_found for an unknown key.
	SetKeyQuota(ctx context.Context, id string, q KeyQuota, entry *OpEntry) error
	// CountOwnedWorkspaces counts the active workspaces keyID owns.
	CountOwnedWorkspaces(ctx context.Context, keyID string) (int, error)
	// KeyStorageBytes sums the bytes that successful writes added to the
	// objects of the active workspaces keyID owns (the operations log's
	// bytes of their entries: packs and loose objects as written, objects
	// already stored not counted), the storage-bytes quota's measure.
	KeyStorageBytes(ctx context.Context, keyID string) (int64, error)
	// PurgeRepo deletes the refs and checkpoint records of a workspace
	// that is no longer active (invalid_argument if it is, not_found if
	// unknown) and appends entry with the deleted refs as moves to
	// ZeroOID; it returns the deleted refs. The repository row, its
	// attempts and the oplog stay.
	PurgeRepo(ctx context.Context, repoID int64, entry *OpEntry) ([]Ref, error)
}

// OpStore is the append-only, hash-chained operations log.
type OpStore interface {
	// AppendOp sets e.Seq, e.PrevHash and e.Hash and stores it. Concurrent
	// appends form one linear chain.
	AppendOp(ctx context.Context, e *OpEntry) error
	// ListOps returns entries matching f, oldest first (newest first with
	// f.Newest).
	ListOps(ctx context.Context, f OpFilter) ([]*OpEntry, error)
	// VerifyOps recomputes every hash from the stored fields and checks the
	// links; FirstBad names the first entry that does not match.
	VerifyOps(ctx context.Context) (VerifyResult, error)
}

// RefUpdate is one compare-and-swap of a ref. Old == ZeroOID means the ref
// must not exist; New == ZeroOID deletes it.
type RefUpdate struct {
	RepoID int64
	Repo   string
	Name   string
	Old    string
	New    string
	// ObjectsSince, when set, is when the write began checking that the
	// objects New names exist (its request's start): the update is
	// refused (unavailable, retry) when an object GC of the repository's
	// network committed after it, since the GC may have dropped an
	// object the write found (docs/replicas.md, "Object GC").
	ObjectsSince time.Time
}

// TaskCount is one task label of a base with its workspaces by status.
type TaskCount struct {
	Task     string         `json:"task"`
	Total    int            `json:"total"`
	ByStatus map[string]int `json:"by_status"`
}

// RepoFilter selects repositories for listing.
type RepoFilter struct {
	ForkOf  string // only forks of this repository
	Network string // only repositories of this fork network
	Task    string // only workspaces with this task label
	Status  Status // only repositories with this status
	After   string // only names after this one (paging)
	Limit   int    // at most this many (0: all)
}

// RepoStore keeps repositories, their refs and their attempts.
type RepoStore interface {
	// CreateRepo inserts r with its initial refs and appends entry, in one
	// transaction. Returns already_exists if the name is taken.
	CreateRepo(ctx context.Context, r *Repo, refs []Ref, entry *OpEntry) error
	// ForkRepo creates ws as a fork of the repository named base, in one
	// transaction: ws takes base's network, default branch and name
	// (ForkOf), its base commit is the tip of base's default branch (""
	// when it has none), and it starts with copies of base's branch refs
	// (refs/heads/*), copied inside the store, never read out first.
	// fill is called with ws filled in and the copied refs ordered by
	// name, to complete entry before it is appended; it may be called
	// more than once (PostgreSQL first fills from a prediction of the
	// base that the transaction then checks, and fills again from the
	// base as read if the check fails): the last call describes what
	// committed. Returns not_found (as RepoByName) for an unknown base,
	// already_exists if ws's name is taken; either way nothing is created.
	// maxOwned > 0 bounds the active workspaces ws's owner may own: the
	// count, the new one included, is taken inside the transaction after
	// every concurrent fork's (on any replica), so racing forks cannot pass
	// it together; over it: rate_limited, nothing created.
	ForkRepo(ctx context.Context, base string, ws *Repo, maxOwned int, entry *OpEntry, fill func(copied []Ref)) error
	// RepoByName returns not_found for an unknown name.
	RepoByName(ctx context.Context, name string) (*Repo, error)
	// ListRepos returns repositories ordered by name.
	ListRepos(ctx context.Context, f RepoFilter) ([]*Repo, error)
	// Tasks lists the distinct task labels of a base's workspaces after
	// the label after, by name, at most limit, with counts by status.
	Tasks(ctx context.Context, forkOf, after string, limit int) ([]TaskCount, error)
	// SetRepoStatus moves a repository from change.From to change.To and
	// appends change.Entry, as a compare-and-swap on the status: when the
	// repository is no longer in change.From (its status changed since it
	// was read) nothing changes and the error is StatusConflict
	// (ref_conflict, details expected/actual); not_found for an unknown
	// repository. The table of allowed changes (StatusTransitions) is the
	// caller's rule; the store keeps the swap atomic.
	SetRepoStatus(ctx context.Context, change StatusChange) error
	// Refs lists a repository's refs ordered by name.
	Refs(ctx context.Context, repoID int64) ([]Ref, error)
	// AllRefs lists every ref of every repository (used to re-sync the
	// on-disk mirror at start-up), keyed by repository name.
	AllRefs(ctx context.Context) (map[string][]Ref, error)
	// Ref returns not_found when the ref does not exist.
	Ref(ctx context.Context, repoID int64, name string) (Ref, error)
	// UpdateRefs applies every update atomically, records attempts,
	// enqueues hook deliveries for events and appends entry, in one
	// transaction. If any Old does not match, nothing changes and the error
	// is ref_conflict with details expected/actual. A repository that is
	// not active (a promoted, failed or abandoned workspace) never moves
	// again: checked inside the transaction (so a status change that
	// commits first wins), the error is invalid_argument.
	UpdateRefs(ctx context.Context, updates []RefUpdate, attempts []AttemptRecord, events []HookEvent, entry *OpEntry) error
	// UpdateRefsAndStatus is UpdateRefs plus, in the same transaction, a
	// workspace's status change with its own entry (appended after entry):
	// a promote moves the base branch and marks the workspace promoted
	// together or not at all. The change is a compare-and-swap on the
	// status: when the workspace is no longer in change.From nothing
	// changes and the error is invalid_argument.
	UpdateRefsAndStatus(ctx context.Context, updates []RefUpdate, attempts []AttemptRecord, events []HookEvent, entry *OpEntry, change StatusChange) error
	// Attempts lists a workspace's attempts, newest first.
	Attempts(ctx context.Context, repoID int64, limit int) ([]Attempt, error)
}

// StatusChange moves a repository from status From to status To.
type StatusChange struct {
	RepoID int64
	Repo   string
	From   Status
	To     Status
	Entry  *OpEntry
	// Effects, on a promote, releases the workspace's staged effects in
	// the same transaction (nil: they stay as they are).
	Effects *EffectRelease
	// ExpectRef, when set, is a ref of the repository that must still be
	// at ExpectOID in the transaction (ref_conflict otherwise): a promote
	// lands the workspace tip it read, and a write to the workspace
	// committed since then refuses the landing instead of being left out
	// of it.
	ExpectRef, ExpectOID string
}

// AttemptRecord is an attempt to record with a ref update.
type AttemptRecord struct {
	RepoID int64
	Attempt
}
