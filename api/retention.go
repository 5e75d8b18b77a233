package api

import "time"

// Retention is a base repository's retention policy (GET and PUT
// /api/v1/repos/{repo}/retention, admin only). Ages are "0" (off, the
// default), whole days ("7d") or a Go duration ("36h").
type Retention struct {
	// AbandonAfter: active workspaces whose refs have not moved for this
	// long are abandoned by the retention sweeper.
	AbandonAfter string `json:"abandon_after"`
	// DeleteAfter: abandoned and failed workspaces are purged this long
	// after their status changed.
	DeleteAfter string `json:"delete_after"`
	// ArchiveFailed keeps a failed workspace's attempts on
	// refs/archive/<workspace>/<n> in the base before it is purged.
	ArchiveFailed bool `json:"archive_failed"`
	// UpdatedAt is when the policy was set (absent when none is).
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}
