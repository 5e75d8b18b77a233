package gitstore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"

	"github.com/lockstep-hq/lockstep"
)

// Object GC (issue 28, docs/replicas.md "Object GC"). An object is cruft
// when nothing the GC must keep reaches it: the roots (every ref of every
// repository of the network, retained attempts and checkpoints) and every
// object of a pack or loose file modified after the cutoff (the
// retention: recent writes, and whatever they name, are never dropped —
// git's rule for recent objects). Cruft in older containers is dropped:
// the live objects of a pack holding cruft are written to a new pack
// first, then the old pack is hidden, the commit point runs (the metadata
// store checks that no ref moved to something this GC did not see, and
// records the GC so that a write that checked its objects before it is
// refused), and only then is it deleted. A failed commit puts everything
// back. An object that becomes referenced again before a GC is simply
// reachable then, and kept: no per-object time is needed.

// gcTrashPrefix names the directory under objects/ holding what a GC hid
// before its commit point; Open puts back what a crash left there.
const gcTrashPrefix = "gc-trash-"

// PackEntry is one object of a pack with its packed size (bytes in the
// pack, delta or not).
type PackEntry struct {
	Hash   plumbing.Hash
	Packed int64
}

// ReadPackEntries lists the objects of the pack whose index is idxPath,
// with their packed sizes (from the offsets and the pack's size).
func ReadPackEntries(idxPath string) ([]PackEntry, error) {
	f, err := os.Open(idxPath)
	if err != nil {
		return nil, err
	}
	idx := idxfile.NewMemoryIndex()
	err = idxfile.NewDecoder(bufio.NewReader(f)).Decode(idx)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", idxPath, err)
	}
	packPath := strings.TrimSuffix(idxPath, ".idx") + ".pack"
	fi, err := os.Stat(packPath)
	if err != nil {
		return nil, err
	}
	it, err := idx.EntriesByOffset()
	if err != nil {
		return nil, err
	}
	defer it.Close()
	type off struct {
		h plumbing.Hash
		o int64
	}
	var offs []off
	for {
		e, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		offs = append(offs, off{e.Hash, int64(e.Offset)})
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i].o < offs[j].o })
	out := make([]PackEntry, len(offs))
	for i, o := range offs {
		end := fi.Size() - 20 // the trailer
		if i+1 < len(offs) {
			end = offs[i+1].o
		}
		out[i] = PackEntry{Hash: o.h, Packed: end - o.o}
	}
	return out, nil
}

// Reachable returns every object reachable from roots (commits, trees,
// blobs or tags), by `git rev-list --objects` over the network. A root
// that is missing is an error: a GC must not guess.
func (n *Network) Reachable(ctx context.Context, roots []plumbing.Hash) (map[plumbing.Hash]bool, error) {
	out := map[plumbing.Hash]bool{}
	if len(roots) == 0 {
		return out, nil
	}
	var in bytes.Buffer
	for _, r := range roots {
		in.WriteString(r.String())
		in.WriteByte('\n')
	}
	cmd := exec.CommandContext(ctx, "git", n.gitArgs("rev-list", "--objects", "--no-object-names", "--stdin")...)
	cmd.Dir = n.dir
	cmd.Env = gitEnv("GIT_DIR=" + n.dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("gc %s: git rev-list: %w", n.dir, err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if line := sc.Text(); plumbing.IsHash(line) {
			out[plumbing.NewHash(line)] = true
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("gc %s: git rev-list: %v: %s", n.dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// WritePack writes the objects of oids (all stored in the network) as one
// pack with `git pack-objects`, named base-<hash>.{pack,idx} (index
// written last), and returns its hash.
func (n *Network) WritePack(ctx context.Context, oids []plumbing.Hash, base string) (plumbing.Hash, error) {
	var in bytes.Buffer
	for _, h := range oids {
		in.WriteString(h.String())
		in.WriteByte('\n')
	}
	cmd := exec.CommandContext(ctx, "git", n.gitArgs("-c", "pack.threads=2", "pack-objects", "-q", "--non-empty", "--delta-base-offset", base)...)
	cmd.Dir = n.dir
	cmd.Env = gitEnv("GIT_DIR=" + n.dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("gc %s: git pack-objects: %v: %s", n.dir, err, strings.TrimSpace(stderr.String()))
	}
	h := strings.TrimSpace(string(out))
	if !plumbing.IsHash(h) {
		return plumbing.ZeroHash, fmt.Errorf("gc %s: git pack-objects printed %q", n.dir, out)
	}
	return plumbing.NewHash(h), nil
}

// looseFile is one loose object with its file's time and size.
type looseFile struct {
	hash  plumbing.Hash
	path  string
	mod   time.Time
	bytes int64
}

func (n *Network) looseFiles() ([]looseFile, error) {
	dirs, err := os.ReadDir(filepath.Join(n.dir, "objects"))
	if err != nil {
		return nil, err
	}
	var out []looseFile
	for _, d := range dirs {
		if len(d.Name()) != 2 || !d.IsDir() {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(n.dir, "objects", d.Name()))
		for _, f := range files {
			h := d.Name() + f.Name()
			if !plumbing.IsHash(h) {
				continue
			}
			fi, err := f.Info()
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, looseFile{hash: plumbing.NewHash(h), path: filepath.Join(n.dir, "objects", d.Name(), f.Name()), mod: fi.ModTime(), bytes: fi.Size()})
		}
	}
	return out, nil
}

// CollectGarbage drops the network's cruft older than opts.Cutoff (see
// the top of this file), in local mode: loose files and packs on disk.
// One at a time per network, and never beside a Compact.
func (n *Network) CollectGarbage(ctx context.Context, opts GCOptions) (GCStats, error) {
	n.gcMu.Lock()
	defer n.gcMu.Unlock()
	var st GCStats

	type packInfo struct {
		hash    plumbing.Hash
		mod     time.Time
		entries []PackEntry
	}
	var packs []packInfo
	for _, p := range n.snapshot() {
		fi, err := os.Stat(n.packPath(p.hash, "pack"))
		if err != nil {
			continue // removed by a Compact meanwhile: its objects are in a newer pack
		}
		ents, err := ReadPackEntries(n.packPath(p.hash, "idx"))
		if err != nil {
			return st, err
		}
		packs = append(packs, packInfo{hash: p.hash, mod: fi.ModTime(), entries: ents})
	}
	loose, err := n.looseFiles()
	if err != nil {
		return st, err
	}
	roots := append([]plumbing.Hash(nil), opts.Roots...)
	for _, p := range packs {
		if !p.mod.Before(opts.Cutoff) {
			for _, e := range p.entries {
				roots = append(roots, e.Hash)
			}
		}
	}
	for _, l := range loose {
		if !l.mod.Before(opts.Cutoff) {
			roots = append(roots, l.hash)
		}
	}
	reach, err := n.Reachable(ctx, roots)
	if err != nil {
		return st, err
	}

	var rewrite []packInfo
	keep := map[plumbing.Hash]bool{}
	for _, p := range packs {
		if !p.mod.Before(opts.Cutoff) {
			continue
		}
		var drop int
		var dropBytes int64
		for _, e := range p.entries {
			if !reach[e.Hash] {
				drop++
				dropBytes += e.Packed
			}
		}
		if drop == 0 {
			continue
		}
		rewrite = append(rewrite, p)
		st.Packs++
		st.Objects += drop
		st.Bytes += dropBytes
		for _, e := range p.entries {
			if reach[e.Hash] {
				keep[e.Hash] = true
			}
		}
	}
	var dropLoose []looseFile
	for _, l := range loose {
		if reach[l.hash] {
			continue
		}
		if l.mod.Before(opts.Cutoff) {
			dropLoose = append(dropLoose, l)
			st.Loose++
			st.Objects++
			st.Bytes += l.bytes
		}
	}
	if opts.DryRun || (len(rewrite) == 0 && len(dropLoose) == 0) {
		return st, nil
	}

	// 1. The live objects of the packs to drop, in a new pack (visible
	// at the next Reload; nothing is lost if we stop here).
	if len(keep) > 0 {
		oids := make([]plumbing.Hash, 0, len(keep))
		for h := range keep {
			oids = append(oids, h)
		}
		if _, err := n.WritePack(ctx, oids, filepath.Join(n.dir, "objects", "pack", "pack")); err != nil {
			return st, err
		}
	}
	// 2. Hide the old packs and loose files in a trash directory.
	trash, err := os.MkdirTemp(filepath.Join(n.dir, "objects"), gcTrashPrefix)
	if err != nil {
		return st, fmt.Errorf("gc %s: %w", n.dir, err)
	}
	var moved [][2]string // from, to
	restore := func() {
		for i := len(moved) - 1; i >= 0; i-- {
			os.MkdirAll(filepath.Dir(moved[i][0]), 0o755)
			os.Rename(moved[i][1], moved[i][0])
		}
		os.RemoveAll(trash)
		n.Reload()
	}
	move := func(from string) error {
		to := filepath.Join(trash, strings.ReplaceAll(strings.TrimPrefix(from, filepath.Join(n.dir, "objects")+string(filepath.Separator)), string(filepath.Separator), "_"))
		if err := os.Rename(from, to); err != nil {
			return err
		}
		moved = append(moved, [2]string{from, to})
		return nil
	}
	for _, p := range rewrite {
		// Index first: a pack without one is invisible.
		for _, ext := range []string{"idx", "pack"} {
			if err := move(n.packPath(p.hash, ext)); err != nil {
				restore()
				return st, fmt.Errorf("gc %s: %w", n.dir, err)
			}
		}
	}
	for _, l := range dropLoose {
		if err := move(l.path); err != nil && !os.IsNotExist(err) {
			restore()
			return st, fmt.Errorf("gc %s: %w", n.dir, err)
		}
	}
	if err := n.Reload(); err != nil {
		restore()
		return st, err
	}
	// 3. The commit point; 4. delete.
	if opts.Commit != nil {
		if _, err := opts.Commit(nil, nil); err != nil {
			restore()
			return st, err
		}
	}
	os.RemoveAll(trash)
	return st, nil
}

// restoreGCTrash puts back what a GC killed before its commit point hid
// (or, after it, had not deleted yet): keeping cruft is always safe.
func restoreGCTrash(dir string) {
	objs := filepath.Join(dir, "objects")
	subs, err := os.ReadDir(objs)
	if err != nil {
		return
	}
	for _, d := range subs {
		if !d.IsDir() || !strings.HasPrefix(d.Name(), gcTrashPrefix) {
			continue
		}
		trash := filepath.Join(objs, d.Name())
		files, _ := os.ReadDir(trash)
		// Packs before their indexes, so no index is visible without its pack.
		sort.Slice(files, func(i, j int) bool {
			return strings.HasSuffix(files[i].Name(), ".pack") && !strings.HasSuffix(files[j].Name(), ".pack")
		})
		for _, f := range files {
			rel := filepath.FromSlash(strings.ReplaceAll(f.Name(), "_", "/"))
			to := filepath.Join(objs, rel)
			os.MkdirAll(filepath.Dir(to), 0o755)
			os.Rename(filepath.Join(trash, f.Name()), to)
		}
		os.RemoveAll(trash)
	}
}

// CheckClosure returns not_found when an object tree names (at any depth)
// is not stored. Subtrees equal to the one at the same path of base (a
// tree a live ref names; zero: none) are not walked: what a live ref
// names is complete. A write that names a tree uploaded by an earlier
// request checks it, since an object GC may have dropped an object the
// upload found stored (docs/replicas.md, "Object GC").
func (n *Network) CheckClosure(tree, base plumbing.Hash) error {
	seen := map[plumbing.Hash]bool{}
	var walk func(t, b plumbing.Hash, path string) error
	walk = func(t, b plumbing.Hash, path string) error {
		if t == b || seen[t] {
			return nil
		}
		seen[t] = true
		tr, err := n.tree(t)
		if err != nil {
			return lockstep.Errorf(lockstep.ENOTFOUND, "tree %s (%s) not found: upload its objects again", t, "/"+path)
		}
		var bt map[string]plumbing.Hash
		if !b.IsZero() {
			if btr, err := n.tree(b); err == nil {
				bt = make(map[string]plumbing.Hash, len(btr.Entries))
				for _, e := range btr.Entries {
					bt[e.Name] = e.Hash
				}
			}
		}
		for _, e := range tr.Entries {
			p := path + e.Name
			switch {
			case e.Mode == filemode.Submodule:
				continue
			case e.Mode == filemode.Dir:
				if err := walk(e.Hash, bt[e.Name], p+"/"); err != nil {
					return err
				}
			default:
				if bh, ok := bt[e.Name]; ok && bh == e.Hash {
					continue
				}
				if !n.has(e.Hash) {
					return lockstep.Errorf(lockstep.ENOTFOUND, "object %s (%s) not found: upload its objects again", e.Hash, "/"+p)
				}
			}
		}
		return nil
	}
	return walk(tree, base, "")
}
