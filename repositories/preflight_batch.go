package repositories

import (
	"context"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
)

// DefaultPreflightBatchMax is the default of Config.PreflightBatchMax.
const DefaultPreflightBatchMax = 100

// PreflightBatchRequest asks for the preflight of several workspaces of
// one base into one branch of the base: the workspaces listed, or those
// with the task label Task (exactly one of the two).
type PreflightBatchRequest struct {
	Ours       string   `json:"ours"`
	Workspaces []string `json:"workspaces"`
	Task       string   `json:"task"`
	Deep       bool     `json:"deep"`
	Renames    *bool    `json:"renames,omitempty"`
}

// PreflightBatchItem is one workspace's answer: Result is what the single
// preflight (POST /repos/{base}/merges, theirs "<workspace>:<its default
// branch>") answers, or Error what it fails with.
type PreflightBatchItem struct {
	Workspace string         `json:"workspace"`
	Theirs    string         `json:"theirs"`
	Result    *MergeResponse `json:"result,omitempty"`
	Error     *api.ErrorBody `json:"error,omitempty"`
}

// PreflightBatchResponse holds one item per workspace, in request order
// (by name for a task).
type PreflightBatchResponse struct {
	Ours       string               `json:"ours"`
	OursOID    string               `json:"ours_oid"`
	Results    []PreflightBatchItem `json:"results"`
	DurationMS float64              `json:"duration_ms"`
}

func (s *Service) preflightBatchMax() int {
	if s.cfg.PreflightBatchMax > 0 {
		return s.cfg.PreflightBatchMax
	}
	return DefaultPreflightBatchMax
}

// PreflightBatch computes the preflight of each workspace's default
// branch into the branch Ours of the base baseName, in memory: one base
// lookup, one network open and one read of ours for all of them. A
// workspace the caller may not see (outside a scoped key's scope), of
// another fork network, or unknown is answered with an error item; the
// other items are unaffected. Errors of the whole call: invalid_argument
// (neither or both of workspaces and task, more workspaces than
// PreflightBatchMax), not_found (base or branch).
func (s *Service) PreflightBatch(ctx context.Context, actor *lockstep.Key, baseName string, req PreflightBatchRequest) (*PreflightBatchResponse, error) {
	start := s.now()
	base, err := s.Repo(ctx, baseName)
	if err != nil {
		return nil, err
	}
	if err := actor.InScope(base); err != nil {
		return nil, err
	}
	if req.Ours == "" {
		req.Ours = base.DefaultBranch
	}
	if err := lockstep.ValidateBranch(req.Ours); err != nil {
		return nil, err
	}
	max := s.preflightBatchMax()
	var wss []*lockstep.Repo
	switch {
	case (len(req.Workspaces) == 0) == (req.Task == ""):
		return nil, lockstep.Errorf(lockstep.EINVALID, "name the workspaces: either \"workspaces\" (a list of names) or \"task\" (a task label), not both")
	case len(req.Workspaces) > max:
		return nil, lockstep.Errorf(lockstep.EINVALID, "%d workspaces in one batch preflight: at most %d (--preflight-batch-max)", len(req.Workspaces), max)
	case req.Task != "":
		wss, err = s.store.ListRepos(ctx, lockstep.RepoFilter{ForkOf: base.Name, Task: req.Task, Limit: max + 1})
		if err != nil {
			return nil, err
		}
		if len(wss) > max {
			return nil, lockstep.Errorf(lockstep.EINVALID, "task %q of %s has more than %d workspaces, the most one batch preflight takes (--preflight-batch-max): list them in pages with \"workspaces\"", req.Task, base.Name, max)
		}
	}
	n, err := s.network(ctx, base.Network)
	if err != nil {
		return nil, err
	}
	ours, err := s.branchTip(ctx, base, req.Ours)
	if err != nil {
		return nil, err
	}
	out := &PreflightBatchResponse{Ours: req.Ours, OursOID: ours.String(), Results: []PreflightBatchItem{}}
	one := MergeRequest{Ours: req.Ours, Preflight: true, Deep: req.Deep, Renames: req.Renames}
	var logged []map[string]any
	caches := s.netCaches(base.Network) // the walks share ours' history
	item := func(name string, ws *lockstep.Repo) PreflightBatchItem {
		it := PreflightBatchItem{Workspace: name}
		itemStart := s.now()
		res, theirs, err := s.preflightWorkspace(ctx, actor, base, n, ours, one, name, ws, caches, &it)
		if err != nil {
			if lockstep.ErrorCode(err) == lockstep.EINTERNAL || lockstep.ErrorCode(err) == lockstep.EUNAVAILABLE {
				s.log.ErrorContext(ctx, "batch preflight", "workspace", name, "error", err)
			}
			it.Error = &api.ErrorBody{Code: lockstep.ErrorCode(err), Message: lockstep.ErrorMessage(err), Details: lockstep.ErrorDetails(err)}
			logged = append(logged, map[string]any{"workspace": name, "error": it.Error.Code})
			return it
		}
		r := response(res, ours, theirs, req.Ours)
		r.DurationMS = ms(s.now().Sub(itemStart))
		it.Result = r
		logged = append(logged, map[string]any{"workspace": name, "theirs_oid": theirs.String(), "clean": res.Clean, "conflicts": len(res.Conflicts)})
		return it
	}
	if req.Task != "" {
		for _, ws := range wss {
			out.Results = append(out.Results, item(ws.Name, ws))
		}
	} else {
		for _, name := range req.Workspaces {
			out.Results = append(out.Results, item(name, nil))
		}
	}
	out.DurationMS = ms(s.now().Sub(start))
	s.metrics.ObserveOp("merge.preflight_batch", "ok", s.now().Sub(start))
	// One read-only entry for the whole batch (a single preflight writes
	// one per call).
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "merge.preflight_batch", ReadOnly: true, Repo: base.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(start).Microseconds(),
		Details:    map[string]any{"ours": req.Ours, "ours_oid": ours.String(), "task": req.Task, "deep": req.Deep, "workspaces": logged},
		Answer:     out} // a keyed batch stores its answer in this entry's transaction (one_tx)
	if err := s.store.AppendOp(ctx, e); err != nil {
		return nil, err
	}
	return out, nil
}

// preflightWorkspace is one item of a batch: the workspace (looked up
// unless ws is given), its authorization, its tip, the merge.
func (s *Service) preflightWorkspace(ctx context.Context, actor *lockstep.Key, base *lockstep.Repo, n gitobj.Reader, ours gitobj.Hash,
	req MergeRequest, name string, ws *lockstep.Repo, caches *netCommits, it *PreflightBatchItem) (*merge.Result, gitobj.Hash, error) {
	if ws == nil {
		var err error
		if ws, err = s.Repo(ctx, name); err != nil {
			return nil, gitobj.ZeroHash, err
		}
	}
	if err := actor.InScope(ws); err != nil {
		return nil, gitobj.ZeroHash, err
	}
	if ws.Network != base.Network {
		return nil, gitobj.ZeroHash, lockstep.Errorf(lockstep.EINVALID, "%s is not in the fork network of %s", ws.Name, base.Name)
	}
	it.Theirs = ws.Name + ":" + ws.DefaultBranch
	theirs, err := s.branchTip(ctx, ws, ws.DefaultBranch)
	if err != nil {
		return nil, gitobj.ZeroHash, err
	}
	req.Theirs = it.Theirs
	opts := s.mergeOptions(req, false)
	opts.Commits, opts.Bases = caches.c, caches.bases
	res, err := merge.Merge(ctx, merge.NewOverlay(n.Objects()), ours, theirs, opts)
	if err != nil {
		return nil, gitobj.ZeroHash, err
	}
	return res, theirs, nil
}
