package gitstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

// Ref mirror: the metadata database is the source of truth for refs and
// does the compare-and-swap; these functions only copy its decisions to
// disk after its transaction commits, so that the git CLI (upload-pack
// with GIT_NAMESPACE, fsck, log) sees them. Ref files are written as git
// does: "<ref>.lock" created exclusively, fsynced, renamed over the ref.

// namespaceDir returns refs/namespaces/<repo> after checking repo.
func (n *Network) namespaceDir(repo string) (string, error) {
	if err := checkRepoName(repo); err != nil {
		return "", err
	}
	return filepath.Join(n.dir, "refs", "namespaces", repo), nil
}

func checkRepoName(repo string) error {
	if repo == "" || len(repo) > 100 || strings.ContainsAny(repo, "/\\") ||
		repo[0] == '.' || strings.HasSuffix(repo, ".lock") || !isRefComponent(repo) {
		return lockstep.Errorf(lockstep.EINVALID, "invalid repository name %q", repo)
	}
	return nil
}

func isRefComponent(c string) bool {
	if strings.Contains(c, "..") {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if b < 0x20 || b == 0x7f || strings.IndexByte(" ~^:?*[\\", b) >= 0 {
			return false
		}
	}
	return true
}

// MirrorRef sets refs/namespaces/<repo>/<ref> to oid (temp file, fsync,
// rename; never rewritten in place); a zero oid deletes the ref, loose and
// packed. ref is a full name such as "refs/heads/main". It does not check
// that oid exists: callers write objects first. Returns invalid_argument
// for a bad repository or ref name.
func (n *Network) MirrorRef(repo, ref string, oid plumbing.Hash) error {
	err := n.MirrorRefs(repo, []RefValue{{Ref: ref, OID: oid}})
	var me *MirrorError
	if errors.As(err, &me) && len(me.Problems) == 1 {
		return me.Problems[0].Err
	}
	return err
}

// MirrorRefs sets several refs of repo as MirrorRef would one by one, for
// a push that moves many: the loose deletes first (so that "a" can become
// "a/b"), the packed-refs file rewritten once for all of them, then the
// writes in the order given, and the namespace HEAD checked once at the
// end instead of after every ref. A ref it cannot hold (a name git
// refuses, a failed delete or write) is skipped and listed in a
// *MirrorError after the others were written; a bad repository name or a
// failed HEAD update is returned as it is.
func (n *Network) MirrorRefs(repo string, refs []RefValue) error {
	ns, err := n.namespaceDir(repo)
	if err != nil {
		return err
	}
	var problems []RefProblem
	n.refMu.Lock()
	defer n.refMu.Unlock()
	deleted := map[string]bool{}
	for _, rv := range refs {
		if !rv.OID.IsZero() {
			continue
		}
		if err := CheckRefName(rv.Ref); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: rv.Ref, Err: err})
		} else if err := n.deleteLooseRef(ns, rv.Ref); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: rv.Ref, Err: fmt.Errorf("mirror %s %s: %w", repo, rv.Ref, err)})
		} else {
			deleted["refs/namespaces/"+repo+"/"+rv.Ref] = true
		}
	}
	if len(deleted) > 0 {
		if err := n.rewritePackedRefs(func(name string) bool { return !deleted[name] }); err != nil {
			for full := range deleted {
				ref := strings.TrimPrefix(full, "refs/namespaces/"+repo+"/")
				problems = append(problems, RefProblem{Repo: repo, Ref: ref, Err: fmt.Errorf("mirror %s %s: %w", repo, ref, err)})
			}
		}
	}
	for _, rv := range refs {
		if rv.OID.IsZero() {
			continue
		}
		if err := CheckRefName(rv.Ref); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: rv.Ref, Err: err})
		} else if err := n.writeRefFile(filepath.Join(ns, filepath.FromSlash(rv.Ref)), rv.OID.String()+"\n"); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: rv.Ref, Err: fmt.Errorf("mirror %s %s: %w", repo, rv.Ref, err)})
		}
	}
	if err := n.syncHEAD(repo, ns); err != nil {
		return fmt.Errorf("mirror %s HEAD: %w", repo, err)
	}
	if len(problems) > 0 {
		return &MirrorError{Problems: problems}
	}
	return nil
}

// MirrorHEAD makes branch the default branch of repo: the symref
// refs/namespaces/<repo>/HEAD, so that `git upload-pack` run with
// GIT_NAMESPACE=<repo> advertises it and `git clone` checks it out.
//
// git fsck reports a namespaced HEAD that points at a missing branch as an
// error, so the symref exists only while the branch does: the choice is
// remembered in <dir>/lockstep/heads/<repo> and MirrorRef / SyncMirror
// create or remove the symref as the branch appears or goes. Returns
// invalid_argument for a bad repository or branch name.
func (n *Network) MirrorHEAD(repo, branch string) error {
	ns, err := n.namespaceDir(repo)
	if err != nil {
		return err
	}
	ref := "refs/heads/" + branch
	if err := CheckRefName(ref); err != nil {
		return err
	}
	n.refMu.Lock()
	defer n.refMu.Unlock()
	hd := filepath.Join(n.dir, "lockstep", "heads")
	// Written only when it changes: start-up calls this for every
	// repository and must succeed on a full disk.
	if cur, err := os.ReadFile(filepath.Join(hd, repo)); err != nil || string(cur) != ref+"\n" {
		if err := os.MkdirAll(hd, 0o755); err != nil {
			return fmt.Errorf("mirror HEAD of %s: %w", repo, err)
		}
		if err := n.writeFileAtomic(filepath.Join(hd, repo), []byte(ref+"\n")); err != nil {
			return fmt.Errorf("mirror HEAD of %s: %w", repo, diskError(err))
		}
	}
	if err := n.syncHEAD(repo, ns); err != nil {
		return fmt.Errorf("mirror HEAD of %s: %w", repo, err)
	}
	return nil
}

// syncHEAD writes or removes the namespace HEAD symref so that it exists
// exactly when the remembered default branch does. Called with refMu held.
func (n *Network) syncHEAD(repo, ns string) error {
	b, err := os.ReadFile(filepath.Join(n.dir, "lockstep", "heads", repo))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ref := strings.TrimSpace(string(b))
	head := filepath.Join(ns, "HEAD")
	if !n.refExists(ns, "refs/namespaces/"+repo+"/"+ref, ref) {
		if err := os.Remove(head); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	// The symref target is the full, namespaced name: git resolves it
	// without the namespace and strips the prefix when advertising.
	content := "ref: refs/namespaces/" + repo + "/" + ref + "\n"
	if cur, err := os.ReadFile(head); err == nil && string(cur) == content {
		return nil
	}
	return n.writeRefFile(head, content)
}

// refExists reports whether ref (relative to ns; full name given too) is
// a loose ref file or a packed-refs entry.
func (n *Network) refExists(ns, full, ref string) bool {
	if fi, err := os.Stat(filepath.Join(ns, filepath.FromSlash(ref))); err == nil && fi.Mode().IsRegular() {
		return true
	}
	data, err := os.ReadFile(filepath.Join(n.dir, "packed-refs"))
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if _, name, ok := strings.Cut(line, " "); ok && name == full && !strings.HasPrefix(line, "#") {
			return true
		}
	}
	return false
}

// SyncMirror makes the on-disk refs of namespace repo exactly refs (keys
// are full ref names such as "refs/heads/main"; HEAD is left alone, see
// MirrorHEAD): missing or different refs are written, the others deleted,
// including packed-refs entries; nothing is written for a ref already
// right. Use it at start-up to repair the mirror from the database.
//
// One bad ref never stops the others: a name git refuses, a zero oid or a
// write that fails (a ref "a" and a ref "a/b": in name order, the first
// wins) is skipped and reported in a *MirrorError after every other ref
// was synced. Other errors (invalid repository name, unreadable
// directories) are returned as they are.
func (n *Network) SyncMirror(repo string, refs map[string]plumbing.Hash) error {
	ns, err := n.namespaceDir(repo)
	if err != nil {
		return err
	}
	var problems []RefProblem
	want := make(map[string]plumbing.Hash, len(refs))
	for ref, oid := range refs {
		if err := CheckRefName(ref); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: ref, Err: err})
			continue
		}
		if oid.IsZero() {
			problems = append(problems, RefProblem{Repo: repo, Ref: ref, Err: lockstep.Errorf(lockstep.EINVALID, "zero oid")})
			continue
		}
		want[ref] = oid
	}
	n.refMu.Lock()
	defer n.refMu.Unlock()

	loose, err := n.looseRefs(ns)
	if err != nil {
		return fmt.Errorf("sync mirror %s: %w", repo, err)
	}
	// Delete extras first so that a D/F change (refs/heads/a -> refs/heads/a/b)
	// can be written.
	names := make([]string, 0, len(loose))
	for name := range loose {
		names = append(names, name)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, name := range names {
		if _, ok := want[name]; !ok {
			if err := n.deleteLooseRef(ns, name); err != nil {
				return fmt.Errorf("sync mirror %s: %w", repo, err)
			}
		}
	}
	names = names[:0]
	for ref := range want {
		names = append(names, ref)
	}
	sort.Strings(names)
	for _, ref := range names {
		oid := want[ref]
		if loose[ref] == oid.String() {
			continue
		}
		if err := n.writeRefFile(filepath.Join(ns, filepath.FromSlash(ref)), oid.String()+"\n"); err != nil {
			problems = append(problems, RefProblem{Repo: repo, Ref: ref, Err: err})
		}
	}
	prefix := "refs/namespaces/" + repo + "/"
	if err := n.rewritePackedRefs(func(name string) bool { return !strings.HasPrefix(name, prefix) }); err != nil {
		return fmt.Errorf("sync mirror %s: %w", repo, err)
	}
	if err := n.syncHEAD(repo, ns); err != nil {
		return fmt.Errorf("sync mirror %s HEAD: %w", repo, err)
	}
	if len(problems) > 0 {
		sort.Slice(problems, func(i, j int) bool { return problems[i].Ref < problems[j].Ref })
		return &MirrorError{Problems: problems}
	}
	return nil
}

// looseRefs returns the loose refs under ns/refs as name -> file content.
func (n *Network) looseRefs(ns string) (map[string]string, error) {
	out := map[string]string{}
	root := filepath.Join(ns, "refs")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || strings.HasSuffix(p, ".lock") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ns, p)
		out[filepath.ToSlash(rel)] = strings.TrimSpace(string(b))
		return nil
	})
	return out, err
}

// staleLock is the age after which a ref lock file is taken as left by a
// crash. A lock older than the Network's Open is one too, whatever its age:
// a server SIGKILLed mid-write and restarted at once (a service manager
// restarts in well under staleLock) must not leave that ref out of the
// mirror its start-up sync rewrites.
const staleLock = 10 * time.Second

// writeRefFile writes content to path through path.lock (exclusive
// create, as git does), fsync, rename.
func (n *Network) writeRefFile(path, content string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock := path + ".lock"
	f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		// Refs are written only under refMu, so a lock file older than a
		// few seconds, or than this Network, was left by a crash (ours or
		// a git command's).
		if fi, serr := os.Stat(lock); serr == nil && (time.Since(fi.ModTime()) > staleLock || fi.ModTime().Before(n.openedAt)) {
			os.Remove(lock)
			f, err = os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return fmt.Errorf("lock ref: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(lock)
		}
	}()
	if _, err := f.WriteString(content); err != nil {
		return err
	}
	if n.opts.MirrorFsync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(lock, path); err != nil {
		return err
	}
	ok = true
	if n.opts.MirrorFsync {
		return syncDir(dir)
	}
	return nil
}

// deleteLooseRef removes ns/ref and the directories it leaves empty.
func (n *Network) deleteLooseRef(ns, ref string) error {
	p := filepath.Join(ns, filepath.FromSlash(ref))
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	d := filepath.Dir(p)
	for ; d != ns && strings.HasPrefix(d, ns); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break // not empty
		}
	}
	if n.opts.MirrorFsync {
		if err := syncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// rewritePackedRefs drops the packed-refs entries (and their peeled
// lines) for which keep is false, under packed-refs.lock as git does.
func (n *Network) rewritePackedRefs(keep func(name string) bool) error {
	path := filepath.Join(n.dir, "packed-refs")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var out bytes.Buffer
	changed := false
	dropping := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "^"):
			if dropping {
				continue
			}
		default:
			dropping = false
			if _, name, ok := strings.Cut(line, " "); ok && !keep(name) {
				dropping, changed = true, true
				continue
			}
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !changed {
		return nil
	}
	return n.writeRefFile(path, out.String())
}
