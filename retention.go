package lockstep

import (
	"context"
	"strconv"
	"strings"
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

// ParseAge reads a retention age: "0" or "" (off), whole days ("7d") or
// a Go duration of whole seconds ("36h").
func ParseAge(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" {
		return 0, nil
	}
	var d time.Duration
	var err error
	if n, ok := strings.CutSuffix(v, "d"); ok {
		var days int64
		days, err = strconv.ParseInt(n, 10, 32)
		d = time.Duration(days) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < 0 || d%time.Second != 0 {
		return 0, Errorf(EINVALID, "age %q: want 0 (off), days such as 7d or a duration of whole seconds such as 36h", v)
	}
	return d, nil
}

// FormatAge writes an age as ParseAge reads it: "0", "7d" or "36h0m0s".
func FormatAge(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}
