package api

// GCRequest is the body of POST /api/v1/gc (object GC, admin only).
type GCRequest struct {
	// Repo limits the run to this repository's network ("" = every
	// network).
	Repo string `json:"repo,omitempty"`
	// Prune is the retention of unreachable objects: "now", or a Go
	// duration ("336h"); "" = the server's --object-retention.
	Prune string `json:"prune,omitempty"`
	// DryRun reports what would be dropped and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// GCResult says what an object GC dropped (or would drop).
type GCResult struct {
	DryRun    bool   `json:"dry_run"`
	Retention string `json:"retention"`
	Networks  int    `json:"networks"`
	// Objects counts unreachable objects dropped; Packs the packs
	// replaced (their live objects moved to a new pack); Loose the loose
	// object files removed; Bytes the bytes freed.
	Objects int   `json:"objects"`
	Packs   int   `json:"packs"`
	Loose   int   `json:"loose"`
	Bytes   int64 `json:"bytes"`
	// BucketPacks counts packs deleted from the object store (retired
	// longer than --object-grace ago).
	BucketPacks int `json:"bucket_packs_deleted"`
	// Busy lists networks whose refs kept moving during the run: left
	// for the next run.
	Busy []string `json:"busy,omitempty"`
	// Skipped is true when another replica was running a GC.
	Skipped bool `json:"skipped,omitempty"`
}
