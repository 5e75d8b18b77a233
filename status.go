package lockstep

// Status is where a repository is in its lifecycle. A base repository is
// always active; a workspace starts active and ends promoted, failed or
// abandoned. Which changes are allowed, and for whom, is the one table
// StatusTransitions; the store makes each change a compare-and-swap on
// the previous status (RepoStore.SetRepoStatus).
type Status string

// The statuses.
const (
	StatusActive    Status = "active"    // refs move (push, edit, rollback, promote …)
	StatusPromoted  Status = "promoted"  // landed into its base: final
	StatusFailed    Status = "failed"    // marked failed by a reviewer, CI or an admin; an admin may reopen it
	StatusAbandoned Status = "abandoned" // given up by its owner or an admin: final
)

// Statuses lists every status, in the API's order (api/openapi.yaml's
// RepoStatus enum and the clients' types follow it; a test checks).
var Statuses = []Status{StatusActive, StatusPromoted, StatusFailed, StatusAbandoned}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Movable reports whether refs of a repository in status s may move: only
// an active one's. A promoted, failed or abandoned workspace's refs are
// kept for review and never move (the store re-checks this inside every
// ref's transaction).
func (s Status) Movable() bool { return s == StatusActive }

// Final reports whether no transition leaves s (promoted, abandoned):
// reopening one would let its refs move again, and a promoted workspace
// could land twice.
func (s Status) Final() bool {
	for _, t := range StatusTransitions {
		if t.From == s {
			return false
		}
	}
	return s.Valid()
}

// StatusTransition is one allowed status change and who may make it.
type StatusTransition struct {
	From, To Status
	// Roles are the key roles that may make it through a status change
	// (POST /repos/{ws}/status, DELETE /repos/{ws}).
	Roles []string
	// Owner: the workspace's own key may make it too, whatever its role.
	Owner bool
	// Landing: only a promote makes it, in the transaction that moves the
	// base branch (RepoStore.UpdateRefsAndStatus); no status route does,
	// so a workspace is never promoted without its commit landing.
	Landing bool
}

// StatusTransitions is the workspace lifecycle: every allowed change.
// Anything not listed is refused; promoted and abandoned have no way out.
var StatusTransitions = []StatusTransition{
	{From: StatusActive, To: StatusPromoted, Landing: true},
	{From: StatusActive, To: StatusFailed, Roles: []string{RoleAdmin, RoleReviewer, RoleCI}},
	{From: StatusActive, To: StatusAbandoned, Roles: []string{RoleAdmin}, Owner: true},
	{From: StatusFailed, To: StatusFailed, Roles: []string{RoleAdmin, RoleReviewer, RoleCI}}, // marked again, with a new reason
	{From: StatusFailed, To: StatusActive, Roles: []string{RoleAdmin}},                       // reopened
	{From: StatusFailed, To: StatusAbandoned, Roles: []string{RoleAdmin}, Owner: true},
}

// Transition returns the table's entry for from → to.
func Transition(from, to Status) (StatusTransition, bool) {
	for _, t := range StatusTransitions {
		if t.From == from && t.To == to {
			return t, true
		}
	}
	return StatusTransition{}, false
}

// CheckTransition is the rule of a status change of workspace ws to to by
// actor through a status route (a promote lands through
// UpdateRefsAndStatus instead). In this order: invalid_argument for an
// unknown status or a base repository; permission_denied when no entry of
// the table leading to to names the actor (its role, or its ownership of
// ws); invalid_argument when ws's status is final or the table has no
// entry from it to to; permission_denied when that entry does not name
// the actor.
func CheckTransition(actor *Key, ws *Repo, to Status) error {
	if !to.Valid() {
		return Errorf(EINVALID, "invalid status %q: want one of %v", to, Statuses)
	}
	if !ws.IsWorkspace() {
		return Errorf(EINVALID, "%s is a base repository, not a workspace", ws.Name)
	}
	routed, allowed := false, false
	for _, t := range StatusTransitions {
		if t.To == to && !t.Landing {
			routed = true
			allowed = allowed || t.allows(actor, ws)
		}
	}
	if !routed {
		return Errorf(EINVALID, "workspace %s becomes %s only by a promote that lands it", ws.Name, to)
	}
	if !allowed {
		return Errorf(EFORBIDDEN, "your key (%s) may not make workspace %s %s", roleOf(actor), ws.Name, to)
	}
	if ws.Status.Final() {
		return Errorf(EINVALID, "workspace %s is %s: that status is final (fork a new workspace to continue)", ws.Name, ws.Status)
	}
	t, ok := Transition(ws.Status, to)
	if !ok || t.Landing {
		return Errorf(EINVALID, "workspace %s is %s: it cannot become %s", ws.Name, ws.Status, to)
	}
	if !t.allows(actor, ws) {
		return Errorf(EFORBIDDEN, "your key (%s) may not make workspace %s %s while it is %s", roleOf(actor), ws.Name, to, ws.Status)
	}
	return nil
}

// allows reports whether the entry names actor for workspace ws.
func (t StatusTransition) allows(actor *Key, ws *Repo) bool {
	if actor == nil {
		return false
	}
	if t.Owner && actor.Owns(ws) {
		return true
	}
	for _, r := range t.Roles {
		if actor.Role == r {
			return true
		}
	}
	return false
}

func roleOf(k *Key) string {
	if k == nil {
		return "none"
	}
	return "role " + k.Role
}

// StatusConflict is the error of a status compare-and-swap that lost: the
// repository is no longer in the status the change was decided on (it
// changed meanwhile). ref_conflict, with details expected and actual.
func StatusConflict(repo string, expected, actual Status) error {
	return Errorf(EREFCONFLICT, "the status of %s changed meanwhile: it is %s, not %s; re-read it and decide again", repo, actual, expected).
		WithDetails(map[string]any{"expected": string(expected), "actual": string(actual)})
}

// IsWorkspace reports whether r is a workspace (a fork), not a base
// repository.
func (r *Repo) IsWorkspace() bool { return r.ForkOf != "" }

// Movable reports whether r's refs may move now (its status is active).
func (r *Repo) Movable() bool { return r.Status.Movable() }
