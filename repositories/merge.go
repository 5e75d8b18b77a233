package repositories

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/merge"
)

// MergeRequest asks for a merge of Theirs into the branch Ours of a
// repository. Without Materialize it is a preflight: computed, nothing
// written (no object, no ref).
type MergeRequest struct {
	Ours        string `json:"ours"`
	Theirs      string `json:"theirs"`
	Preflight   bool   `json:"preflight"`
	Deep        bool   `json:"deep"`
	Materialize bool   `json:"materialize"`
	Message     string `json:"message"`
	OnConflict  string `json:"on_conflict"`
	ExpectOID   string `json:"expect_oid"`
	// Mode is how a materialize lands: "merge" (fast-forward when possible,
	// else a two-parent merge commit; the default), "squash" (one
	// single-parent commit with the merged tree) or "fast_forward" (refuse
	// anything else).
	Mode string `json:"mode,omitempty"`
	// Renames: detect renames like git's merge-ort (a file renamed on one
	// side and edited on the other merges at its new path). Absent means
	// true; false merges a rename as a delete plus an add.
	Renames *bool `json:"renames,omitempty"`
	// Style is the conflict-marker style of a markers merge: "diff3" (the
	// default: a "||||||| base" section in every conflict) or "merge"
	// (git's default style: ours and theirs only, conflicts refined).
	Style string `json:"style,omitempty"`
}

// MergeResponse is the answer of a merge.
type MergeResponse struct {
	Clean       bool             `json:"clean"`
	FastForward bool             `json:"fast_forward"`
	UpToDate    bool             `json:"up_to_date"`
	MergeBase   string           `json:"merge_base"`
	Ours        string           `json:"ours"`
	Theirs      string           `json:"theirs"`
	Tree        string           `json:"tree"`
	Commit      string           `json:"commit"`
	Branch      string           `json:"branch"`
	SideRef     string           `json:"side_ref,omitempty"`
	Conflicts   []merge.Conflict `json:"conflicts"`
	Retries     int              `json:"retries"`
	DurationMS  float64          `json:"duration_ms"`
}

// Merge runs a preflight or a materialize. Errors: invalid_argument,
// not_found, permission_denied (materialize), ref_conflict (stale
// expect_oid), merge_conflict (materialize with conflicts, details list
// them), precondition failures of mode fast_forward.
func (s *Service) Merge(ctx context.Context, actor *lockstep.Key, repoName string, req MergeRequest) (*MergeResponse, error) {
	start := s.now()
	var r *lockstep.Repo
	var oursRef *lockstep.Ref // a preflight's ours, read with the repository
	var err error
	if rr, ok := s.store.(repoRefReader); ok && !req.Materialize && req.Ours != "" && lockstep.ValidateBranch(req.Ours) == nil &&
		lockstep.ValidateName("repository name", repoName) == nil {
		r, oursRef, err = rr.RepoRef(ctx, repoName, branchRef(req.Ours))
		if err == nil && oursRef == nil {
			oursRef = &lockstep.Ref{} // no such branch: not_found below, where branchTip says it
		}
	} else {
		r, err = s.Repo(ctx, repoName)
	}
	if err != nil {
		return nil, err
	}
	if req.Ours == "" {
		req.Ours = r.DefaultBranch
	}
	if err := lockstep.ValidateBranch(req.Ours); err != nil {
		return nil, err
	}
	if req.Theirs == "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "missing \"theirs\": an oid, a branch, or repo:branch of the same fork network")
	}
	if req.OnConflict != "" && req.OnConflict != "markers" && req.OnConflict != "fail" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "on_conflict %q: want \"fail\" (default) or \"markers\"", req.OnConflict)
	}
	switch req.Mode {
	case "", "merge", "squash", "fast_forward":
	default:
		return nil, lockstep.Errorf(lockstep.EINVALID, "mode %q: want merge, squash or fast_forward", req.Mode)
	}
	if req.Style != "" && req.Style != "diff3" && req.Style != "merge" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "style %q: want \"diff3\" (default) or \"merge\"", req.Style)
	}
	if req.Preflight && req.Materialize {
		return nil, lockstep.Errorf(lockstep.EINVALID, "preflight and materialize exclude each other")
	}
	if req.ExpectOID != "" {
		if err := lockstep.ValidateOID("expect_oid", req.ExpectOID); err != nil {
			return nil, err
		}
	}
	theirs, err := s.Resolve(ctx, r, req.Theirs)
	if err != nil {
		return nil, err
	}
	if !req.Materialize {
		return s.preflight(ctx, actor, r, req, oursRef, theirs, start)
	}
	if err := writable(actor, r); err != nil {
		return nil, err
	}
	return s.materialize(ctx, actor, r, req, theirs, Reason{Op: "merge", Start: start})
}

func (s *Service) mergeOptions(req MergeRequest, markers bool) merge.Options {
	return merge.Options{Deep: req.Deep, Markers: markers, ShowBase: markers && req.Style != "merge", OursLabel: req.Ours, TheirsLabel: req.Theirs, MaxFileBytes: s.cfg.MergeMaxFileBytes,
		NoRenames: req.Renames != nil && !*req.Renames, RenameLimit: s.cfg.MergeRenameLimit}
}

// preflight merges theirs into the branch req.Ours of r in memory. oursRef
// is that branch as read with r (an empty Ref when it did not exist), or
// nil: read it now.
func (s *Service) preflight(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, req MergeRequest, oursRef *lockstep.Ref, theirs gitobj.Hash,
	start time.Time) (*MergeResponse, error) {
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	var ours gitobj.Hash
	switch {
	case oursRef == nil:
		if ours, err = s.branchTip(ctx, r, req.Ours); err != nil {
			return nil, err
		}
	case oursRef.OID == "":
		return nil, lockstep.Errorf(lockstep.ENOTFOUND, "branch %s not found in %s", req.Ours, r.Name)
	default:
		ours = gitobj.NewHash(oursRef.OID)
	}
	opts := s.withCaches(s.mergeOptions(req, false), r.Network)
	res, err := merge.Merge(ctx, merge.NewOverlay(n.Objects()), ours, theirs, opts)
	if err != nil {
		return nil, err
	}
	out := response(res, ours, theirs, req.Ours)
	out.DurationMS = ms(s.now().Sub(start))
	s.metrics.ObserveOp("merge.preflight", "ok", s.now().Sub(start))
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "merge.preflight", ReadOnly: true, Repo: r.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(start).Microseconds(),
		Details: map[string]any{"ours": req.Ours, "ours_oid": ours.String(), "theirs": req.Theirs, "theirs_oid": theirs.String(),
			"deep": req.Deep, "clean": res.Clean, "conflicts": len(res.Conflicts)}, Answer: out}
	if err := s.store.AppendOp(ctx, e); err != nil {
		return nil, err
	}
	return out, nil
}

// repoRefReader is a store that reads a repository and one of its refs
// in one statement (sqlstore.DB.RepoRef): a preflight reads both sides so.
// ref is nil when the repository has no such ref.
type repoRefReader interface {
	RepoRef(ctx context.Context, name, ref string) (*lockstep.Repo, *lockstep.Ref, error)
}

func (s *Service) branchTip(ctx context.Context, r *lockstep.Repo, branch string) (gitobj.Hash, error) {
	ref, err := s.store.Ref(ctx, r.ID, branchRef(branch))
	if err != nil {
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return gitobj.ZeroHash, lockstep.Errorf(lockstep.ENOTFOUND, "branch %s not found in %s", branch, r.Name)
		}
		return gitobj.ZeroHash, err
	}
	return gitobj.NewHash(ref.OID), nil
}

func response(res *merge.Result, ours, theirs gitobj.Hash, branch string) *MergeResponse {
	out := &MergeResponse{Clean: res.Clean, FastForward: res.FastForward, UpToDate: res.UpToDate, MergeBase: hashStr(res.MergeBase),
		Ours: ours.String(), Theirs: theirs.String(), Tree: hashStr(res.Tree), Branch: branch, Conflicts: res.Conflicts}
	if out.Conflicts == nil {
		out.Conflicts = []merge.Conflict{}
	}
	return out
}

func hashStr(h gitobj.Hash) string {
	if h.IsZero() {
		return ""
	}
	return h.String()
}

// materialize re-resolves ours every round (never trusting an earlier
// preflight), writes a fast-forward or a merge commit, and moves the branch
// by compare-and-swap; if the branch moved meanwhile it recomputes, at most
// MergeRetries times.
func (s *Service) materialize(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, req MergeRequest, theirs gitobj.Hash,
	why Reason) (*MergeResponse, error) {
	if why.Start.IsZero() {
		why.Start = s.now()
	}
	start := why.Start
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	markers := req.OnConflict == "markers"
	policy := noRetry
	if req.ExpectOID == "" {
		policy = retryPolicy{attempts: s.cfg.MergeRetries + 1} // ours moved: recompute on top of it
	}
	var final *MergeResponse
	err = s.retryMoves(ctx, policy, func(attempt int) error {
		final = nil
		ours, err := s.branchTip(ctx, r, req.Ours)
		if err != nil {
			return err
		}
		if err := expect(r, branchRef(req.Ours), req.ExpectOID, ours.String()); err != nil {
			return err
		}
		ov := merge.NewOverlay(n.Objects())
		opts := s.withCaches(s.mergeOptions(req, markers), r.Network)
		res, err := merge.Merge(ctx, ov, ours, theirs, opts)
		if err != nil {
			return err
		}
		out := response(res, ours, theirs, req.Ours)
		out.Retries = attempt
		if res.UpToDate {
			out.Commit = ours.String()
			out.DurationMS = ms(s.now().Sub(start))
			final = out
			return nil
		}
		if !res.Clean {
			if markers {
				final, err = s.writeMarkers(ctx, actor, r, n, ov, req, res, out, ours, theirs, start)
				return err
			}
			cerr := lockstep.Errorf(lockstep.EMERGECONFLICT, "merging %s into %s: %d conflicting paths", req.Theirs, req.Ours, len(res.Conflicts)).
				WithDetails(map[string]any{"conflicts": res.Conflicts, "merge_base": hashStr(res.MergeBase), "ours": ours.String(), "theirs": theirs.String()})
			s.logMergeConflict(ctx, actor, r, why.Op, req, res, start, cerr)
			return cerr
		}
		mode := req.Mode
		if mode == "" {
			mode = "merge"
		}
		var newTip gitobj.Hash
		var stats gitobj.WriteStats
		switch {
		case res.FastForward && mode != "squash":
			newTip = theirs
		case mode == "fast_forward":
			return lockstep.Errorf(lockstep.EINVALID, "%s cannot be fast-forwarded to %s: the histories diverged (use mode merge or squash)", req.Ours, req.Theirs)
		default:
			parents := []gitobj.Hash{ours, theirs}
			msg := req.Message
			if msg == "" {
				msg = fmt.Sprintf("Merge %s into %s", req.Theirs, req.Ours)
			}
			if mode == "squash" {
				parents = []gitobj.Hash{ours}
				if req.Message == "" {
					msg = fmt.Sprintf("Squash %s into %s", req.Theirs, req.Ours)
				}
			}
			commit := s.encodeCommit(actor, res.Tree, parents, msg)
			objs := append(ov.Objects(), commit)
			stats, err = n.WriteObjects(objs)
			if err != nil {
				return err
			}
			s.afterWrite(r.Network, n)
			newTip = commit.Hash()
		}
		d := copyDetails(why.Details)
		if d == nil {
			d = map[string]any{}
		}
		d["theirs"], d["theirs_oid"], d["mode"], d["fast_forward"], d["retries"] = req.Theirs, theirs.String(), mode, newTip == theirs, attempt
		out.Commit = newTip.String()
		out.FastForward = newTip == theirs
		out.DurationMS = ms(s.now().Sub(start))
		move := why
		move.Details = d
		m := branchMove(actor, r, req.Ours, ours.String(), newTip.String(), res.Tree.String(), stats, move)
		m.Answer = out
		if err := s.move(ctx, m); err != nil {
			return err
		}
		out.Commit = newTip.String()
		out.FastForward = newTip == theirs
		out.DurationMS = ms(s.now().Sub(start))
		final = out
		return nil
	})
	if err != nil {
		return nil, err
	}
	return final, nil
}

func (s *Service) encodeCommit(actor *lockstep.Key, tree gitobj.Hash, parents []gitobj.Hash, msg string) gitobj.EncodedObject {
	sig := gitobj.Signature{Name: actor.Name, Email: actor.Name + "@lockstep.local", When: s.now()}
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	return gitobj.EncodeCommit(gitobj.CommitSpec{Tree: tree, Parents: parents, Author: sig, Committer: sig, Message: msg})
}

// writeMarkers stores the conflicted merge (files with diff3 markers) as a
// two-parent commit on the side branch conflicts/<ours>, so an agent can
// check it out, fix the markers and push.
func (s *Service) writeMarkers(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, n ObjectStore, ov *merge.Overlay,
	req MergeRequest, res *merge.Result, out *MergeResponse, ours, theirs gitobj.Hash, start time.Time) (*MergeResponse, error) {
	side := "conflicts/" + req.Ours
	if err := lockstep.ValidateBranch(side); err != nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "on_conflict=markers: the side branch %s is not a valid branch name (%s)", side, lockstep.ErrorMessage(err))
	}
	var paths []string
	for _, c := range res.Conflicts {
		paths = append(paths, c.Path)
	}
	msg := fmt.Sprintf("Merge %s into %s (with conflict markers)\n\nConflicts:\n\t%s", req.Theirs, req.Ours, strings.Join(paths, "\n\t"))
	commit := s.encodeCommit(actor, res.Tree, []gitobj.Hash{ours, theirs}, msg)
	stats, err := n.WriteObjects(append(ov.Objects(), commit))
	if err != nil {
		return nil, err
	}
	old := lockstep.ZeroOID
	if ref, err := s.store.Ref(ctx, r.ID, branchRef(side)); err == nil {
		old = ref.OID
	}
	d := map[string]any{"theirs": req.Theirs, "theirs_oid": theirs.String(), "conflicts": len(res.Conflicts), "markers_for": req.Ours}
	out.Commit = commit.Hash().String()
	out.SideRef = branchRef(side)
	out.DurationMS = ms(s.now().Sub(start))
	why := Reason{Op: "merge.markers", Start: start, Details: d}
	m := branchMove(actor, r, side, old, commit.Hash().String(), res.Tree.String(), stats, why)
	m.Answer = out
	if err := s.move(ctx, m); err != nil {
		return nil, err
	}
	out.Commit = commit.Hash().String()
	out.SideRef = branchRef(side)
	out.DurationMS = ms(s.now().Sub(start))
	return out, nil
}

func (s *Service) logMergeConflict(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, op string, req MergeRequest, res *merge.Result, start time.Time, cerr error) {
	var paths []string
	for _, c := range res.Conflicts {
		paths = append(paths, c.Kind+":"+c.Path)
	}
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: op, Result: lockstep.EMERGECONFLICT, Repo: r.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(start).Microseconds(), Details: map[string]any{"ours": req.Ours, "theirs": req.Theirs, "conflicts": paths}, Answer: cerr}
	if err := s.store.AppendOp(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "log merge conflict", "error", err)
	}
}
