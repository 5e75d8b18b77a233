package repositories

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// RefCommand is one ref update of a `git push`: the client's old value is
// a compare-and-swap expectation, never ignored.
type RefCommand struct {
	Ref string
	Old string
	New string
}

// RefResult is the outcome of one RefCommand; Err is nil when it applied.
type RefResult struct {
	Ref string
	Err error
}

// CanPush reports whether actor may push to the repository at all (checked
// before the client uploads anything): CanWrite. A workspace that is no
// longer active is refused per ref by GitPush instead, so that git prints
// the reason beside each ref.
func (s *Service) CanPush(ctx context.Context, actor *lockstep.Key, repoName string) error {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return err
	}
	return CanWrite(actor, r)
}

// GitPush applies a `git push`: every command is first checked for what
// needs no object (the caller may move the repository's refs, the
// repository is active, the ref is a valid branch or tag name); when none
// can apply (or, with atomic, one cannot) the pack is not read, so a
// refused push leaves nothing behind. Otherwise the pack is validated and
// stored (the same path rules as every upload), then each command moves
// its ref by compare-and-swap against the client's old oid, with an
// operations-log entry. With atomic, all commands apply or none does.
// unpackErr is non-nil when the pack was refused (then no ref moves).
// Refusals are per command (results[i].Err); err is returned only for a
// missing repository or a failure of the store.
//
// Branches (refs/heads/*) and tags (refs/tags/*, lightweight or
// annotated) can be pushed, created, moved and deleted under the same
// rule; git's client refuses to move an existing tag unless forced, the
// server checks the old value like for any ref. A push whose commands
// all apply is one transaction and one operations-log entry (atomic or
// not); when a command of a non-atomic push is refused, the others are
// applied one by one, an entry each, and the pack's object and byte
// counts are on the first entry that moved a ref only (0 on the others),
// so summing entries counts the pack once.
func (s *Service) GitPush(ctx context.Context, actor *lockstep.Key, repoName string, cmds []RefCommand, atomic bool, pack io.Reader) (unpackErr error, results []RefResult, err error) {
	start := s.now()
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return nil, nil, err
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		return nil, nil, err
	}
	results = make([]RefResult, len(cmds))
	for i, c := range cmds {
		results[i].Ref = c.Ref
	}
	refuseRest := func(why error) {
		for i := range results {
			if results[i].Err == nil {
				results[i].Err = why
			}
		}
	}
	// Refusals that need no object come before the pack is read.
	if err := writable(actor, r); err != nil {
		refuseRest(err)
		return nil, results, nil
	}
	ok := 0
	named := make(map[string]bool, len(cmds))
	for i, c := range cmds {
		if named[c.Ref] {
			// git's ref transaction refuses it; applied, the report
			// (matched by ref name) would say the wrong command moved.
			results[i].Err = lockstep.Errorf(lockstep.EINVALID, "multiple updates for ref '%s' not allowed", c.Ref)
			continue
		}
		named[c.Ref] = true
		if err := checkGitRef(r, c); err != nil {
			results[i].Err = err
		} else {
			ok++
		}
	}
	if ok == 0 {
		return nil, results, nil
	}
	if atomic && ok < len(cmds) {
		refuseRest(lockstep.Errorf(lockstep.EINVALID, "atomic push failed"))
		return nil, results, nil
	}
	var stats gitobj.WriteStats
	present, err := s.presentFor(ctx, n, r)
	if err != nil {
		return nil, nil, err
	}
	sent := map[gitobj.Hash]bool{}
	if pack != nil {
		stats, unpackErr = s.receivePack(n, present, pack, func(h gitobj.Hash, _ gitobj.ObjectType) { sent[h] = true })
		if unpackErr != nil {
			for i := range results {
				results[i].Err = lockstep.Errorf(lockstep.EINVALID, "unpacker error")
			}
			return unpackErr, results, nil
		}
		s.afterWrite(r.Network, n)
	}
	var updates []refUpdate
	peeled := map[gitobj.Hash]gitobj.Hash{}
	for i, c := range cmds {
		if results[i].Err != nil {
			continue
		}
		// A scoped key's ref names what it sent or what r holds
		// (scoped.go), refused as an object not stored otherwise.
		if h := gitobj.NewHash(c.New); c.New != lockstep.ZeroOID && present != nil && !sent[h] && !present.has(h) {
			results[i].Err = lockstep.Errorf(lockstep.EINVALID, "%s is not a commit in this repository", c.New)
			if strings.HasPrefix(c.Ref, "refs/tags/") {
				results[i].Err = lockstep.Errorf(lockstep.EINVALID, "%s is not an object in this repository", c.New)
			}
			continue
		}
		commit, tree, err := checkGitObject(n, c, peeled)
		if err != nil {
			results[i].Err = err
			continue
		}
		updates = append(updates, refUpdate{Ref: c.Ref, Old: c.Old, New: c.New, Commit: commit, Tree: tree})
	}
	if atomic && len(updates) < len(cmds) {
		refuseRest(lockstep.Errorf(lockstep.EINVALID, "atomic push failed"))
		return nil, results, nil
	}
	// A non-atomic push records the pack on its first entry.
	push := refMove{Reason: Reason{Op: "git.push", Start: start}, Actor: actor, Repo: r, Stats: stats, Checked: true}
	apply := func(ups []refUpdate, whole bool) error {
		m := push
		m.Updates = ups
		// (A refused first try of a whole non-atomic push is not an
		// operation: it goes on ref by ref.)
		m.Tentative = whole && !atomic
		err := s.move(ctx, m)
		if err == nil {
			push.Stats = gitobj.WriteStats{}
		}
		return err
	}
	setErr := func(ref string, err error) {
		for i := range results {
			if results[i].Ref == ref && results[i].Err == nil {
				results[i].Err = err
			}
		}
	}
	if atomic {
		if err := apply(updates, true); err != nil {
			if !refusal(err) {
				return nil, nil, err
			}
			// The ref that failed gets the reason; the others of the
			// push only failed with it (git: "atomic transaction failed").
			failed := ""
			if m, ok := lockstep.AsRefMismatch(err); ok {
				failed = m.Ref
			}
			named := false
			for _, u := range updates {
				named = named || u.Ref == failed
			}
			for _, u := range updates {
				if named && u.Ref != failed {
					setErr(u.Ref, lockstep.Errorf(lockstep.EINVALID, "atomic push failed"))
				} else {
					setErr(u.Ref, err)
				}
			}
			return nil, results, nil
		}
	} else if err := apply(updates, true); err != nil {
		// Every command at once first (one transaction: a push of many
		// refs costs one commit, not one per ref); when one is refused
		// (a lost compare-and-swap), nothing moved, and each ref is
		// applied on its own, as git's non-atomic push does.
		if !refusal(err) {
			return nil, nil, err
		}
		for i, u := range updates {
			if err := apply(updates[i:i+1], false); err != nil {
				if !refusal(err) {
					return nil, nil, err
				}
				setErr(u.Ref, err)
			}
		}
	}
	return nil, results, nil
}

// AdvertisedRef is a ref as a fetch advertises it: Peeled is the object
// an annotated tag (chain) points at, "" for any other ref.
type AdvertisedRef struct {
	Name   string
	OID    string
	Peeled string
}

// GitRefs returns what a fetch of repoName advertises, read from the store
// (not the on-disk mirror, whose scan grows with the fork network): the
// refs in git's order (bytewise by name) with annotated tags peeled, and
// head, the default branch's full name when that branch exists ("" when
// HEAD is unborn). Returns not_found for an unknown repository.
func (s *Service) GitRefs(ctx context.Context, repoName string) (head string, refs []AdvertisedRef, err error) {
	r, err := s.Repo(ctx, repoName)
	if err != nil {
		return "", nil, err
	}
	stored, err := s.store.Refs(ctx, r.ID)
	if err != nil {
		return "", nil, err
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].Name < stored[j].Name })
	s.problemsMu.Lock()
	skip := map[string]bool{}
	for _, p := range s.problems {
		if p.Repo == r.Name {
			skip[p.Ref] = true
		}
	}
	s.problemsMu.Unlock()
	var n ObjectStore
	kept := map[string]bool{}
	peeled := map[gitobj.Hash]gitobj.Hash{} // tag → the end of its chain, for this answer
	refs = make([]AdvertisedRef, 0, len(stored))
	for _, ref := range stored {
		// What the on-disk mirror could not hold (a name git refuses, the
		// second of "a" and "a/b", which older servers let in) is not
		// advertised either: git clients would refuse the whole list.
		if skip[ref.Name] || gitobj.CheckRefName(ref.Name) != nil || underKept(kept, ref.Name) {
			continue
		}
		kept[ref.Name] = true
		a := AdvertisedRef{Name: ref.Name, OID: ref.OID}
		if strings.HasPrefix(ref.Name, "refs/tags/") {
			if n == nil {
				if n, err = s.Network(r.Network); err != nil {
					return "", nil, err
				}
			}
			if h, tag := peelTagsMemo(n, gitobj.NewHash(ref.OID), peeled); tag {
				a.Peeled = h.String()
			}
		}
		if ref.Name == branchRef(r.DefaultBranch) {
			head = ref.Name
		}
		refs = append(refs, a)
	}
	return head, refs, nil
}

// underKept reports whether a path prefix of ref ("a" of "a/b") is kept.
func underKept(kept map[string]bool, ref string) bool {
	for i := range len(ref) {
		if ref[i] == '/' && kept[ref[:i]] {
			return true
		}
	}
	return false
}

// refusal reports whether a store error refuses the command (a lost
// compare-and-swap, a file/directory clash, a workspace whose status
// changed since the check) rather than failing the request.
func refusal(err error) bool {
	switch lockstep.ErrorCode(err) {
	case lockstep.EREFCONFLICT, lockstep.EINVALID, lockstep.EFORBIDDEN:
		return true
	}
	return false
}

// maxTagChain bounds peelTagsMemo. git peels a chain of tags to its end
// whatever its length; a chain is at least as many objects as it is deep
// (no tag can name itself), so the bound only stops a pathological one.
const maxTagChain = 100000

// peelTagsMemo follows h through annotated tags to the first object that is
// not a tag, as git peels a ref ("^{}"); tag is false when h is not an
// annotated tag (then h is returned).
//
// peelTagsMemo remembers in memo (when not nil) the end of
// the chain of every tag it walked through, so that many refs naming tags
// of one long chain cost one walk of it, not one each.
func peelTagsMemo(n gitobj.Reader, h gitobj.Hash, memo map[gitobj.Hash]gitobj.Hash) (peeled gitobj.Hash, tag bool) {
	var walked []gitobj.Hash
	for range maxTagChain {
		if end, ok := memo[h]; ok {
			h, tag = end, true
			break
		}
		target, err := gitobj.TagTarget(n.Objects(), h)
		if err != nil {
			break
		}
		walked = append(walked, h)
		h, tag = target, true
	}
	if memo != nil {
		for _, w := range walked {
			memo[w] = h
		}
	}
	return h, tag
}

// checkGitRef validates what one pushed ref update says, before any
// object is read: a branch or tag name git accepts, well-formed oids, not
// a delete of the default branch.
func checkGitRef(r *lockstep.Repo, c RefCommand) error {
	switch {
	case strings.HasPrefix(c.Ref, "refs/heads/"):
		if err := lockstep.ValidateBranch(strings.TrimPrefix(c.Ref, "refs/heads/")); err != nil {
			return err
		}
	case strings.HasPrefix(c.Ref, "refs/tags/"):
		if err := validateTag(strings.TrimPrefix(c.Ref, "refs/tags/")); err != nil {
			return err
		}
	default:
		return lockstep.Errorf(lockstep.EINVALID, "only branches (refs/heads/*) and tags (refs/tags/*) can be pushed")
	}
	if !lockstep.IsOID(c.Old) || !lockstep.IsOID(c.New) {
		return lockstep.Errorf(lockstep.EINVALID, "malformed command")
	}
	if c.New == lockstep.ZeroOID && c.Ref == branchRef(r.DefaultBranch) {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "the default branch cannot be deleted")
	}
	return nil
}

// validateTag checks a tag name with git's check-ref-format rules for
// refs/tags/<name>, the length bound of branch names, and printable
// characters only.
func validateTag(name string) error {
	bad := func(why string) error {
		return lockstep.Errorf(lockstep.EINVALID, "invalid tag name %q: %s", name, why).WithDetails(map[string]any{"tag": name, "reason": why})
	}
	switch {
	case name == "":
		return bad("empty")
	case len(name) > lockstep.MaxBranchBytes:
		return bad(fmt.Sprintf("longer than %d bytes", lockstep.MaxBranchBytes))
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	}
	if err := lockstep.CheckRefFormat("refs/tags/" + name); err != nil {
		return bad(strings.TrimPrefix(lockstep.ErrorMessage(err), fmt.Sprintf("invalid ref name %q: ", "refs/tags/"+name)))
	}
	for _, c := range name {
		if c >= utf8.RuneSelf && !unicode.IsPrint(c) {
			return bad(fmt.Sprintf("character %U is not printable", c))
		}
	}
	return nil
}

// checkGitObject checks that a pushed ref's new value is stored: a branch
// names a commit whose tree and parents exist, a tag any stored object
// (a tag object's target was checked when its pack was received). It
// returns the commit the new value names (itself, or the commit an
// annotated tag chain points at) and that commit's tree, "" when it is
// not a commit or the ref is deleted: the one read of the commit serves
// the check and the ref update (memo as for peelTagsMemo).
func checkGitObject(n gitobj.Reader, c RefCommand, memo map[gitobj.Hash]gitobj.Hash) (commit, tree string, err error) {
	if c.New == lockstep.ZeroOID {
		return "", "", nil
	}
	h := gitobj.NewHash(c.New)
	var ci *gitobj.CommitInfo
	if strings.HasPrefix(c.Ref, "refs/tags/") {
		if !n.Has(h) {
			return "", "", lockstep.Errorf(lockstep.EINVALID, "%s is not an object in this repository", c.New)
		}
		peeled, _ := peelTagsMemo(n, h, memo)
		if ci, err = n.Commit(peeled); err == nil {
			h = peeled // a commit, checked below
		} else if rootTreeStored(n, peeled) {
			// A tagged tree may be checked out as a root, as a commit's.
			return "", "", n.CheckRootTree(peeled)
		} else {
			return "", "", nil // a blob
		}
	} else if ci, err = n.Commit(h); err != nil {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "%s is not a commit in this repository", c.New)
	}
	if !rootTreeStored(n, ci.Tree) {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "commit %s has no tree %s", c.New, ci.Tree)
	}
	// The content rules of every upload (see checkLanding): a commit
	// stored before them is refused as a new one would be.
	if err := n.CheckRootTree(ci.Tree); err != nil {
		return "", "", lockstep.Errorf(lockstep.EINVALID, "commit %s: %s", c.New, lockstep.ErrorMessage(err))
	}
	for _, p := range ci.Parents {
		if !n.Has(p) {
			return "", "", lockstep.Errorf(lockstep.EINVALID, "commit %s: parent %s missing", c.New, p)
		}
	}
	return h.String(), ci.Tree.String(), nil
}

// rootTreeStored reports whether h is a stored tree whose files (the
// blobs its own entries name) are stored, what TreeEntries(h, "") checked
// here before, without reading each blob's size as TreeEntries does: for
// each of the 1,000s of refs of a full-history push.
func rootTreeStored(n gitobj.Reader, h gitobj.Hash) bool {
	obj, err := n.Objects().EncodedObject(gitobj.TreeObject, h)
	if err != nil {
		return false
	}
	files, err := gitobj.TreeFiles(obj)
	if err != nil {
		return false
	}
	for _, f := range files {
		if !n.Has(f) {
			return false
		}
	}
	return true
}
