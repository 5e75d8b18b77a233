package lockstep

import (
	"context"
	"time"
)

// Effect statuses. An effect is staged on an active workspace; a promote
// moves every staged effect to releasing (or held, for a class the gate
// holds) in the transaction that moves the base branch; the outbox worker
// delivers it (released) or gives up (failed). A checkpoint restore, a
// failed run or a workspace marked failed or abandoned discards it; a
// reviewer's reject discards a held one.
const (
	EffectStaged    = "staged"
	EffectHeld      = "held"
	EffectReleasing = "releasing"
	EffectReleased  = "released"
	EffectFailed    = "failed"
	EffectDiscarded = "discarded"
)

// Compensation statuses of a released effect.
const (
	CompensationPending = "pending"
	CompensationDone    = "compensated"
	CompensationFailed  = "failed"
)

// Outbox row kinds.
const (
	EffectKindRequest      = "effect"
	EffectKindCompensation = "compensation"
)

// EffectHTTP is an HTTP request an effect sends (the effect itself, or
// its compensation). Headers hold clear values in memory; the store seals
// those named in Secret.
type EffectHTTP struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	// Secret names the headers (canonical form) whose values are sealed at
	// rest and redacted when shown.
	Secret []string `json:"secret,omitempty"`
	Body   []byte   `json:"-"`
}

// Effect is an outward effect staged on a workspace (see the statuses).
type Effect struct {
	ID                 string
	Seq                int64 // the operations-log seq of its staging entry: a total order with checkpoints
	RepoID             int64
	Repo               string
	Status             string
	Request            EffectHTTP
	Compensation       *EffectHTTP
	CompensationStatus string
	Label              string
	Class              string
	RunID              string
	Consuming          bool
	DiscardReason      string
	ReleasedInto       string
	ReleasedCommit     string
	Attempts           int
	LastStatusCode     int
	LastError          string
	KeyName            string
	CreatedAt          time.Time
	UpdatedAt          time.Time
	History            []EffectAttempt
}

// EffectAttempt is one try of an effect's delivery (Kind effect) or of
// its compensation.
type EffectAttempt struct {
	Kind       string
	Attempt    int
	StatusCode int
	DurationMS float64
	Error      string
	At         time.Time
}

// EffectDelivery is a claimed outbox row: the effect (with its secrets
// opened) and which of its requests to send.
type EffectDelivery struct {
	ID       string
	Kind     string
	Attempts int
	Effect   Effect
}

// EffectFilter selects pending (staged or held) effects of one workspace
// to discard: staged after AfterSeq, or after the checkpoint whose entry
// is AfterOp, and of RunID when set.
type EffectFilter struct {
	RepoID   int64
	AfterSeq int64
	AfterOp  string
	RunID    string
	Reason   string
}

// MaxCompensableCommits bounds the commits one CompensableEffects call
// filters on (one placeholder each, far below SQLite's and Postgres's
// limits).
const MaxCompensableCommits = 1000

// EffectRelease is what a promote's status change does to the
// workspace's staged effects: every one goes to the outbox (releasing),
// except classes in Hold, which wait for a reviewer (held). Into is the
// base repository; the commit is the base branch's new tip.
type EffectRelease struct {
	Into   string
	IntoID int64
	Hold   []string
	// IntoWorkspace: Into is a workspace (a promote of a fork of a fork).
	// Effects are released only into a base, through its gate: the store
	// refuses the landing (invalid_argument, nothing moves) while the
	// promoted workspace has staged effects.
	IntoWorkspace bool
}

// EffectStore keeps staged effects and their delivery outbox.
type EffectStore interface {
	// StageEffect inserts e as staged and appends entry in one
	// transaction; e.Seq becomes the entry's seq. Errors: invalid_argument
	// when the repository is not active; too_large when it already has max
	// pending (staged or held) effects (max 0: no cap).
	StageEffect(ctx context.Context, e *Effect, max int, entry *OpEntry) error
	// Effect returns one effect with its attempts; not_found.
	Effect(ctx context.Context, id string) (*Effect, error)
	// Effects lists a repository's effects with seq > after, by seq, at
	// most limit, without attempts.
	Effects(ctx context.Context, repoID, after int64, limit int) ([]Effect, error)
	// DiscardEffects discards the staged and held effects f selects and,
	// when any, appends entry (details gain their ids), in one transaction.
	// Returns the ids, oldest first. not_found for an unknown f.AfterOp.
	DiscardEffects(ctx context.Context, f EffectFilter, entry *OpEntry) ([]string, error)
	// DecideEffect approves (held → releasing, in the outbox) or rejects
	// (held → discarded) an effect and appends entry. invalid_argument
	// when it is not held; not_found.
	DecideEffect(ctx context.Context, id string, approve bool, entry *OpEntry) (*Effect, error)
	// QueueCompensations puts the compensations of ids (released effects
	// with a compensation never queued) in the outbox in the order given
	// and appends entry; the others are skipped. Returns those queued.
	QueueCompensations(ctx context.Context, ids []string, entry *OpEntry) ([]string, error)
	// EffectsReleasedBy lists the effects released into base by commit,
	// by seq.
	EffectsReleasedBy(ctx context.Context, baseID int64, commit string) ([]Effect, error)
	// CompensableEffects lists, by seq, the effects released into base
	// and delivered (status released) whose compensation was never
	// queued: what a rollback may offer. When commits is not nil only
	// those released by one of them (an empty list: none, no query; at
	// most MaxCompensableCommits). At most limit (0: all). One query.
	CompensableEffects(ctx context.Context, baseID int64, commits []string, limit int) ([]Effect, error)
	// ClaimEffectDeliveries leases up to n due outbox rows until lease
	// ends. A row is due only when no earlier row of its lane (the
	// workspace's effects in seq order; its compensations newest first) is
	// still held or pending, and it is never held by two workers at once.
	ClaimEffectDeliveries(ctx context.Context, now time.Time, lease time.Duration, n int) ([]EffectDelivery, error)
	// RecordEffectAttempt stores an attempt of a claimed row and its new
	// status (pending with next, succeeded, failed), and the effect's.
	RecordEffectAttempt(ctx context.Context, d EffectDelivery, a EffectAttempt, status string, next time.Time) error
}

type txDiscardKey struct{}

// WithEffectDiscard returns ctx carrying a discard that the metadata
// store applies inside the transaction moving f.RepoID's refs (a
// checkpoint restore's code part), so the effects staged after the
// checkpoint are gone exactly when the code is restored. entry is
// appended after the ref move's.
func WithEffectDiscard(ctx context.Context, f EffectFilter, entry *OpEntry) context.Context {
	return context.WithValue(ctx, txDiscardKey{}, &TxDiscard{Filter: f, Entry: entry})
}

// TxDiscard is a discard riding in a request's context.
type TxDiscard struct {
	Filter EffectFilter
	Entry  *OpEntry
	// Discarded is filled by the store with the ids it discarded.
	Discarded []string
}

// EffectDiscardFrom returns the discard carried by ctx, or nil.
func EffectDiscardFrom(ctx context.Context) *TxDiscard {
	d, _ := ctx.Value(txDiscardKey{}).(*TxDiscard)
	return d
}

// CompensationOffer is a released effect whose promoted commit a rollback
// of the base undid: its compensation can be run (POST
// /repos/{base}/effects/compensate). Running it is a new event, not an
// erasure of the first.
type CompensationOffer struct {
	Effect       string `json:"effect"`
	Workspace    string `json:"workspace"`
	Commit       string `json:"commit"`
	Request      string `json:"request"`
	Compensation string `json:"compensation"`
	Label        string `json:"label,omitempty"`
	Consuming    bool   `json:"consuming"`
}
