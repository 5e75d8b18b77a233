package replica

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitstore"
)

// Network is one network's cache in object-storage mode: a gitstore.Network
// whose every new pack is uploaded and registered before the write
// returns, and which catches up with the database's pack list before it
// is served (Refresh).
type Network struct {
	*gitstore.Network
	m    *Manager
	name string

	refreshMu sync.Mutex // one catch-up at a time

	stateMu sync.Mutex
	gen     int64     // generation the cache reflects (-1: none yet)
	checked time.Time // start of the last successful check
}

func (n *Network) generation() int64 {
	n.stateMu.Lock()
	defer n.stateMu.Unlock()
	return n.gen
}

func (n *Network) packPath(h, ext string) string {
	return filepath.Join(n.Dir(), "objects", "pack", "pack-"+h+"."+ext)
}

// onPack is gitstore.Options.OnPack: upload, then register. Runs under the
// cache's write lock, before the write returns.
func (n *Network) onPack(pf gitstore.PackFiles) error {
	cfg := n.m.cfg
	start := time.Now()
	limit := cfg.Grace / 2
	ctx, cancel := context.WithTimeout(n.m.ctx, limit)
	defer cancel()
	h := pf.Hash.String()
	rec := lockstep.PackRecord{Network: n.name, Hash: h, PackBytes: pf.PackBytes, IdxBytes: pf.IdxBytes, Objects: pf.Objects}
	if ips, ok := cfg.Packs.(lockstep.InlinePackStore); ok && cfg.InlineMax > 0 && pf.PackBytes+pf.IdxBytes <= cfg.InlineMax {
		// A small pack: its bytes are registered with its record, in one
		// transaction; the bucket is not touched.
		pack, err := os.ReadFile(pf.PackPath)
		if err != nil {
			return err
		}
		idx, err := os.ReadFile(pf.IdxPath)
		if err != nil {
			return err
		}
		rec.PackBytes, rec.IdxBytes = int64(len(pack)), int64(len(idx))
		gen, err := ips.RegisterInlinePack(ctx, rec, pack, idx)
		if err != nil {
			return err
		}
		n.registered(gen)
		return nil
	}
	if err := cfg.Objects.PutPack(ctx, n.name, h, pf.PackPath, pf.IdxPath); err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return lockstep.E("upload pack", lockstep.EUNAVAILABLE,
				fmt.Sprintf("object store: uploading pack %s took longer than half the grace period (%s): the write is refused (LOCKSTEP_OBJECT_GRACE)", h, limit), err)
		}
		return unavailable("upload pack", err)
	}
	if took := time.Since(start); took > limit {
		return lockstep.Errorf(lockstep.EUNAVAILABLE,
			"object store: uploading pack %s took %s, longer than half the grace period (%s): the write is refused (LOCKSTEP_OBJECT_GRACE)", h, took.Round(time.Millisecond), limit)
	}
	gen, err := cfg.Packs.RegisterPack(ctx, rec)
	if err != nil {
		return err
	}
	n.registered(gen)
	return nil
}

// registered follows a registration of ours that returned generation gen.
func (n *Network) registered(gen int64) {
	n.stateMu.Lock()
	if gen == n.gen+1 {
		n.gen = gen // nothing else changed: the cache is at gen
	}
	n.stateMu.Unlock()
	n.publish(gen)
}

func (n *Network) publish(gen int64) {
	if n.m.cfg.Notify == nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.m.ctx, 2*time.Second)
	defer cancel()
	if err := n.m.cfg.Notify.Publish(ctx, n.name, gen); err != nil {
		n.m.cfg.Log.Warn("object store: change notification not sent", "network", n.name, "error", err)
	}
}

// onMiss is gitstore.Options.OnMiss: a lookup missed, maybe because another
// replica wrote the object after this request's catch-up; catch up now
// and say whether anything arrived.
func (n *Network) onMiss() bool {
	before := n.generation()
	ctx, cancel := context.WithTimeout(n.m.ctx, time.Minute)
	defer cancel()
	if err := n.Refresh(ctx); err != nil {
		n.m.cfg.Log.Warn("object store: catch-up after a missing object", "network", n.name, "error", err)
		return false
	}
	return n.generation() != before
}

// Refresh brings the cache up to the database's generation: one indexed
// read when nothing changed. Concurrent callers share one check, as long
// as it started after they arrived (so a caller always sees every change
// committed before it called).
//
// A ctx from lockstep.WithRequestStart counts as arrived when its
// request did: a check since then serves every step of that request.
func (n *Network) Refresh(ctx context.Context) error {
	arrived := time.Now()
	if t, ok := lockstep.RequestStart(ctx); ok && t.Before(arrived) {
		arrived = t
	}
	n.refreshMu.Lock()
	defer n.refreshMu.Unlock()
	n.stateMu.Lock()
	fresh := n.checked.After(arrived)
	n.stateMu.Unlock()
	if fresh {
		return nil
	}
	start := time.Now()
	if _, ok := n.m.cfg.Packs.(lockstep.PackChangeStore); ok && n.generation() >= 0 {
		// The changes since the cache's generation, in place of the
		// generation alone: one read whether or not anything changed.
		if err := n.catchUp(ctx); err != nil {
			return err
		}
	} else {
		gen, err := n.m.cfg.Packs.NetworkGeneration(ctx, n.name)
		if err != nil {
			return err
		}
		if gen != n.generation() {
			if err := n.catchUp(ctx); err != nil {
				return err
			}
		}
	}
	n.stateMu.Lock()
	n.checked = start
	n.stateMu.Unlock()
	return nil
}

// localPacks lists the packs in the cache (index and pack present).
func (n *Network) localPacks() (map[string]bool, error) {
	dir := filepath.Join(n.Dir(), "objects", "pack")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	listed := make(map[string]bool, len(ents))
	for _, e := range ents {
		listed[e.Name()] = true
	}
	out := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "pack-") || !strings.HasSuffix(name, ".idx") {
			continue
		}
		h := strings.TrimSuffix(strings.TrimPrefix(name, "pack-"), ".idx")
		if plumbing.IsHash(h) && listed["pack-"+h+".pack"] {
			out[h] = true
		}
	}
	return out, nil
}

// catchUp downloads the live packs the cache lacks and removes the
// retired ones it holds, then records the generation of the list it
// followed. A live pack missing from the bucket (GC removed it after a
// compaction retired it meanwhile) makes it read the list once more.
func (n *Network) catchUp(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := n.catchUpOnce(ctx)
		if err == nil || attempt == 1 || lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			return err
		}
	}
}

func (n *Network) catchUpOnce(ctx context.Context) error {
	if pcs, ok := n.m.cfg.Packs.(lockstep.PackChangeStore); ok {
		if since := n.generation(); since >= 0 {
			return n.catchUpChanges(ctx, pcs, since)
		}
	}
	recs, gen, err := n.m.cfg.Packs.NetworkPacks(ctx, n.name)
	if err != nil {
		return err
	}
	local, err := n.localPacks()
	if err != nil {
		return fmt.Errorf("object store: list cache of %s: %w", n.name, err)
	}
	var missing []lockstep.PackRecord
	var retired []string
	for _, r := range recs {
		switch {
		case r.Live() && !local[r.Hash]:
			missing = append(missing, r)
		case !r.Live() && local[r.Hash]:
			retired = append(retired, r.Hash)
		}
	}
	if err := n.download(ctx, missing); err != nil {
		return err
	}
	for _, h := range retired {
		// The compacted pack that replaced it is live and local now
		// (downloaded above, or ours).
		os.Remove(n.packPath(h, "idx"))
		os.Remove(n.packPath(h, "pack"))
	}
	if err := n.load(missing, retired); err != nil {
		return err
	}
	n.stateMu.Lock()
	n.gen = gen
	n.stateMu.Unlock()
	return nil
}

// load makes the packs a catch-up placed in the cache visible and drops
// the ones it removed: a catch-up that only added packs opens and
// indexes just those (AddPacks: no listing of the pack directory, the
// network's other objects untouched); a removal takes the full Reload.
func (n *Network) load(added []lockstep.PackRecord, retired []string) error {
	if len(retired) > 0 {
		return n.Reload()
	}
	if len(added) == 0 {
		return nil
	}
	hs := make([]plumbing.Hash, len(added))
	for i, r := range added {
		hs[i] = plumbing.NewHash(r.Hash)
	}
	return n.AddPacks(hs)
}

// catchUpChanges is catchUpOnce for a cache that reflects generation
// since: it reads only the records changed after it (the live inline
// ones with their bytes, in the same read), so a catch-up costs what
// changed, not every record of the network.
func (n *Network) catchUpChanges(ctx context.Context, pcs lockstep.PackChangeStore, since int64) error {
	changes, gen, err := pcs.PackChanges(ctx, n.name, since)
	if err != nil {
		return err
	}
	// live: every live changed pack, to load unless it is loaded already
	// (AddPacks skips those: our own writes, and a pack an earlier
	// catch-up placed but did not get to load).
	var live, missing []lockstep.PackRecord
	var retired []string
	for _, c := range changes {
		local := n.hasPack(c.Hash)
		switch {
		case c.Live() && !local && c.Pack != nil:
			if err := n.writeInline(c.Hash, c.Pack, c.Idx); err != nil {
				return err
			}
		case c.Live() && !local:
			missing = append(missing, c.PackRecord)
		case !c.Live() && local:
			retired = append(retired, c.Hash)
		}
		if c.Live() {
			live = append(live, c.PackRecord)
		}
	}
	if err := n.download(ctx, missing); err != nil {
		return err
	}
	for _, h := range retired {
		os.Remove(n.packPath(h, "idx"))
		os.Remove(n.packPath(h, "pack"))
	}
	if err := n.load(live, retired); err != nil {
		return err
	}
	n.stateMu.Lock()
	n.gen = gen
	n.stateMu.Unlock()
	return nil
}

// hasPack reports whether the cache holds pack h (index and pack).
func (n *Network) hasPack(h string) bool {
	if _, err := os.Stat(n.packPath(h, "idx")); err != nil {
		return false
	}
	_, err := os.Stat(n.packPath(h, "pack"))
	return err == nil
}

// download fetches packs, four at a time: from the bucket, or an inline
// pack from the database.
func (n *Network) download(ctx context.Context, recs []lockstep.PackRecord) error {
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, 4)
	errc := make(chan error, len(recs))
	var wg sync.WaitGroup
	for _, r := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var err error
			if r.Inline {
				err = n.getInline(ctx, r.Hash)
			} else {
				err = n.m.cfg.Objects.GetPack(ctx, n.name, r.Hash, n.packPath(r.Hash, "pack"), n.packPath(r.Hash, "idx"))
			}
			errc <- err
			if err != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	close(errc)
	var first error
	for err := range errc {
		if err != nil && first == nil {
			first = err // the cause; the others were cancelled after it
		}
	}
	if first != nil {
		return unavailable("download pack", first)
	}
	return nil
}

// getInline reads an inline pack from the database and writes it into
// the cache (writeInline).
func (n *Network) getInline(ctx context.Context, h string) error {
	ips, ok := n.m.cfg.Packs.(lockstep.InlinePackStore)
	if !ok {
		return fmt.Errorf("pack %s of %s is kept in the database, which cannot read it back", h, n.name)
	}
	pack, idx, err := ips.InlinePack(ctx, n.name, h)
	if err != nil {
		return err
	}
	return n.writeInline(h, pack, idx)
}

// writeInline writes the bytes of inline pack h into the cache: checked
// against its name (the pack's trailing checksum, which its index
// repeats), each file renamed into place, the index last.
func (n *Network) writeInline(h string, pack, idx []byte) error {
	if len(pack) < 20 || len(idx) < 40 || hex.EncodeToString(pack[len(pack)-20:]) != h || hex.EncodeToString(idx[len(idx)-40:len(idx)-20]) != h {
		return fmt.Errorf("inline pack %s of %s: its bytes do not carry its name", h, n.name)
	}
	for _, f := range []struct {
		ext  string
		data []byte
	}{{"pack", pack}, {"idx", idx}} {
		dst := n.packPath(h, f.ext)
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-inline-*")
		if err != nil {
			return err
		}
		_, err = tmp.Write(f.data)
		if err == nil {
			err = tmp.Close()
		} else {
			tmp.Close()
		}
		if err == nil {
			err = os.Rename(tmp.Name(), dst)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}

// adopt makes the cache agree with the database at open: retired packs
// are removed; packs the database does not know (a crash between upload
// and registration, or a data directory that was in local mode) are
// uploaded and registered; loose objects (local mode) are packed first.
// Registering objects is always safe: at worst it keeps garbage.
func (n *Network) adopt(ctx context.Context) error {
	if loose := looseObjects(n.Dir()); len(loose) > 0 {
		// Every loose object, reachable or not (git repack would pack only
		// the reachable ones), into one pack; then drop the loose copies.
		git := func(stdin string, args ...string) error {
			cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "gc.auto=0"}, args...)...)
			cmd.Dir = n.Dir()
			cmd.Env = append(os.Environ(), "GIT_DIR="+n.Dir(), "GIT_CONFIG_NOSYSTEM=1")
			cmd.Stdin = strings.NewReader(stdin)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("object store: pack loose objects of %s: git %s: %v: %s", n.name, args[0], err, out)
			}
			return nil
		}
		if err := git(strings.Join(loose, "\n")+"\n", "pack-objects", "-q", filepath.Join(n.Dir(), "objects", "pack", "pack")); err != nil {
			return err
		}
		if err := git("", "prune-packed", "-q"); err != nil {
			return err
		}
		if err := n.Reload(); err != nil {
			return err
		}
	}
	recs, _, err := n.m.cfg.Packs.NetworkPacks(ctx, n.name)
	if err != nil {
		return err
	}
	known := map[string]lockstep.PackRecord{}
	for _, r := range recs {
		known[r.Hash] = r
	}
	local, err := n.localPacks()
	if err != nil {
		return fmt.Errorf("object store: list cache of %s: %w", n.name, err)
	}
	changed := false
	for h := range local {
		r, ok := known[h]
		switch {
		case ok && r.Live():
		case ok:
			os.Remove(n.packPath(h, "idx"))
			os.Remove(n.packPath(h, "pack"))
			changed = true
		default:
			pf := gitstore.PackFiles{Hash: plumbing.NewHash(h), PackPath: n.packPath(h, "pack"), IdxPath: n.packPath(h, "idx")}
			if fi, err := os.Stat(pf.PackPath); err == nil {
				pf.PackBytes = fi.Size()
			}
			if fi, err := os.Stat(pf.IdxPath); err == nil {
				pf.IdxBytes = fi.Size()
			}
			if err := n.onPack(pf); err != nil {
				return fmt.Errorf("object store: adopt pack %s of %s: %w", h, n.name, err)
			}
			n.m.cfg.Log.Info("object store: adopted a local pack", "network", n.name, "pack", h)
		}
	}
	if changed {
		return n.Reload()
	}
	return nil
}

// looseObjects lists the loose objects of the repository.
func looseObjects(dir string) []string {
	ents, err := os.ReadDir(filepath.Join(dir, "objects"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || len(e.Name()) != 2 {
			continue
		}
		sub, _ := os.ReadDir(filepath.Join(dir, "objects", e.Name()))
		for _, f := range sub {
			if h := e.Name() + f.Name(); plumbing.IsHash(h) {
				out = append(out, h)
			}
		}
	}
	return out
}
