// Package repositories is the domain service of repositories and their
// fork networks: create, refs, reads, push (tar, tree, objects, edits) with
// compare-and-swap, rollback, merge, git receive, the on-disk ref mirror
// and compaction. It is the one place a ref moves (workspaces and the
// gate's landing call it). It orchestrates the object storage of a network
// (the ObjectStore seam, gitobj.Store: a local bare repository or object
// storage), the metadata store (lockstep.Store, the source of truth for
// refs) and the operations log so that a failure half-way leaves nothing
// visible:
//
//  1. objects are written (and fsynced) first;
//  2. the ref moves by compare-and-swap in the metadata store, in the same
//     transaction as its operations-log entry;
//  3. the on-disk ref mirror (git namespaces, read by git clone/fetch) is
//     rewritten from the store afterwards and re-synced at start-up.
//
// A crash between 1 and 2 leaves unreferenced objects (harmless, like git);
// between 2 and 3 a stale mirror that the next update or start-up repairs.
// The package knows nothing of HTTP.
package repositories

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Config configures the service.
type Config struct {
	// DataDir holds networks/<network>.git.
	DataDir string
	// Limits bound uploads (tar pushes, packs).
	Limits gitobj.Limits
	// Fsync makes object and mirror writes durable before refs move.
	Fsync bool
	// MergeRetries bounds how often materialize recomputes when the target
	// branch moved meanwhile (default 8).
	MergeRetries int
	// MergeMaxFileBytes: larger files are not line-merged (a path-level
	// conflict instead); 0 = the merge package's default (8 MiB).
	MergeMaxFileBytes int64
	// MergeRenameLimit bounds the inexact rename matrix of a merge (git's
	// merge.renameLimit): 0 = the merge package's default (7000), negative
	// = no limit.
	MergeRenameLimit int
	// ScopedCommitSkew is how far committer times may run backwards
	// along a history for a scoped key's commit id to still be found
	// reachable (scopedCommit); 0 = DefaultScopedCommitSkew.
	ScopedCommitSkew time.Duration
	// PreflightBatchMax bounds the workspaces of one batch preflight
	// (POST /repos/{base}/merges/preflight); more is invalid_argument.
	// 0 = DefaultPreflightBatchMax.
	PreflightBatchMax int
	// ComparePatchBytes bounds the unified diffs of one compare answer
	// (files past it are listed with counts, patch_truncated); 0 = 1 MiB.
	ComparePatchBytes int64
	// CompactPacks: when a network holds more packs than this, they are
	// folded into one in the background (every push adds a pack and an
	// open file). 0 never compacts.
	CompactPacks int
	// Objects opens the object storage of the network in a directory
	// (created when missing): gitstore.Local{} (a local bare repository) or a
	// *replica.Manager (object storage). Required: opening a network
	// without it is an internal error. What it implements of gitobj's
	// optional interfaces decides the mode: a gitobj.Shared opener (its
	// networks shared by several replicas) has each repository's ref
	// mirror synced before git serves it, not for every repository at
	// start; a gitobj.TempSweeper has crash leftovers swept (SweepTemps).
	Objects gitobj.Opener
	// TempGrace: temp files in a network older than this are taken as left
	// by a crash and removed (SweepTemps); 0 = gitobj.DefaultTempGrace.
	TempGrace time.Duration
	// SweepBucket, when set (object storage), deletes from the bucket the
	// packs retired longer than the grace period ago, at the end of a GC
	// run, and returns how many it deleted.
	SweepBucket func(ctx context.Context) (int, error)
}

// Service implements repositories.
type Service struct {
	cfg     Config
	shared  bool // cfg.Objects is a gitobj.Shared that shares its networks
	store   lockstep.Store
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
	tracer  trace.Tracer

	mu       sync.Mutex
	networks map[string]ObjectStore

	refLocks   sync.Map        // "repo\x00ref" → *sync.Mutex, orders mirror writes
	repoLocks  sync.Map        // repo → *sync.Mutex, one PrepareGit mirror sync at a time
	compacting sync.Map        // network name → struct{} while a Compact runs
	bg         sync.WaitGroup  // background compactions
	bgCtx      context.Context // cancelled by Close: stops a running compaction
	bgCancel   context.CancelFunc
	hooks      []EventHook

	gcHolderOnce sync.Once
	gcHolderName string // names this replica in the GC lease

	problemsMu sync.Mutex
	problems   map[string]MirrorProblem // "repo\x00ref" → refs the disk mirror lacks

	commits commitCaches // per network, for merge-base walks (commitcache.go)

	reach  reachSets // what repositories' ref tips' trees hold, for scoped keys (scoped.go)
	grants grantLog  // trees and commits scoped keys uploaded (scoped.go)
}

// EventHook is called after an event committed (push, rollback, promote,
// checkpoint …); the gate uses it to enqueue hook deliveries.
type EventHook func(ctx context.Context, ev Event)

// Event describes something that happened to a repository.
type Event struct {
	Type    string
	Repo    *lockstep.Repo
	Branch  string
	Commit  string
	Tree    string
	KeyName string
}

// New returns the service. now may be nil.
func New(cfg Config, store lockstep.Store, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if cfg.MergeRetries <= 0 {
		cfg.MergeRetries = 8
	}
	if log == nil {
		log = slog.Default()
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	sh, shared := cfg.Objects.(gitobj.Shared)
	shared = shared && sh.SharesNetworks()
	return &Service{cfg: cfg, shared: shared, store: store, log: log, metrics: metrics, now: now,
		tracer: otel.Tracer("lockstep/repositories"), networks: map[string]ObjectStore{}, bgCtx: bgCtx, bgCancel: bgCancel}
}

// OnEvent registers a hook called after events commit.
func (s *Service) OnEvent(h EventHook) { s.hooks = append(s.hooks, h) }

func (s *Service) emit(ctx context.Context, ev Event) {
	for _, h := range s.hooks {
		h(ctx, ev)
	}
}

// Network opens (once) the object storage of a fork network: the only
// way the services and web reach objects.
func (s *Service) Network(name string) (ObjectStore, error) {
	return s.network(context.Background(), name)
}

// network is Network for a step of the request of ctx: a shared network
// checked since that request arrived (lockstep.WithRequestStart) is not
// checked again.
func (s *Service) network(ctx context.Context, name string) (ObjectStore, error) {
	n, err := s.openNetwork(name)
	if err != nil {
		return nil, err
	}
	if r, ok := n.(Refresher); ok {
		// Object storage: catch up with what other replicas wrote. An
		// up-to-date cache needs only the database (one read), so it
		// serves while the bucket is down. A cache that is behind and
		// cannot catch up (unavailable: the bucket or the database cannot
		// be reached) is not served: it lacks objects the refs name, and
		// would answer not_found for commits that exist.
		rctx, cancel := context.WithTimeout(s.bgCtx, refreshTimeout)
		defer cancel()
		if t, ok := lockstep.RequestStart(ctx); ok {
			rctx = lockstep.WithRequestStart(rctx, t)
		}
		if err := r.Refresh(rctx); err != nil {
			if lockstep.ErrorCode(err) == lockstep.EUNAVAILABLE {
				return nil, err
			}
			s.log.Warn("network cache not brought up to date", "network", name, "error", err)
		}
	}
	return n, nil
}

// refreshTimeout bounds one catch-up of a shared network's cache.
const refreshTimeout = 5 * time.Minute

// PrepareGit returns the network of r for git to serve; with shared
// networks it first rewrites r's ref mirror from the store (other
// replicas moved refs this cache has not mirrored).
func (s *Service) PrepareGit(ctx context.Context, r *lockstep.Repo) (ObjectStore, error) {
	if !s.shared {
		return s.Network(r.Network)
	}
	// Refs first, then the catch-up: every pack is registered before the
	// ref naming it commits, so the cache then holds what the refs name.
	refs, err := s.store.Refs(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	// A check after the refs read, even when this request checked
	// before: git reads the cache directly, with no catch-up on a miss.
	n, err := s.Network(r.Network)
	if err != nil {
		return nil, err
	}
	m := make(map[string]gitobj.Hash, len(refs))
	for _, ref := range refs {
		m[ref.Name] = gitobj.NewHash(ref.OID)
	}
	unlock := s.lockRepoMirror(r.Name)
	defer unlock()
	s.syncMirror(ctx, n, r.Name, m)
	if err := n.MirrorHEAD(r.Name, r.DefaultBranch); err != nil {
		s.mirrorFailed(ctx, r.Name, "HEAD", err)
	}
	return n, nil
}

func (s *Service) lockRepoMirror(repoName string) func() {
	lk, _ := s.repoLocks.LoadOrStore(repoName, &sync.Mutex{})
	mu := lk.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (s *Service) openNetwork(name string) (ObjectStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n, ok := s.networks[name]; ok {
		return n, nil
	}
	dir := filepath.Join(s.cfg.DataDir, "networks", name+".git")
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create networks dir: %w", err)
	}
	if s.cfg.Objects == nil {
		return nil, lockstep.Errorf(lockstep.EINTERNAL, "open network %s: no object store configured (repositories.Config.Objects)", name)
	}
	n, err := s.cfg.Objects.Open(dir, gitobj.OpenOptions{Fsync: s.cfg.Fsync, TempGrace: s.cfg.TempGrace})
	if err != nil {
		return nil, err
	}
	s.networks[name] = n
	return n, nil
}

// Close stops background compactions (a git repack in progress is
// killed: the packs it would fold stay as they are), waits for them and
// closes every open network.
func (s *Service) Close() error {
	s.bgCancel()
	s.bg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.networks {
		n.Close()
	}
	s.networks = map[string]ObjectStore{}
	return nil
}

// ResyncMirrors rewrites every repository's on-disk refs from the store:
// the store is the truth, the mirror may lag after a crash. A ref the
// mirror cannot hold (a name git refuses or a file/directory clash, which
// older servers let in) or a repository whose mirror fails is logged,
// remembered (MirrorProblems, shown by /readyz) and skipped: the rest is
// synced and served. Only an error of the store itself is returned.
func (s *Service) ResyncMirrors(ctx context.Context) error {
	if s.shared {
		return nil // per repository, before git serves it (PrepareGit)
	}
	repos, err := s.store.ListRepos(ctx, lockstep.RepoFilter{})
	if err != nil {
		return err
	}
	all, err := s.store.AllRefs(ctx)
	if err != nil {
		return err
	}
	for _, r := range repos {
		n, err := s.Network(r.Network)
		if err != nil {
			s.mirrorFailed(ctx, r.Name, "", err)
			continue
		}
		m := map[string]gitobj.Hash{}
		for _, ref := range all[r.Name] {
			m[ref.Name] = gitobj.NewHash(ref.OID)
		}
		s.syncMirror(ctx, n, r.Name, m)
		if err := n.MirrorHEAD(r.Name, r.DefaultBranch); err != nil {
			s.mirrorFailed(ctx, r.Name, "HEAD", err)
		} else {
			s.mirrorOK(r.Name, "HEAD")
		}
	}
	return nil
}

// syncMirror runs SyncMirror and records what it could not mirror.
func (s *Service) syncMirror(ctx context.Context, n gitobj.RefMirror, name string, refs map[string]gitobj.Hash) {
	s.clearMirrorProblems(name)
	err := n.SyncMirror(name, refs)
	var me *gitobj.MirrorError
	switch {
	case errors.As(err, &me):
		for _, p := range me.Problems {
			s.mirrorFailed(ctx, p.Repo, p.Ref, p.Err)
		}
	case err != nil:
		s.mirrorFailed(ctx, name, "", err)
	}
}

// MirrorProblem is a ref (or, with Ref "", a whole repository; "HEAD" its
// default branch symref) that the on-disk mirror does not hold: git
// clients do not see it, every other ref is served.
type MirrorProblem struct {
	Repo  string `json:"repo"`
	Ref   string `json:"ref,omitempty"`
	Error string `json:"error"`
}

// MirrorProblems lists the current mirror problems, by repository and ref.
func (s *Service) MirrorProblems() []MirrorProblem {
	s.problemsMu.Lock()
	defer s.problemsMu.Unlock()
	out := make([]MirrorProblem, 0, len(s.problems))
	for _, p := range s.problems {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Repo != out[j].Repo {
			return out[i].Repo < out[j].Repo
		}
		return out[i].Ref < out[j].Ref
	})
	return out
}

func (s *Service) mirrorFailed(ctx context.Context, repoName, ref string, err error) {
	s.log.ErrorContext(ctx, "ref not mirrored to disk: git clients do not see it; every other ref is served", "repo", repoName, "ref", ref, "error", err)
	s.problemsMu.Lock()
	defer s.problemsMu.Unlock()
	if s.problems == nil {
		s.problems = map[string]MirrorProblem{}
	}
	s.problems[repoName+"\x00"+ref] = MirrorProblem{Repo: repoName, Ref: ref, Error: err.Error()}
}

func (s *Service) mirrorOK(repoName, ref string) {
	s.problemsMu.Lock()
	defer s.problemsMu.Unlock()
	delete(s.problems, repoName+"\x00"+ref)
}

func (s *Service) clearMirrorProblems(repoName string) {
	s.problemsMu.Lock()
	defer s.problemsMu.Unlock()
	for k, p := range s.problems {
		if p.Repo == repoName && p.Ref != "HEAD" {
			delete(s.problems, k)
		}
	}
}

// mirrorReadAll is the number of refs from which mirrorRefs reads the
// repository's refs in one query instead of one query per ref.
const mirrorReadAll = 16

// mirrorRefs writes the refs of one move (deletes first, as ordered) to
// the on-disk mirror git serves. It re-reads the store's values under a
// lock per ref (taken in name order, so that two moves never wait on each
// other), so that two updates finishing out of order never leave the
// older value on disk, then writes them in one MirrorRefs (one HEAD
// check, not one per ref).
func (s *Service) mirrorRefs(ctx context.Context, r *lockstep.Repo, ordered []refUpdate) {
	if s.shared {
		return // rewritten from the store before git serves r (PrepareGit)
	}
	names := make([]string, 0, len(ordered))
	for _, u := range ordered {
		names = append(names, u.Ref)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	for _, ref := range names {
		lk, _ := s.refLocks.LoadOrStore(r.Name+"\x00"+ref, &sync.Mutex{})
		mu := lk.(*sync.Mutex)
		mu.Lock()
		defer mu.Unlock()
	}
	failAll := func(err error) {
		for _, ref := range names {
			s.mirrorFailed(ctx, r.Name, ref, err)
		}
	}
	n, err := s.network(ctx, r.Network)
	if err != nil {
		failAll(err)
		return
	}
	values := make([]gitobj.RefValue, len(ordered))
	if len(ordered) >= mirrorReadAll {
		all, err := s.store.Refs(ctx, r.ID)
		if err != nil {
			failAll(err)
			return
		}
		cur := make(map[string]string, len(all))
		for _, ref := range all {
			cur[ref.Name] = ref.OID
		}
		for i, u := range ordered {
			values[i] = gitobj.RefValue{Ref: u.Ref}
			if oid, ok := cur[u.Ref]; ok {
				values[i].OID = gitobj.NewHash(oid)
			}
		}
	} else {
		for i, u := range ordered {
			values[i] = gitobj.RefValue{Ref: u.Ref}
			cur, err := s.store.Ref(ctx, r.ID, u.Ref)
			switch {
			case err == nil:
				values[i].OID = gitobj.NewHash(cur.OID)
			case lockstep.ErrorCode(err) != lockstep.ENOTFOUND:
				failAll(err)
				return
			}
		}
	}
	err = n.MirrorRefs(r.Name, values)
	failed := map[string]bool{}
	var me *gitobj.MirrorError
	if errors.As(err, &me) {
		for _, p := range me.Problems {
			failed[p.Ref] = true
			s.mirrorFailed(ctx, r.Name, p.Ref, p.Err)
		}
	} else if err != nil {
		// The store already committed: repaired by the next update of
		// these refs or at start-up.
		failAll(err)
		return
	}
	for _, ref := range names {
		if !failed[ref] {
			s.mirrorOK(r.Name, ref)
		}
	}
}

// SweepTemps removes the temp files a crash left in every network of the
// data directory (only those untouched for TempGrace: never one being
// written) and logs what it freed. The server runs it at start-up and
// then periodically.
func (s *Service) SweepTemps() gitobj.TempSweep {
	grace := s.cfg.TempGrace
	if grace <= 0 {
		grace = gitobj.DefaultTempGrace
	}
	var total gitobj.TempSweep
	sw, ok := s.cfg.Objects.(gitobj.TempSweeper)
	if !ok {
		return total
	}
	dirs, _ := filepath.Glob(filepath.Join(s.cfg.DataDir, "networks", "*.git"))
	for _, d := range dirs {
		st := sw.SweepTemps(d, grace, s.now())
		total.Files += st.Files
		total.Bytes += st.Bytes
	}
	if total.Files > 0 {
		s.log.Info("removed temp files left by a crash", "files", total.Files, "bytes", total.Bytes, "older_than", grace.String())
	}
	return total
}

var traceID = telemetry.TraceID

func branchRef(b string) string { return "refs/heads/" + b }

// afterWrite compacts a network in the background once it holds more than
// CompactPacks packs (one at a time per network).
func (s *Service) afterWrite(network string, n ObjectStore) {
	if s.cfg.CompactPacks <= 0 || n.PackCount() <= s.cfg.CompactPacks {
		return
	}
	if s.bgCtx.Err() != nil {
		return // closing
	}
	if _, busy := s.compacting.LoadOrStore(network, struct{}{}); busy {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		defer s.compacting.Delete(network)
		// Pushes during a compaction add packs it leaves alone and do not
		// start another one (busy): go again while over the bound.
		for round := 0; round < 3 && n.PackCount() > s.cfg.CompactPacks && s.bgCtx.Err() == nil; round++ {
			start := s.now()
			before := n.PackCount()
			err := n.Compact(s.bgCtx)
			s.metrics.ObserveOp("compact", resultOf(err), s.now().Sub(start))
			if err != nil {
				s.log.Error("compact network", "network", network, "error", err)
				return
			}
			s.log.Info("compacted network", "network", network, "packs_before", before, "packs_after", n.PackCount(), "duration_ms", ms(s.now().Sub(start)))
		}
	}()
}
