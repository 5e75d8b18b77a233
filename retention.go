package lockstep

import (
	"context"
	"time"
)

// RetentionPolicy is a base repository's retention of its workspaces
// (issue 28 item 2); zero durations are off (the default).
type RetentionPolicy struct {
	// AbandonAfter: an active workspace whose refs have not moved for
	// this long is abandoned by the retention sweeper.
	AbandonAfter time.Duration
	// DeleteAfter: an abandoned or failed workspace is purged (as by
	// DELETE /repos/{ws}?purge=true) this long after its status changed.
	DeleteAfter time.Duration
	// ArchiveFailed: before a failed workspace is purged, its attempts'
	// commits are kept on refs/archive/<workspace>/<n> in the base
	// repository, so the object GC keeps them.
	ArchiveFailed bool
	UpdatedAt     time.Time
}

// RepoRetention is one base repository's policy.
type RepoRetention struct {
	RepoID int64
	Repo   string
	Policy RetentionPolicy
}

// RetentionStore keeps the retention policies (an optional part of a
// Store, as GCStore is).
type RetentionStore interface {
	// SetRetention sets repoID's policy and appends entry in one
	// transaction (a zero policy removes it).
	SetRetention(ctx context.Context, repoID int64, p RetentionPolicy, entry *OpEntry) error
	// Retention returns repoID's policy (the zero policy when none).
	Retention(ctx context.Context, repoID int64) (RetentionPolicy, error)
	// RetentionPolicies lists every policy that is not off, by repository.
	RetentionPolicies(ctx context.Context) ([]RepoRetention, error)
}
