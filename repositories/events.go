package repositories

import "github.com/lockstep-hq/lockstep"

// hookEvent names the gate-hook event an operation raises ("" for none).
func hookEvent(op string) string {
	switch op {
	case "push", "git.push", "edit", "sync", "merge":
		return "push"
	case "rollback", "checkpoint.restore":
		return "rollback"
	case "promote":
		return "promote"
	case "checkpoint":
		return "checkpoint"
	}
	return ""
}

// hookEvents builds the outbox records of an operation on r: hooks of r
// and of the repository r was forked from receive it, in the same
// transaction as the ref move. A promote's payload names the workspace
// that landed.
func (s *Service) hookEvents(r *lockstep.Repo, op, branch, commit, tree, workspace string) []lockstep.HookEvent {
	ev := hookEvent(op)
	if ev == "" {
		return nil
	}
	var extra map[string]any
	if workspace != "" && ev == "promote" {
		extra = map[string]any{"workspace": workspace}
	}
	return []lockstep.HookEvent{s.HookEvent(r, ev, branch, commit, tree, extra)}
}

// HookEvent builds one outbox record for event on r.
func (s *Service) HookEvent(r *lockstep.Repo, event, branch, commit, tree string, extra map[string]any) lockstep.HookEvent {
	repos := []string{r.Name}
	payload := map[string]any{"event": event, "repository": r.Name, "branch": branch, "commit": commit, "tree": tree}
	if r.ForkOf != "" {
		repos = append(repos, r.ForkOf)
		payload["repository"] = r.ForkOf
		payload["workspace"] = r.Name
		payload["base_commit"] = r.BaseCommit
	}
	for k, v := range extra {
		payload[k] = v
	}
	return lockstep.HookEvent{Repos: repos, Event: event, Payload: payload}
}
