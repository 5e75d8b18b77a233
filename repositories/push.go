package repositories

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// WriteOptions are the compare-and-swap rules of every branch write
// (push, rollback, merge, sync, git push).
type WriteOptions struct {
	Branch string
	// ExpectOID is the value the branch must have: "" when not given,
	// ZeroOID for "must not exist yet".
	ExpectOID string
	// Force allows a write to an existing branch without ExpectOID.
	Force bool
	// Message is the commit message.
	Message string
	// Author overrides the commit author ("Name <email>"); the committer is
	// always the key.
	Author string
	// AllowEmpty creates a commit even when the tree did not change.
	AllowEmpty bool
	// From starts a branch that does not exist yet from this revision (its
	// first commit gets it as parent, so later merges have a base);
	// ignored when the branch exists. Empty: the default branch's tip (a
	// root commit when the default branch does not exist yet, or is the
	// branch being created).
	From string
}

// PushResult is the answer to a push or rollback.
type PushResult struct {
	Commit         string  `json:"commit"`
	Tree           string  `json:"tree"`
	Parent         string  `json:"parent,omitempty"`
	Branch         string  `json:"branch"`
	Changed        bool    `json:"changed"`
	ObjectsWritten int     `json:"objects_written"`
	BytesWritten   int64   `json:"bytes_written"`
	DurationMS     float64 `json:"duration_ms"`
	// Compensations, on a rollback of a base, are the released effects of
	// the promoted commits it undid that have a compensation to run,
	// newest first.
	Compensations []lockstep.CompensationOffer `json:"compensations,omitempty"`
}

// PushTar ingests a tar (or tar.gz) worktree and commits it onto a branch
// under the compare-and-swap rules. Objects are written before the ref
// moves. Errors: invalid_argument / too_large for bad uploads,
// precondition_required, ref_conflict, permission_denied, not_found.
func (s *Service) PushTar(ctx context.Context, actor *lockstep.Key, repoName string, body io.Reader, opts WriteOptions) (*PushResult, error) {
	start := s.now()
	r, n, err := s.writeTarget(ctx, actor, repoName, &opts)
	if err != nil {
		return nil, err
	}
	// Refuse a stale expectation before reading a large body.
	if _, err := s.checkExpect(ctx, r, opts); err != nil {
		return nil, s.logFailure(ctx, actor, r, "push", opts.Branch, start, err)
	}
	in, err := n.IngestTar(ctx, body, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	stats, err := n.WriteObjects(in.Objects)
	in.Close() // the large files are in the pack now
	if err != nil {
		return nil, fmt.Errorf("write objects: %w", err)
	}
	s.afterWrite(r.Network, n)
	return s.commitTree(ctx, actor, r, in.Tree, stats, opts, Reason{Op: "push", Start: start})
}

// PushTree commits a tree the network already has (uploaded before with
// UploadPack: the CLI's incremental push) onto a branch.
func (s *Service) PushTree(ctx context.Context, actor *lockstep.Key, repoName, tree string, opts WriteOptions) (*PushResult, error) {
	start := s.now()
	r, n, err := s.writeTarget(ctx, actor, repoName, &opts)
	if err != nil {
		return nil, err
	}
	if err := lockstep.ValidateOID("tree", tree); err != nil {
		return nil, err
	}
	// Only the tree itself: an uploaded tree's closure was checked when
	// its pack was received. Any other error than a miss is reported as
	// it is, not as a missing tree.
	notFound := lockstep.Errorf(lockstep.ENOTFOUND, "tree %s not found: upload its objects first", tree)
	if _, err := n.Objects().EncodedObject(gitobj.TreeObject, gitobj.NewHash(tree)); err != nil {
		if errors.Is(err, gitobj.ErrObjectNotFound) {
			return nil, notFound
		}
		return nil, fmt.Errorf("read tree %s: %w", tree, err)
	}
	// A scoped key names only a tree its repository's tips hold or that
	// it uploaded itself (scoped.go): another workspace's tree is
	// missing to it.
	p, err := s.presentFor(ctx, n, r)
	if err != nil {
		return nil, err
	}
	if !p.has(gitobj.NewHash(tree)) {
		return nil, notFound
	}
	// The tree's closure was checked when its pack was received, in an
	// earlier request: an object GC since may have dropped an object the
	// upload found stored. Check it again (only what differs from the
	// branch's tree), now that the ref move is refused if a GC commits
	// after this request began.
	var base gitobj.Hash
	if tip, err := s.branchTip(ctx, r, opts.Branch); err == nil {
		if ci, err := n.Commit(tip); err == nil {
			base = ci.Tree
		}
	}
	if err := n.CheckClosure(gitobj.NewHash(tree), base); err != nil {
		return nil, err
	}
	return s.commitTree(ctx, actor, r, gitobj.NewHash(tree), gitobj.WriteStats{}, opts, Reason{Op: "push", Start: start})
}

// Missing returns which of oids the repository's network lacks.
func (s *Service) Missing(ctx context.Context, actor *lockstep.Key, repoName string, oids []string) ([]string, error) {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, err
	}
	if err := writable(actor, r); err != nil {
		return nil, err
	}
	if len(oids) > 100_000 {
		return nil, lockstep.Errorf(lockstep.ETOOLARGE, "at most 100000 oids per request")
	}
	hs := make([]gitobj.Hash, len(oids))
	for i, o := range oids {
		if err := lockstep.ValidateOID("oid", o); err != nil {
			return nil, err
		}
		hs[i] = gitobj.NewHash(o)
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	out := []string{}
	p, err := s.presentFor(ctx, n, r)
	if err != nil {
		return nil, err
	}
	if p != nil {
		// A scoped key learns only what its repository holds
		// (scoped.go): an object stored for another workspace is
		// missing to it, and it uploads it like any other.
		seen := make(map[gitobj.Hash]bool, len(hs))
		for _, h := range hs {
			if !seen[h] && !p.has(h) {
				out = append(out, h.String())
			}
			seen[h] = true
		}
		return out, nil
	}
	for _, h := range n.Missing(hs) {
		out = append(out, h.String())
	}
	return out, nil
}

// UploadPack stores a client-built packfile after validating every object
// and logs it (op objects.upload, the objects and bytes it stored).
func (s *Service) UploadPack(ctx context.Context, actor *lockstep.Key, repoName string, body io.Reader) (gitobj.WriteStats, error) {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return gitobj.WriteStats{}, err
	}
	if err := writable(actor, r); err != nil {
		return gitobj.WriteStats{}, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return gitobj.WriteStats{}, err
	}
	start := s.now()
	p, err := s.presentFor(ctx, n, r)
	if err != nil {
		return gitobj.WriteStats{}, err
	}
	stats, err := s.receivePack(n, p, body, nil)
	s.metrics.ObserveOp("objects.upload", resultOf(err), s.now().Sub(start))
	if err != nil {
		return stats, err
	}
	s.afterWrite(r.Network, n)
	// The upload is its own entry with what it stored (objects already
	// in the network are not counted): the push that later names the tree
	// counts only its commit, so each object and byte is attributed once,
	// also when no push follows or several pushes reuse the objects.
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: "objects.upload", Repo: r.Name, TraceID: traceID(ctx),
		Objects: stats.Objects, Bytes: stats.Bytes, DurationUS: s.now().Sub(start).Microseconds()}
	if g := p.logGrant(stats.Tops); g != nil {
		e.Details = map[string]any{grantedDetail: g}
	}
	if err := s.store.AppendOp(ctx, e); err != nil {
		return gitobj.WriteStats{}, err
	}
	return stats, nil
}

// receivePack stores a pushed pack (objects upload, git push) under the
// rules of every pushed pack: a key that is not scoped may name any
// stored object without sending it; a scoped key only those present for
// r (p: presentFor's, nil for other keys), and the trees and commits it
// sent are granted to r.
// sent, when set, is called with each object of the pack.
func (s *Service) receivePack(n ObjectStore, p *presence, body io.Reader, sent func(gitobj.Hash, gitobj.ObjectType)) (gitobj.WriteStats, error) {
	if p == nil {
		return n.ReceivePack(body, s.cfg.Limits)
	}
	return n.ReceivePackFor(body, s.cfg.Limits, gitobj.ReceiveOptions{Present: p.present(), Sent: func(h gitobj.Hash, t gitobj.ObjectType) {
		p.grant(h, t)
		if sent != nil {
			sent(h, t)
		}
	}})
}

// writeTarget loads the repository and checks the caller may write it.
func (s *Service) writeTarget(ctx context.Context, actor *lockstep.Key, repoName string, opts *WriteOptions) (*lockstep.Repo, ObjectStore, error) {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, nil, err
	}
	if err := writable(actor, r); err != nil {
		return nil, nil, err
	}
	if opts.Branch == "" {
		opts.Branch = r.DefaultBranch
	}
	if err := lockstep.ValidateBranch(opts.Branch); err != nil {
		return nil, nil, err
	}
	if opts.ExpectOID != "" {
		if err := lockstep.ValidateOID("expect_oid", opts.ExpectOID); err != nil {
			return nil, nil, err
		}
	}
	if opts.Author != "" {
		if _, err := parseAuthor(opts.Author); err != nil {
			return nil, nil, err
		}
	}
	n, err := s.network(ctx, r.Network)
	return r, n, err
}

// checkExpect returns the branch's current oid (ZeroOID if absent) after
// applying the contract: a stale expect_oid is ref_conflict; no expect_oid
// on an existing branch is precondition_required unless forced.
func (s *Service) checkExpect(ctx context.Context, r *lockstep.Repo, opts WriteOptions) (string, error) {
	cur := lockstep.ZeroOID
	ref, err := s.store.Ref(ctx, r.ID, branchRef(opts.Branch))
	switch {
	case err == nil:
		cur = ref.OID
	case lockstep.ErrorCode(err) != lockstep.ENOTFOUND:
		return "", err
	}
	if cur == lockstep.ZeroOID {
		// A new branch: refuse a file/directory clash before a large body
		// is read (the store checks again, atomically, when the ref moves).
		if err := s.checkRefClash(ctx, r, branchRef(opts.Branch)); err != nil {
			return "", err
		}
	}
	if opts.ExpectOID == "" {
		if cur != lockstep.ZeroOID && !opts.Force {
			return "", lockstep.Errorf(lockstep.EPRECONDITION, "branch %s exists: send expect_oid=%s (its current value) or force=true", opts.Branch, cur).
				WithDetails(map[string]any{"ref": branchRef(opts.Branch), "actual": cur})
		}
		return cur, nil
	}
	return cur, expect(r, branchRef(opts.Branch), opts.ExpectOID, cur)
}

// checkRefClash returns ref_conflict when creating ref would clash with an
// existing ref of r (git's file/directory rule: "a" and "a/b").
func (s *Service) checkRefClash(ctx context.Context, r *lockstep.Repo, ref string) error {
	refs, err := s.store.Refs(ctx, r.ID)
	if err != nil {
		return err
	}
	for _, other := range refs {
		if lockstep.RefsClash(ref, other.Name) {
			return lockstep.RefNameConflict(r.Name, ref, other.Name)
		}
	}
	return nil
}

// commitTree makes a commit of tree on top of the branch and moves the
// branch (why.Op names the operation). Forced writes without expect_oid
// are recomputed when the branch moves under them (forcedPushAttempts).
func (s *Service) commitTree(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, tree gitobj.Hash,
	stats gitobj.WriteStats, opts WriteOptions, why Reason) (*PushResult, error) {
	// The operation started before the objects were written (a tar push
	// ingests first): its duration_ms and log entry count from there.
	if why.Start.IsZero() {
		why.Start = s.now()
	}
	t0 := why.Start
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, err
	}
	policy := noRetry
	if opts.Force && opts.ExpectOID == "" {
		policy = retryPolicy{attempts: forcedPushAttempts}
	}
	var res *PushResult
	err = s.retryMoves(ctx, policy, func(int) error {
		res = nil
		cur, err := s.checkExpect(ctx, r, opts)
		if err != nil {
			return s.logFailure(ctx, actor, r, why.Op, opts.Branch, t0, err)
		}
		var parents []gitobj.Hash
		parent := cur
		if cur == lockstep.ZeroOID {
			from := opts.From
			if from == "" && opts.Branch != r.DefaultBranch {
				if tip, err := s.branchTip(ctx, r, r.DefaultBranch); err == nil {
					from = tip.String()
				}
			}
			if from != "" {
				h, err := s.Resolve(ctx, r, from)
				if err != nil {
					return err
				}
				parent = h.String()
			}
		}
		if parent != lockstep.ZeroOID {
			p := gitobj.NewHash(parent)
			parents = []gitobj.Hash{p}
			pc, err := n.Commit(p)
			if err != nil {
				return err
			}
			if pc.Tree == tree && !opts.AllowEmpty && parent == cur {
				res = &PushResult{Commit: cur, Tree: tree.String(), Parent: cur, Branch: opts.Branch, Changed: false,
					ObjectsWritten: stats.Objects, BytesWritten: stats.Bytes, DurationMS: ms(s.now().Sub(t0))}
				return nil
			}
		}
		msg := opts.Message
		if msg == "" {
			msg = fmt.Sprintf("%s by %s", why.Op, actor.Name)
		}
		commit, cstats, err := s.writeCommit(n, actor, tree, parents, msg, opts.Author)
		if err != nil {
			return err
		}
		total := stats
		total.Add(cstats)
		out := &PushResult{Commit: commit.String(), Tree: tree.String(), Parent: strings.TrimPrefix(parent, lockstep.ZeroOID),
			Branch: opts.Branch, Changed: true, ObjectsWritten: total.Objects, BytesWritten: total.Bytes}
		out.DurationMS = ms(s.now().Sub(t0))
		m := branchMove(actor, r, opts.Branch, cur, commit.String(), tree.String(), total, why)
		m.Answer = out // the answer, stored with the commit under an Idempotency-Key
		if err := s.move(ctx, m); err != nil {
			return err
		}
		out.DurationMS = ms(s.now().Sub(t0))
		res = out
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// forcedPushAttempts bounds the tries of a forced push (no expect_oid)
// whose branch keeps moving under it.
const forcedPushAttempts = 6

// writeCommit writes one commit authored by opts.Author or the key.
func (s *Service) writeCommit(n gitobj.Writer, actor *lockstep.Key, tree gitobj.Hash, parents []gitobj.Hash, msg, author string) (gitobj.Hash, gitobj.WriteStats, error) {
	when := s.now()
	committer := gitobj.Signature{Name: actor.Name, Email: actor.Name + "@lockstep.local", When: when}
	a := committer
	if author != "" {
		sig, err := parseAuthor(author)
		if err != nil {
			return gitobj.ZeroHash, gitobj.WriteStats{}, err
		}
		a = sig
		a.When = when
	}
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	return n.WriteCommit(gitobj.CommitSpec{Tree: tree, Parents: parents, Author: a, Committer: committer, Message: msg})
}

// checkLanding refuses (invalid_argument) to move a branch to a commit
// whose tree breaks the content rules every upload obeys
// (gitstore.Network.CheckRootTree: names, .gitmodules, .gitattributes,
// symlinks; cached per tree). New trees were checked when written; this
// catches a commit already stored that predates the rules, on the paths
// that write no tree of their own (a fast-forward merge or promote, a
// branch created at an existing commit).
func (s *Service) checkLanding(ctx context.Context, r *lockstep.Repo, commit string) error {
	if commit == lockstep.ZeroOID || commit == "" {
		return nil
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return err
	}
	ci, err := n.Commit(gitobj.NewHash(commit))
	if err != nil {
		return err
	}
	if err := n.CheckRootTree(ci.Tree); err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "commit %s: %s", commit, lockstep.ErrorMessage(err))
	}
	return nil
}

// logFailure records a refused write (a lost CAS race, a missing
// expect_oid) in the operations log so reviewers see it, and returns err.
func (s *Service) logFailure(ctx context.Context, actor *lockstep.Key, r *lockstep.Repo, op, branch string, t0 time.Time, err error) error {
	code := lockstep.ErrorCode(err)
	if code != lockstep.EREFCONFLICT && code != lockstep.EPRECONDITION {
		return err
	}
	e := &lockstep.OpEntry{KeyID: actor.ID, KeyName: actor.Name, Op: op, Result: code, Repo: r.Name, TraceID: traceID(ctx),
		DurationUS: s.now().Sub(t0).Microseconds(),
		Details:    map[string]any{"branch": branch, "error": lockstep.ErrorMessage(err)}, Answer: err}
	if aerr := s.store.AppendOp(ctx, e); aerr != nil {
		s.log.ErrorContext(ctx, "log refused write", "error", aerr)
	}
	return err
}

func parseAuthor(a string) (gitobj.Signature, error) {
	addr, err := mail.ParseAddress(a)
	if err != nil || addr.Name == "" {
		return gitobj.Signature{}, lockstep.Errorf(lockstep.EINVALID, "author %q: want \"Name <email>\"", a)
	}
	return gitobj.Signature{Name: addr.Name, Email: addr.Address}, nil
}

func resultOf(err error) string {
	if err == nil {
		return "ok"
	}
	return lockstep.ErrorCode(err)
}
