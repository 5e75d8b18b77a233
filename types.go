package lockstep

import "time"

// Roles of API keys.
const (
	RoleAdmin    = "admin"    // everything, including keys and gate policies
	RoleAgent    = "agent"    // creates workspaces, writes only the ones it owns
	RoleReviewer = "reviewer" // reads everything, marks workspaces failed
	RoleCI       = "ci"       // reads everything, posts check results
	RoleRunner   = "runner"   // takes run jobs for the workspaces its registration names; nothing else
)

// ValidRole reports whether r is one of the five roles.
func ValidRole(r string) bool {
	switch r {
	case RoleAdmin, RoleAgent, RoleReviewer, RoleCI, RoleRunner:
		return true
	}
	return false
}

// Key is an API key as stored: the secret itself is never kept, only its
// hash. Prefix is the visible part ("lsk_ab12cd34") used to find the row.
type Key struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	Prefix     string     `json:"prefix"`
	Hash       []byte     `json:"-"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	// Minted keys (issue 28): ExpiresAt ends the key (401 after it);
	// ParentKeyID is the key that minted it (its revocation revokes this
	// one); Scope limits it to one workspace or one task's workspaces.
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	ParentKeyID string     `json:"parent_key_id,omitempty"`
	Scope       *KeyScope  `json:"scope,omitempty"`
	// QuotaWorkspaces overrides the server's active-workspace quota for
	// this key (nil: the server's default; 0: unlimited).
	QuotaWorkspaces *int `json:"quota_workspaces,omitempty"`
	// QuotaStorageBytes and QuotaRuns override --quota-storage-bytes and
	// --quota-runs for this key (nil: the server's setting; 0: unlimited).
	QuotaStorageBytes *int64 `json:"quota_storage_bytes,omitempty"`
	QuotaRuns         *int   `json:"quota_runs,omitempty"`
}

// KeyQuota is a key's quota overrides, each nil for the server's setting
// and 0 for unlimited.
type KeyQuota struct {
	Workspaces   *int
	StorageBytes *int64
	Runs         *int
}

// KeyScope limits a key to one workspace, or to the workspaces of one
// task forked from one base (and reading/forking that base for the task).
type KeyScope struct {
	Workspace string `json:"workspace,omitempty"`
	Base      string `json:"base,omitempty"`
	Task      string `json:"task,omitempty"`
	// Owner is the key whose workspaces in the scope this key acts on as
	// their owner (set at minting: the workspace's owner, or the minting
	// agent; "" when an admin minted a task scope: any of the task's).
	Owner string `json:"owner,omitempty"`
}

// Owns reports whether k acts as the owner of r: it is r's owner, or a
// scoped key whose scope covers r and was minted for r's owner.
func (k *Key) Owns(r *Repo) bool {
	if k == nil || r == nil {
		return false
	}
	if r.OwnerKeyID == k.ID {
		return true
	}
	sc := k.Scope
	return sc != nil && r.IsWorkspace() && k.InScope(r) == nil && (sc.Owner == "" || r.OwnerKeyID == sc.Owner)
}

// String describes the scope for error messages.
func (sc *KeyScope) String() string {
	if sc.Workspace != "" {
		return "workspace " + sc.Workspace
	}
	return "task " + sc.Task + " of " + sc.Base
}

// Expired reports whether k has expired at now.
func (k *Key) Expired(now time.Time) bool {
	return k.ExpiresAt != nil && !now.Before(*k.ExpiresAt)
}

// InScope returns permission_denied unless a scoped key k may act on r:
// its workspace; or, for a task scope, the base itself (read, fork) and
// the workspaces of that base's network labelled with the task.
func (k *Key) InScope(r *Repo) error {
	if k == nil || k.Scope == nil || r == nil {
		return nil
	}
	sc := k.Scope
	switch {
	case sc.Workspace != "" && r.Name == sc.Workspace:
		return nil
	case sc.Workspace == "" && r.Name == sc.Base:
		return nil
	case sc.Workspace == "" && r.IsWorkspace() && r.Network == sc.Base && r.Task == sc.Task:
		return nil
	}
	return Errorf(EFORBIDDEN, "key %s is scoped to %s: it may not act on %s", k.Name, sc, r.Name)
}

// RefMove is one ref moved by an operation. Old or New is ZeroOID for a
// creation or a deletion.
type RefMove struct {
	Repo string `json:"repo"`
	Ref  string `json:"ref"`
	Old  string `json:"old"`
	New  string `json:"new"`
}

// OpEntry is one entry of the operations log. Seq, PrevHash and Hash are set
// by the store when the entry is appended.
type OpEntry struct {
	Seq        int64          `json:"seq"`
	ID         string         `json:"id"`
	Time       time.Time      `json:"time"`
	KeyID      string         `json:"key_id"`
	KeyName    string         `json:"key_name"`
	Op         string         `json:"op"`
	Result     string         `json:"result"`
	ReadOnly   bool           `json:"read_only"`
	Repo       string         `json:"repo,omitempty"`
	Refs       []RefMove      `json:"refs,omitempty"`
	Objects    int            `json:"objects"`
	Bytes      int64          `json:"bytes"`
	DurationUS int64          `json:"duration_us"`
	TraceID    string         `json:"trace_id,omitempty"`
	Follows    string         `json:"follows,omitempty"`
	Details    map[string]any `json:"details,omitempty"`
	// IdempotencyKey is the Idempotency-Key the operation ran under (part
	// of the hash when set; absent from older entries' hashes).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Replays counts retries answered from this operation's stored
	// response. It is an annotation outside the hash chain (it changes
	// after the entry is written).
	Replays  int    `json:"replays,omitempty"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	// Answer is the operation's result (a value, or the error of a
	// refused write) when it commits with this entry: under an
	// Idempotency-Key the store writes it on the key's record in the same
	// transaction (IdemClaim.Answer), so a retry after a crash between
	// commit and response replays it. Neither stored in the log nor hashed.
	Answer any `json:"-"`
}

// Repo is a repository: a named set of refs in a fork network.
type Repo struct {
	ID            int64  `json:"-"`
	Name          string `json:"name"`
	Network       string `json:"network"`
	ForkOf        string `json:"fork_of,omitempty"`
	DefaultBranch string `json:"default_branch"`
	Status        Status `json:"status"`
	OwnerKeyID    string `json:"owner_key_id,omitempty"`
	OwnerName     string `json:"owner,omitempty"`
	BaseCommit    string `json:"base_commit,omitempty"`
	// Task is an optional label grouping workspaces that are attempts at
	// one task.
	Task      string    `json:"task,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Ref is a named pointer to a commit in one repository.
type Ref struct {
	Name      string    `json:"name"`
	OID       string    `json:"oid"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Attempt is a commit pushed to a workspace; gate results attach to it.
type Attempt struct {
	Seq       int64     `json:"seq"`    // global order of all attempts
	Number    int64     `json:"number"` // 1, 2, 3 … within its workspace
	Commit    string    `json:"commit"`
	Tree      string    `json:"tree"`
	Branch    string    `json:"branch"`
	Op        string    `json:"op"`
	KeyName   string    `json:"key"`
	CreatedAt time.Time `json:"created_at"`
}
