package lockstep

import (
	"context"
	"time"
)

// Policy is the gate of one branch of a base repository: what must hold
// before a workspace may be promoted into it.
type Policy struct {
	Branch            string   `json:"branch"`
	RequiredChecks    []string `json:"required_checks"`
	MaxChangedFiles   int      `json:"max_changed_files"`
	MaxChangedLines   int      `json:"max_changed_lines"`
	ProtectedPaths    []string `json:"protected_paths"`
	RequireCleanMerge *bool    `json:"require_clean_merge,omitempty"`
	PromoteMode       string   `json:"promote_mode"`
	// HoldEffectClasses are effect classes a promote does not release
	// until a reviewer approves each effect.
	HoldEffectClasses []string `json:"hold_effect_classes,omitempty"`
}

// CleanMergeRequired applies the default (true).
func (p Policy) CleanMergeRequired() bool { return p.RequireCleanMerge == nil || *p.RequireCleanMerge }

// Check statuses.
const (
	CheckPending = "pending"
	CheckSuccess = "success"
	CheckFailure = "failure"
	CheckError   = "error"
)

// Check is one result for one commit and one name. A newer result for the
// same commit and name supersedes the older; all are kept.
type Check struct {
	ID         int64     `json:"id"`
	Commit     string    `json:"commit"`
	Name       string    `json:"name"`
	Status     string    `json:"status"`
	Summary    string    `json:"summary"`
	DetailsURL string    `json:"details_url"`
	KeyName    string    `json:"key"`
	CreatedAt  time.Time `json:"created_at"`
}

// Hook is a gate hook: a signed webhook to CI on workspace events.
type Hook struct {
	ID        string    `json:"id"`
	Repo      string    `json:"repo"`
	RepoID    int64     `json:"-"`
	URL       string    `json:"url"`
	Secret    string    `json:"-"`
	Events    []string  `json:"events"`
	Active    bool      `json:"active"`
	CreatedAt time.Time `json:"created_at"`
	// PrevSecret still signs deliveries (a second signature) until
	// PrevSecretUntil, after a rotation with an overlap.
	PrevSecret      string     `json:"-"`
	PrevSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
}

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// Delivery is one event to send to one hook (the outbox row).
type Delivery struct {
	ID            string            `json:"id"`
	HookID        string            `json:"hook_id"`
	Event         string            `json:"event"`
	Payload       string            `json:"payload"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	History       []DeliveryAttempt `json:"history"`
}

// DeliveryAttempt is one try of a delivery.
type DeliveryAttempt struct {
	Attempt     int        `json:"attempt"`
	StatusCode  int        `json:"status_code"`
	DurationMS  float64    `json:"duration_ms"`
	Error       string     `json:"error,omitempty"`
	NextRetryAt *time.Time `json:"next_retry_at,omitempty"`
	At          time.Time  `json:"at"`
}

// HookEvent is an event to enqueue for the hooks of the named repositories,
// in the same transaction as the change it announces.
type HookEvent struct {
	Repos   []string
	Event   string
	Payload map[string]any
}

// GateStore keeps policies, checks, hooks and the delivery outbox.
type GateStore interface {
	// SetPolicy stores a branch's policy and appends entry.
	SetPolicy(ctx context.Context, repoID int64, p Policy, entry *OpEntry) error
	// Policy returns not_found when the branch has none.
	Policy(ctx context.Context, repoID int64, branch string) (Policy, error)
	// AddCheck stores a check result (and appends entry).
	AddCheck(ctx context.Context, network string, c *Check, entry *OpEntry) error
	// Checks lists every result for a commit, oldest first.
	Checks(ctx context.Context, network, commit string) ([]Check, error)
	// CreateHook stores a hook and appends entry.
	CreateHook(ctx context.Context, h *Hook, entry *OpEntry) error
	// Hooks lists a repository's hooks; Hook returns not_found.
	Hooks(ctx context.Context, repoID int64) ([]Hook, error)
	Hook(ctx context.Context, id string) (*Hook, error)
	// RotateHookSecret replaces a hook's secret; prev keeps signing until
	// prevUntil (prev "" ends any overlap). Returns not_found.
	RotateHookSecret(ctx context.Context, id, secret, prev string, prevUntil time.Time, entry *OpEntry) error
	// DeactivateHook stops deliveries to a hook (kept for its history).
	DeactivateHook(ctx context.Context, id string, entry *OpEntry) error
	// EnqueueEvents writes deliveries for matching hooks in their own
	// transaction (events that move no ref).
	EnqueueEvents(ctx context.Context, events []HookEvent) error
	// ClaimDeliveries leases up to n due deliveries to one worker until
	// lease ends; a delivery is never held by two workers at once.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, n int) ([]Delivery, error)
	// RecordAttempt stores an attempt and the delivery's new state.
	RecordAttempt(ctx context.Context, deliveryID string, a DeliveryAttempt, status string, next time.Time) error
	// Deliveries lists a hook's deliveries (newest first) with history.
	Deliveries(ctx context.Context, hookID string, limit int) ([]Delivery, error)
}
