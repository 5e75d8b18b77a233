package web

// The task page: the attempts (workspaces) carrying one task label, side
// by side — outcome, gate evaluation, checks, failed runs, diff against
// the base — with a matrix of the files each touched and a form to diff
// any two of them on the compare page.

import (
	"net/http"
	"net/url"
	"sort"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/workspaces"
)

// uiTaskAttempts bounds the attempts a task page compares: each column
// costs a diff, a gate evaluation and a few queries. More attempts are
// listed on the repository page (?task=) and the page says so.
const uiTaskAttempts = 20

// uiTaskFiles bounds the rows of the files matrix.
const uiTaskFiles = 200

// uiTaskList bounds the tasks listed on a repository page.
const uiTaskList = 50

type taskAttempt struct {
	workspaces.WorkspaceInfo
	Branch      string
	Attempts    int64 // pushes to the workspace
	Eval        *gate.Evaluation
	EvalNote    string
	Met         []string // the policy's rules this attempt meets
	Checks      []lockstep.Check
	Runs        []failedRun
	Files       []gitobj.FileChange
	Added       int
	Removed     int
	DiffErr     string
	CompareBase string // the attempt's full diff against the base
	// World is what the attempt would do (or did) to the outside world:
	// its effects by status ("staged", "released", …) and how many.
	World     []effectCount
	Consuming int // effects flagged consuming, not discarded
}

// effectCount is how many of an attempt's effects have one status.
type effectCount struct {
	Status string
	N      int
}

type matrixRow struct {
	Path  string
	Cells []*gitobj.FileChange // per attempt, nil when untouched
	By    int                  // how many attempts touched it
}

type taskData struct {
	Base     *repositories.RepoInfo
	Task     string
	Attempts []taskAttempt
	More     bool // over uiTaskAttempts attempts: only the first are shown
	Max      int
	Matrix   []matrixRow
	FilesCut int
	PickA    string
	PickB    string
}

func (u *uiServer) handleTask(c *gin.Context) {
	ctx := c.Request.Context()
	base, err := u.s.Repos.Info(ctx, c.Param("repo"))
	if err != nil {
		u.fail(c, err)
		return
	}
	if base.ForkOf != "" {
		u.fail(c, lockstep.Errorf(lockstep.EINVALID, "%s is a workspace: tasks belong to a base repository", base.Name))
		return
	}
	task := c.Param("task")
	wss, next, err := u.s.Workspaces.Workspaces(ctx, base.Name, workspaces.WorkspaceQuery{Task: task, Limit: uiTaskAttempts})
	if err != nil {
		u.fail(c, err)
		return
	}
	if len(wss) == 0 {
		u.fail(c, lockstep.Errorf(lockstep.ENOTFOUND, "no workspace of %s has the task %q", base.Name, task))
		return
	}
	d := taskData{Base: base, Task: task, More: next != "", Max: uiTaskAttempts}
	policy, err := u.s.Gate.Policy(ctx, base.Name, "")
	if err != nil {
		u.fail(c, err)
		return
	}
	rules := policyRules(policy)
	live := url.Values{"repo": {base.Name}}
	for _, ws := range wss {
		live.Add("repo", ws.Name)
		a := taskAttempt{WorkspaceInfo: ws}
		info, err := u.s.Repos.Info(ctx, ws.Name)
		if err != nil {
			u.fail(c, err)
			return
		}
		a.Branch = info.DefaultBranch
		if at, err := u.s.Workspaces.Attempts(ctx, ws.Name, uiRestoreScan); err == nil && len(at) > 0 {
			a.Attempts = agentAttempts(at)
		}
		a.CompareBase = "/ui/repos/" + url.PathEscape(ws.Name) + "/compare?" + url.Values{
			"base": {base.Name + ":" + base.DefaultBranch}, "head": {info.DefaultBranch}, "from": {"merge-base"}}.Encode()
		if ws.Tip != "" {
			if set, err := u.s.Gate.Checks(ctx, ws.Name, ws.Tip); err == nil {
				a.Checks = set.Latest
			}
			if ws.BaseCommit != "" {
				res, err := u.s.Repos.Compare(ctx, ws.Name, ws.BaseCommit, ws.Tip)
				if err != nil {
					a.DiffErr = publicMessage(c, err)
				} else {
					a.Files, a.Added, a.Removed = res.Files, res.Added, res.Removed
					for i := range a.Files {
						a.Files[i].Patch = ""
					}
				}
			}
		}
		switch {
		case ws.Tip == "":
			a.EvalNote = "no commit yet"
		case !ws.Status.Movable():
			a.EvalNote = string(ws.Status) + ": not promotable"
		default:
			t, err := u.s.Gate.Target(ctx, ws.Name, "")
			if err == nil {
				a.Eval, _, err = u.s.Gate.Evaluate(ctx, t)
			}
			if err != nil {
				a.EvalNote = publicMessage(c, err)
			} else {
				unmet := map[string]bool{}
				for _, r := range a.Eval.Reasons {
					unmet[r.Rule] = true
				}
				for _, r := range rules {
					if !unmet[r] {
						a.Met = append(a.Met, r)
					}
				}
			}
		}
		runsFilter, err := u.s.visibleOps(ctx, auth.FromContext(ctx), lockstep.OpFilter{Repo: ws.Name, Op: "run.failed", Newest: true, Limit: 3})
		if err != nil {
			u.fail(c, err)
			return
		}
		runs, err := u.s.Store.ListOps(ctx, runsFilter)
		if err != nil {
			u.fail(c, err)
			return
		}
		for _, e := range runs {
			a.Runs = append(a.Runs, newFailedRun(e))
		}
		if u.s.Effects != nil {
			list, _, err := u.s.Effects.List(ctx, nil, ws.Name, 0, 1000) // counts only
			if err != nil {
				u.fail(c, err)
				return
			}
			by := map[string]int{}
			for _, e := range list {
				by[e.Status]++
				if e.Consuming && e.Status != lockstep.EffectDiscarded {
					a.Consuming++
				}
			}
			for _, st := range []string{lockstep.EffectStaged, lockstep.EffectHeld, lockstep.EffectReleasing, lockstep.EffectReleased, lockstep.EffectFailed, lockstep.EffectDiscarded} {
				if by[st] > 0 {
					a.World = append(a.World, effectCount{Status: st, N: by[st]})
				}
			}
		}
		d.Attempts = append(d.Attempts, a)
	}
	d.Matrix, d.FilesCut = fileMatrix(d.Attempts, uiTaskFiles)
	if len(d.Attempts) > 1 {
		d.PickA, d.PickB = d.Attempts[0].Name, d.Attempts[1].Name
	}
	u.render(c, http.StatusOK, "task", view{Title: "task " + task + " · " + base.Name, Section: "repos",
		Live: "/ui/events?" + live.Encode(), D: d})
}

// policyRules names the rules a policy sets (as gate.Reason.Rule does).
func policyRules(p *lockstep.Policy) []string {
	var out []string
	if len(p.RequiredChecks) > 0 {
		out = append(out, "required_check")
	}
	if p.MaxChangedFiles > 0 {
		out = append(out, "max_changed_files")
	}
	if p.MaxChangedLines > 0 {
		out = append(out, "max_changed_lines")
	}
	if len(p.ProtectedPaths) > 0 {
		out = append(out, "protected_path")
	}
	if p.CleanMergeRequired() {
		out = append(out, "clean_merge")
	}
	return out
}

// fileMatrix lists every file any attempt touched (most-touched first,
// then by path), with each attempt's change of it.
func fileMatrix(as []taskAttempt, max int) ([]matrixRow, int) {
	rows := map[string]*matrixRow{}
	for i, a := range as {
		for j := range a.Files {
			f := &a.Files[j]
			r := rows[f.Path]
			if r == nil {
				r = &matrixRow{Path: f.Path, Cells: make([]*gitobj.FileChange, len(as))}
				rows[f.Path] = r
			}
			r.Cells[i] = f
			r.By++
		}
	}
	out := make([]matrixRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].By != out[j].By {
			return out[i].By > out[j].By
		}
		return out[i].Path < out[j].Path
	})
	if len(out) > max {
		return out[:max], len(out) - max
	}
	return out, 0
}

// taskURL is a task page's address.
func taskURL(base, task string) string {
	return "/ui/repos/" + url.PathEscape(base) + "/tasks/" + url.PathEscape(task)
}

type verifyData struct {
	Verify    *lockstep.VerifyResult
	VerifyErr string
}

// handleOplogVerify verifies the whole hash chain on demand (it reads
// every entry, so the oplog page no longer does it on every view).
func (u *uiServer) handleOplogVerify(c *gin.Context) {
	ctx := c.Request.Context()
	if err := auth.Require(auth.FromContext(ctx), lockstep.RoleAdmin, lockstep.RoleReviewer, lockstep.RoleCI); err != nil {
		u.fail(c, err)
		return
	}
	var d verifyData
	res, err := u.s.Store.VerifyOps(ctx)
	if err != nil {
		d.VerifyErr = publicMessage(c, err)
	} else {
		d.Verify = &res
	}
	u.render(c, http.StatusOK, "verify", view{Title: "Verify the operations log", Section: "oplog", D: d})
}
