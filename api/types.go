package api

import "time"

// This file holds the wire types, grouped by route in the order of
// web/routes.go. Field order is the server's encoding order, so that
// encoding one of these gives the bytes the server sends (list envelopes
// and other small answers have their keys in alphabetical order, as the
// server writes them from maps). The client's tests check this for every
// answer they read (sameWire).

// ZeroOID is the oid meaning "no commit": as an expect_oid, "the branch
// must not exist yet".
const ZeroOID = "0000000000000000000000000000000000000000"

// ErrorEnvelope is the body of every error answer (4xx and 5xx).
type ErrorEnvelope struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the error itself: a code of the contract (invalid_argument,
// not_found, ref_conflict, …), a message safe to show, and details that
// depend on the code (a ref_conflict's current oid, a gate_failed's
// reasons).
type ErrorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// ---- health: GET /healthz, GET /readyz

// Health is the answer of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// Readiness is the answer of GET /readyz (503 when Ready is false).
// Checks maps a dependency ("store", "redis", "ref_mirror") to "ok" or
// what is wrong with it.
type Readiness struct {
	Checks map[string]any `json:"checks"`
	Ready  bool           `json:"ready"`
}

// ---- keys: POST/GET /api/v1/keys, DELETE /api/v1/keys/{id}, GET /api/v1/whoami

// KeyCreateRequest is the body of POST /keys.
type KeyCreateRequest struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// TTL is a Go duration ("1h"); empty: the key never expires.
	TTL   string    `json:"ttl,omitempty"`
	Scope *KeyScope `json:"scope,omitempty"`
}

// KeyScope limits a key to one workspace, or to one task's workspaces
// of a base repository.
type KeyScope struct {
	Workspace string `json:"workspace,omitempty"`
	Base      string `json:"base,omitempty"`
	Task      string `json:"task,omitempty"`
}

// KeyQuotaRequest is the body of PUT /keys/{id}/quota: it replaces the
// key's three overrides (each null or absent restores the server's
// setting, 0 is unlimited).
type KeyQuotaRequest struct {
	Workspaces   *int   `json:"workspaces"`
	StorageBytes *int64 `json:"storage_bytes"`
	Runs         *int   `json:"runs"`
}

// CreatedKey is the answer of POST /keys: the new key with its secret,
// shown this once (a replayed answer has no secret).
type CreatedKey struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	Prefix string `json:"prefix"`
	Secret string `json:"secret"`
}

// Key is an API key as listed (never its secret); also the answer of
// GET /whoami.
type Key struct {
	ID                string     `json:"id"`
	Name              string     `json:"name"`
	Role              string     `json:"role"`
	Prefix            string     `json:"prefix"`
	CreatedAt         time.Time  `json:"created_at"`
	RevokedAt         *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt        *time.Time `json:"last_used_at,omitempty"`
	ExpiresAt         *time.Time `json:"expires_at,omitempty"`
	ParentKeyID       string     `json:"parent_key_id,omitempty"`
	Scope             *KeyScope  `json:"scope,omitempty"`
	QuotaWorkspaces   *int       `json:"quota_workspaces,omitempty"`
	QuotaStorageBytes *int64     `json:"quota_storage_bytes,omitempty"`
	QuotaRuns         *int       `json:"quota_runs,omitempty"`
	// Limits and usage (GET /whoami only).
	Limits *KeyLimits `json:"limits,omitempty"`
}

// KeyLimits are a key's quotas and its usage of them (0: unlimited).
type KeyLimits struct {
	Workspaces       int `json:"workspaces"`
	WorkspacesActive int `json:"workspaces_active"`
	// WorkspacesSource, StorageBytesSource and RunsSource say where each
	// limit comes from: "key" (the key's own override, PUT
	// /keys/{id}/quota), "server" (the server-wide setting) or "admin"
	// (an admin key is not bound).
	WorkspacesSource   string  `json:"workspaces_source,omitempty"`
	StorageBytesSource string  `json:"storage_bytes_source,omitempty"`
	RunsSource         string  `json:"runs_source,omitempty"`
	RateLimitRPS       float64 `json:"rate_limit_rps"`
	// Uploads is how many uploads the key may have in progress at once
	// (--quota-uploads; 0: unlimited), UploadsActive how many it has on
	// the replica that answered.
	Uploads       int `json:"uploads"`
	UploadsActive int `json:"uploads_active"`
	// StorageBytes is how many bytes the key's active workspaces may add
	// to the object store (--quota-storage-bytes; 0: unlimited),
	// StorageBytesUsed how many their successful writes added (the
	// operations log's bytes: packs and loose objects as written).
	StorageBytes     int64 `json:"storage_bytes"`
	StorageBytesUsed int64 `json:"storage_bytes_used"`
	// Runs is how many run jobs the key may have queued or running at
	// once (--quota-runs; 0: unlimited), RunsActive how many it has
	// (-1 when run jobs are not configured on the server).
	Runs       int `json:"runs"`
	RunsActive int `json:"runs_active"`
}

// KeyList is the answer of GET /keys.
type KeyList struct {
	Keys []*Key `json:"keys"`
}

// ---- operations log: GET /api/v1/oplog, GET /api/v1/oplog/verify

// RefMove is one ref moved by an operation; Old or New is ZeroOID for a
// creation or a deletion.
type RefMove struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// OpEntry is one entry of the operations log.
type OpEntry struct {
	Seq            int64          `json:"seq"`
	ID             string         `json:"id"`
	Time           time.Time      `json:"time"`
	KeyID          string         `json:"key_id"`
	KeyName        string         `json:"key_name"`
	Op             string         `json:"op"`
	Result         string         `json:"result"`
	ReadOnly       bool           `json:"read_only"`
	Repo           string         `json:"repo,omitempty"`
	Refs           []RefMove      `json:"refs,omitempty"`
	Objects        int            `json:"objects"`
	Bytes          int64          `json:"bytes"`
	DurationUS     int64          `json:"duration_us"`
	TraceID        string         `json:"trace_id,omitempty"`
	Follows        string         `json:"follows,omitempty"`
	Details        map[string]any `json:"details,omitempty"`
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	Replays        int            `json:"replays,omitempty"`
	PrevHash       string         `json:"prev_hash"`
	Hash           string         `json:"hash"`
}

// OplogQuery selects entries of GET /oplog (query parameters repo, key,
// op, after, limit, order).
type OplogQuery struct {
	Repo   string
	KeyID  string
	Op     string
	After  int64 // oldest first: entries after this seq; newest first: before it
	Limit  int   // 1-1000 (server default 100)
	Newest bool  // order=desc
}

// OplogPage is the answer of GET /oplog; NextAfter is 0 on the last page.
type OplogPage struct {
	Entries   []*OpEntry `json:"entries"`
	NextAfter int64      `json:"next_after"`
}

// VerifyResult is the answer of GET /oplog/verify.
type VerifyResult struct {
	OK       bool   `json:"ok"`
	Entries  int64  `json:"entries"`
	FirstBad *int64 `json:"first_bad"`
	Reason   string `json:"reason,omitempty"`
}

// ---- repositories and workspaces

// RepoCreateRequest is the body of POST /repos.
type RepoCreateRequest struct {
	Name          string `json:"name"`
	DefaultBranch string `json:"default_branch"`
}

// Repo is a repository (a base or a workspace) as listed by GET /repos and
// answered by DELETE /repos/{repo} and POST /repos/{repo}/status.
type Repo struct {
	Name          string    `json:"name"`
	Network       string    `json:"network"`
	ForkOf        string    `json:"fork_of,omitempty"`
	DefaultBranch string    `json:"default_branch"`
	Status        string    `json:"status"`
	OwnerKeyID    string    `json:"owner_key_id,omitempty"`
	Owner         string    `json:"owner,omitempty"`
	BaseCommit    string    `json:"base_commit,omitempty"`
	Task          string    `json:"task,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// RepoInfo is a repository with its default branch's tip ("" before the
// first push): the answer of GET /repos/{repo} and POST /repos.
type RepoInfo struct {
	Repo
	Head string `json:"head"`
}

// RepoList is the answer of GET /repos.
type RepoList struct {
	Repos []*Repo `json:"repos"`
}

// RepoQuery filters GET /repos (query parameters fork_of, network).
type RepoQuery struct {
	ForkOf  string
	Network string
}

// StatusRequest is the body of POST /repos/{repo}/status.
type StatusRequest struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// ForkRequest is the body of POST /repos/{repo}/forks.
type ForkRequest struct {
	Name string `json:"name"`
	Task string `json:"task"`
}

// ForkResult is the answer of POST /repos/{repo}/forks.
type ForkResult struct {
	Name       string  `json:"name"`
	ForkOf     string  `json:"fork_of"`
	Network    string  `json:"network"`
	BaseCommit string  `json:"base_commit"`
	Owner      string  `json:"owner"`
	Task       string  `json:"task,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// Workspace is one workspace of GET /repos/{repo}/workspaces.
type Workspace struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Status     string `json:"status"`
	Task       string `json:"task,omitempty"`
	Tip        string `json:"tip"`
	BaseCommit string `json:"base_commit"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
	CreatedAt  string `json:"created_at"`
	UpdatedAt  string `json:"updated_at"`
}

// WorkspaceQuery selects a page of GET /repos/{repo}/workspaces.
type WorkspaceQuery struct {
	Task, Status, After string
	Limit               int
}

// WorkspacePage is the answer of GET /repos/{repo}/workspaces; NextAfter
// is "" on the last page.
type WorkspacePage struct {
	NextAfter  string      `json:"next_after"`
	Workspaces []Workspace `json:"workspaces"`
}

// Attempt is a commit pushed to a workspace.
type Attempt struct {
	Seq       int64     `json:"seq"`
	Number    int64     `json:"number"`
	Commit    string    `json:"commit"`
	Tree      string    `json:"tree"`
	Branch    string    `json:"branch"`
	Op        string    `json:"op"`
	KeyName   string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}

// AttemptList is the answer of GET /repos/{repo}/attempts.
type AttemptList struct {
	Attempts []Attempt `json:"attempts"`
}

// Ref is a ref with its oid.
type Ref struct {
	Name      string    `json:"name"`
	OID       string    `json:"oid"`
	UpdatedAt time.Time `json:"updated_at"`
}

// RefList is the answer of GET /repos/{repo}/refs.
type RefList struct {
	Refs []Ref `json:"refs"`
}

// ---- writes: worktree, edits, objects, rollback

// PushResult is the answer of a push (PUT /worktree), an edit batch and a
// rollback.
type PushResult struct {
	Commit         string  `json:"commit"`
	Tree           string  `json:"tree"`
	Parent         string  `json:"parent,omitempty"`
	Branch         string  `json:"branch"`
	Changed        bool    `json:"changed"`
	ObjectsWritten int     `json:"objects_written"`
	BytesWritten   int64   `json:"bytes_written"`
	DurationMS     float64 `json:"duration_ms"`
	// Compensations: on a rollback of a base, the released effects of the
	// undone promoted commits with a compensation to run, newest first.
	Compensations []CompensationOffer `json:"compensations,omitempty"`
}

// CompensationOffer is one effect a rollback offers to compensate.
type CompensationOffer struct {
	Effect       string `json:"effect"`
	Workspace    string `json:"workspace"`
	Commit       string `json:"commit"`
	Request      string `json:"request"`
	Compensation string `json:"compensation"`
	Label        string `json:"label,omitempty"`
	Consuming    bool   `json:"consuming"`
}

// MissingRequest is the body of POST /repos/{repo}/objects/missing.
type MissingRequest struct {
	OIDs []string `json:"oids"`
}

// MissingResult is its answer: the oids the fork network lacks.
type MissingResult struct {
	Missing []string `json:"missing"`
}

// UploadStats is the answer of POST /repos/{repo}/objects.
type UploadStats struct {
	BytesWritten   int64 `json:"bytes_written"`
	ObjectsWritten int   `json:"objects_written"`
}

// Edit is one file change of POST /repos/{repo}/edits: Op "write"
// (Content, or ContentBase64 for bytes) or "delete" (a file or a whole
// directory).
type Edit struct {
	Op            string  `json:"op"`
	Path          string  `json:"path"`
	Content       *string `json:"content,omitempty"`
	ContentBase64 *string `json:"content_base64,omitempty"`
	Executable    bool    `json:"executable,omitempty"`
}

// EditRequest is the body of POST /repos/{repo}/edits.
type EditRequest struct {
	Edits     []Edit `json:"edits"`
	Branch    string `json:"branch"`
	ExpectOID string `json:"expect_oid"`
	Force     bool   `json:"force"`
	Message   string `json:"message"`
	Author    string `json:"author"`
	From      string `json:"from"`
}

// RollbackRequest is the body of POST /repos/{repo}/rollback.
type RollbackRequest struct {
	Branch    string `json:"branch"`
	To        string `json:"to"`
	ExpectOID string `json:"expect_oid"`
	Message   string `json:"message"`
	Force     bool   `json:"force"`
}

// ---- reads: commits, tree, blob, archive, compare

// Signature is a commit's author or committer (time in RFC 3339, UTC).
type Signature struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	Time  string `json:"time"`
}

// Commit is one commit (GET /commits/{rev}, an entry of GET /commits).
type Commit struct {
	Commit    string    `json:"commit"`
	Tree      string    `json:"tree"`
	Parents   []string  `json:"parents"`
	Message   string    `json:"message"`
	Author    Signature `json:"author"`
	Committer Signature `json:"committer"`
	Time      string    `json:"time"`
}

// CommitPage is the answer of GET /repos/{repo}/commits; NextAfter is ""
// on the last page.
type CommitPage struct {
	Commits   []Commit `json:"commits"`
	NextAfter string   `json:"next_after"`
}

// TreeEntry is one entry of GET /repos/{repo}/tree/{rev}.
type TreeEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Mode string `json:"mode"`
	Type string `json:"type"`
	Size int64  `json:"size"`
	Hash string `json:"hash"`
}

// TreeList is the answer of GET /repos/{repo}/tree/{rev}.
type TreeList struct {
	Entries []TreeEntry `json:"entries"`
}

// BlobInfo is what the headers of GET /repos/{repo}/blob/{rev}/{path} say
// about the blob (X-Lockstep-Blob, X-Lockstep-Mode, Content-Length).
type BlobInfo struct {
	Hash string
	Mode string
	Size int64
}

// FileChange is one changed file of a compare.
type FileChange struct {
	Path           string `json:"path"`
	Status         string `json:"status"`
	OldMode        string `json:"old_mode,omitempty"`
	NewMode        string `json:"new_mode,omitempty"`
	Added          int    `json:"added"`
	Removed        int    `json:"removed"`
	Binary         bool   `json:"binary"`
	Patch          string `json:"patch,omitempty"`
	PatchTruncated bool   `json:"patch_truncated,omitempty"`
	OldHash        string `json:"old_hash,omitempty"`
	NewHash        string `json:"new_hash,omitempty"`
}

// CompareResult is the answer of GET /repos/{repo}/compare.
type CompareResult struct {
	Base    string       `json:"base"`
	Head    string       `json:"head"`
	Files   []FileChange `json:"files"`
	Added   int          `json:"added"`
	Removed int          `json:"removed"`
}

// ---- merges and sync

// MergeRequest is the body of POST /repos/{repo}/merges.
type MergeRequest struct {
	Ours        string `json:"ours"`
	Theirs      string `json:"theirs"`
	Preflight   bool   `json:"preflight,omitempty"`
	Deep        bool   `json:"deep,omitempty"`
	Materialize bool   `json:"materialize,omitempty"`
	Message     string `json:"message,omitempty"`
	OnConflict  string `json:"on_conflict,omitempty"`
	ExpectOID   string `json:"expect_oid,omitempty"`
	// Mode of a materialize: "merge" (default), "squash", "fast_forward".
	Mode string `json:"mode,omitempty"`
	// Renames: nil detects renames (the server's default); false merges a
	// rename as a delete plus an add.
	Renames *bool `json:"renames,omitempty"`
	// Style of a markers merge: "diff3" (default) or "merge".
	Style string `json:"style,omitempty"`
}

// LineRange is a range of lines (Start is 1-based).
type LineRange struct {
	Start int `json:"start"`
	Count int `json:"count"`
}

// HunkContent is the text of a conflicting hunk on each side.
type HunkContent struct {
	Base      string `json:"base"`
	Ours      string `json:"ours"`
	Theirs    string `json:"theirs"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Hunk is one conflicting region of a file.
type Hunk struct {
	Base    LineRange   `json:"base"`
	Ours    LineRange   `json:"ours"`
	Theirs  LineRange   `json:"theirs"`
	Result  LineRange   `json:"result"`
	Content HunkContent `json:"content"`
}

// Conflict is one conflicting path of a merge.
type Conflict struct {
	Path    string   `json:"path"`
	Kind    string   `json:"kind"`
	OldPath string   `json:"old_path,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Hunks   []Hunk   `json:"hunks,omitempty"`
}

// MergeResponse is the answer of POST /merges and POST /sync.
type MergeResponse struct {
	Clean       bool       `json:"clean"`
	FastForward bool       `json:"fast_forward"`
	UpToDate    bool       `json:"up_to_date"`
	MergeBase   string     `json:"merge_base"`
	Ours        string     `json:"ours"`
	Theirs      string     `json:"theirs"`
	Tree        string     `json:"tree"`
	Commit      string     `json:"commit"`
	Branch      string     `json:"branch"`
	SideRef     string     `json:"side_ref,omitempty"`
	Conflicts   []Conflict `json:"conflicts"`
	Retries     int        `json:"retries"`
	DurationMS  float64    `json:"duration_ms"`
}

// PreflightBatchRequest is the body of POST /repos/{base}/merges/preflight:
// the workspaces listed, or those of a task (exactly one of the two), each
// merged in memory into the base's branch Ours (default: its default
// branch).
type PreflightBatchRequest struct {
	Ours       string   `json:"ours,omitempty"`
	Workspaces []string `json:"workspaces,omitempty"`
	Task       string   `json:"task,omitempty"`
	Deep       bool     `json:"deep,omitempty"`
	Renames    *bool    `json:"renames,omitempty"`
}

// PreflightBatchItem is one workspace's answer: Result is what the single
// preflight (POST /repos/{base}/merges with theirs "<workspace>:<its
// default branch>") answers, or Error what it fails with.
type PreflightBatchItem struct {
	Workspace string         `json:"workspace"`
	Theirs    string         `json:"theirs"`
	Result    *MergeResponse `json:"result,omitempty"`
	Error     *ErrorBody     `json:"error,omitempty"`
}

// PreflightBatchResponse is the answer of POST /repos/{base}/merges/preflight.
type PreflightBatchResponse struct {
	Ours       string               `json:"ours"`
	OursOID    string               `json:"ours_oid"`
	Results    []PreflightBatchItem `json:"results"`
	DurationMS float64              `json:"duration_ms"`
}

// SyncRequest is the body of POST /repos/{workspace}/sync (optional).
type SyncRequest struct {
	ExpectOID  string `json:"expect_oid,omitempty"`
	OnConflict string `json:"on_conflict,omitempty"`
}

// ---- gate: policy, evaluation, checks, hooks, promote

// Policy is the gate of one branch (PUT and GET /repos/{repo}/gate).
type Policy struct {
	Branch            string   `json:"branch"`
	RequiredChecks    []string `json:"required_checks"`
	MaxChangedFiles   int      `json:"max_changed_files"`
	MaxChangedLines   int      `json:"max_changed_lines"`
	ProtectedPaths    []string `json:"protected_paths"`
	RequireCleanMerge *bool    `json:"require_clean_merge,omitempty"`
	PromoteMode       string   `json:"promote_mode"`
	// HoldEffectClasses: effect classes held for a reviewer at promote.
	HoldEffectClasses []string `json:"hold_effect_classes,omitempty"`
}

// Reason is one rule a gate evaluation failed.
type Reason struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path,omitempty"`
}

// Evaluation is the answer of GET /repos/{workspace}/gate/evaluate and the
// "gate" of a promote.
type Evaluation struct {
	Workspace    string   `json:"workspace"`
	Commit       string   `json:"commit"`
	Into         string   `json:"into"`
	Passed       bool     `json:"passed"`
	Reasons      []Reason `json:"reasons"`
	ChangedFiles int      `json:"changed_files"`
	ChangedLines int      `json:"changed_lines"`
	MergeClean   bool     `json:"merge_clean"`
}

// CheckRequest is the body of POST /repos/{repo}/commits/{rev}/checks.
type CheckRequest struct {
	Name       string `json:"name"`
	Status     string `json:"status"`
	Summary    string `json:"summary"`
	DetailsURL string `json:"details_url"`
}

// Check is one check result for one commit.
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

// CheckSet is the answer of GET /repos/{repo}/commits/{rev}/checks: the
// latest result per name, and every result.
type CheckSet struct {
	Commit  string  `json:"commit"`
	Latest  []Check `json:"checks"`
	History []Check `json:"history"`
}

// HookRequest is the body of POST /repos/{repo}/hooks.
type HookRequest struct {
	URL    string   `json:"url"`
	Secret string   `json:"secret"`
	Events []string `json:"events"`
}

// Hook is a gate hook (never its secret).
type Hook struct {
	ID                  string     `json:"id"`
	Repo                string     `json:"repo"`
	URL                 string     `json:"url"`
	Events              []string   `json:"events"`
	Active              bool       `json:"active"`
	CreatedAt           time.Time  `json:"created_at"`
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
}

// HookList is the answer of GET /repos/{repo}/hooks.
type HookList struct {
	Hooks []Hook `json:"hooks"`
}

// RotateRequest is the body of POST /repos/{repo}/hooks/{id}/rotate: the
// new secret ("" lets the server make one) and how long the old one keeps
// signing (nil: the server's default of 24 h).
type RotateRequest struct {
	Secret         string `json:"secret"`
	OverlapSeconds *int64 `json:"overlap_seconds"`
}

// RotateResult is its answer; Secret is shown this once.
type RotateResult struct {
	Hook                *Hook      `json:"hook"`
	Secret              string     `json:"secret"`
	PreviousSecretUntil *time.Time `json:"previous_secret_until,omitempty"`
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

// Delivery is one event sent (or to send) to one hook.
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

// DeliveryList is the answer of GET /repos/{repo}/hooks/{id}/deliveries.
type DeliveryList struct {
	Deliveries []Delivery `json:"deliveries"`
}

// PromoteRequest is the body of POST /repos/{workspace}/promote
// (optional: the defaults promote the tip with the gate's mode).
type PromoteRequest struct {
	Commit  string `json:"commit"`
	Message string `json:"message"`
	Mode    string `json:"mode"`
}

// PromoteResult is its answer: the merge (its fields inline), the gate's
// evaluation, and where it went.
type PromoteResult struct {
	*MergeResponse
	Evaluation *Evaluation `json:"gate"`
	Workspace  string      `json:"workspace"`
	Into       string      `json:"into"`
	QueuedMS   float64     `json:"queued_ms"`
}

// ---- database branches and checkpoints

// DatabaseRequest is the body of PUT /repos/{repo}/database.
type DatabaseRequest struct {
	Template string `json:"template"`
}

// Redis is the answer of GET /repos/{workspace}/redis.
type Redis struct {
	Repo     string `json:"repo"`
	Template bool   `json:"template"` // seeded from the base's template RDB
	URL      string `json:"url"`
}

// Database is a repository's database binding (a base's template, a
// workspace's branch and its DSN).
type Database struct {
	Repo     string `json:"repo"`
	Template string `json:"template,omitempty"`
	Database string `json:"database,omitempty"`
	Role     string `json:"role,omitempty"`
	DSN      string `json:"dsn,omitempty"`
}

// CheckpointRequest is the body of POST /repos/{workspace}/checkpoints.
type CheckpointRequest struct {
	Branch     string `json:"branch"`
	FSSnapshot string `json:"fs_snapshot"`
	Label      string `json:"label"`
}

// Checkpoint ties a commit, a database snapshot and a filesystem
// snapshot id of one workspace.
type Checkpoint struct {
	ID         string    `json:"id"`
	Repo       string    `json:"repo"`
	Branch     string    `json:"branch"`
	Commit     string    `json:"commit"`
	Tree       string    `json:"tree"`
	DBSnapshot string    `json:"db_snapshot"`
	FSSnapshot string    `json:"fs_snapshot"`
	Label      string    `json:"label"`
	KeyName    string    `json:"key"`
	OpID       string    `json:"op_id"`
	DurationMS float64   `json:"duration_ms"`
	CreatedAt  time.Time `json:"created_at"`

	RedisSnapshot string `json:"redis_snapshot"` // "" without a Redis branch
}

// CheckpointList is the answer of GET /repos/{workspace}/checkpoints.
type CheckpointList struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
}

// Failure says why a run failed, recorded with a restore.
type Failure struct {
	Command    []string `json:"command,omitempty"`
	ExitCode   int      `json:"exit_code"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	DurationMS float64  `json:"duration_ms,omitempty"`
	StdoutTail string   `json:"stdout_tail,omitempty"`
	StderrTail string   `json:"stderr_tail,omitempty"`
	Evidence   string   `json:"evidence,omitempty"`
}

// RestoreRequest is the body of POST
// /repos/{workspace}/checkpoints/{id}/restore (optional).
type RestoreRequest struct {
	ExpectOID string   `json:"expect_oid"`
	Failure   *Failure `json:"failure,omitempty"`
}

// PartResult is what a restore did to one part (code or database).
type PartResult struct {
	Restored bool   `json:"restored"`
	Skipped  string `json:"skipped,omitempty"`
	Error    string `json:"error,omitempty"`
}

// RestoreResult is the answer of a restore.
type RestoreResult struct {
	Checkpoint string     `json:"checkpoint"`
	Commit     string     `json:"commit"`
	Tree       string     `json:"tree"`
	Code       PartResult `json:"code"`
	Database   PartResult `json:"database"`
	DBRestored bool       `json:"db_restored"`
	FSSnapshot string     `json:"fs_snapshot"`
	OpID       string     `json:"op_id"`
	DurationMS float64    `json:"duration_ms"`
	CodeMS     float64    `json:"code_ms"`
	DatabaseMS float64    `json:"database_ms"`

	Redis         PartResult `json:"redis"`
	RedisRestored bool       `json:"redis_restored"`
	RedisMS       float64    `json:"redis_ms"`
}

// ---- storage accounting: GET /api/v1/repos/{repo}/usage

// Usage is the storage of a repository's fork network (shared by the
// base and all its workspaces).
type Usage struct {
	Repo    string `json:"repo"`
	Network string `json:"network"`
	// Workspaces counts the network's workspaces, whatever their status.
	Workspaces int       `json:"workspaces"`
	Disk       DiskUsage `json:"disk"`
	// Bucket is set in object-storage mode (--object-store) only.
	Bucket *BucketUsage `json:"bucket,omitempty"`
	// Databases is the network's workspaces' Postgres branches and their
	// checkpoint snapshots (pg_database_size each); set when database
	// branching is configured (--branch-database-url).
	Databases *BranchUsage `json:"databases,omitempty"`
	// Redis is the network's workspaces' Redis branches (dump.rdb as of
	// the last save) and RDB snapshots; set when Redis branching is
	// configured (--branch-redis).
	Redis *BranchUsage `json:"redis,omitempty"`
	// Checkpoints counts the network's checkpoints and those that still
	// name a database or Redis snapshot (--checkpoint-retention drops
	// older ones).
	Checkpoints CheckpointUsage `json:"checkpoints"`
	// Reclaimable is what the object GC would free in this network: now
	// (unreachable objects older than --object-retention) and once every
	// unreachable object has aged past it (as `lockstep gc --prune now`).
	Reclaimable *Reclaimable `json:"reclaimable,omitempty"`
}

// BranchUsage is the storage of a network's workspace branches.
type BranchUsage struct {
	Branches      int   `json:"branches"`
	Bytes         int64 `json:"bytes"`
	Snapshots     int   `json:"snapshots"`
	SnapshotBytes int64 `json:"snapshot_bytes"`
	TotalBytes    int64 `json:"total_bytes"`
}

// CheckpointUsage counts a network's checkpoints.
type CheckpointUsage struct {
	Checkpoints       int `json:"checkpoints"`
	DatabaseSnapshots int `json:"database_snapshots"`
	RedisSnapshots    int `json:"redis_snapshots"`
}

// Reclaimable is what the object GC would free (a dry run).
type Reclaimable struct {
	Retention             string `json:"retention"`
	Objects               int    `json:"objects"`
	Bytes                 int64  `json:"bytes"`
	AfterRetentionObjects int    `json:"after_retention_objects"`
	AfterRetentionBytes   int64  `json:"after_retention_bytes"`
}

// DiskUsage is the network's objects directory on the replica that
// answered (in object-storage mode its local cache).
type DiskUsage struct {
	LooseObjects int   `json:"loose_objects"`
	LooseBytes   int64 `json:"loose_bytes"`
	Packs        int   `json:"packs"`
	PackBytes    int64 `json:"pack_bytes"`
	IndexBytes   int64 `json:"index_bytes"` // pack indexes and their companions
	OtherBytes   int64 `json:"other_bytes"` // info/, temp files
	TotalBytes   int64 `json:"total_bytes"`
}

// BucketUsage is the network's packs in the bucket, from the pack list:
// live ones, and retired ones (replaced by a compaction) that the
// bucket's garbage collection deletes once older than --object-grace.
type BucketUsage struct {
	LivePacks    int   `json:"live_packs"`
	LiveBytes    int64 `json:"live_bytes"`
	RetiredPacks int   `json:"retired_packs"`
	RetiredBytes int64 `json:"retired_bytes"`
}
