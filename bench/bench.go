package bench

// The scenarios, the measurement helpers and the output of `lockstep
// bench` (run.go holds the entry point and its options).

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

type benchOpts struct {
	dir         string
	files       int
	bigFiles    int
	iters       int
	asJSON      bool
	strict      bool
	keep        bool
	only        []string
	cpuDir      string
	bin         string
	seed        uint64
	fsyncOff    bool
	watch       bool // push-incremental with `lockstep watch` running
	branchDBURL string
	fleetSizes  []int // workspace counts of the fleet rows (fleet.go)
	objstore    ObjstoreOptions

	startServer func(ctx context.Context, c ServerConfig) (*Server, error)
}

// benchGroups are the scenario groups --only selects (a row name such as
// fork-20k or read-refs selects its group: the longest group name that
// prefixes it, or its entry in rowGroups).
var benchGroups = []string{"cli-startup", "push-incremental", "push-tar-full", "rollback", "idempotency", "read", "mcp", "fork", "preflight", "preflight-batch", "materialize", "checkpoint", "run", "run-baseline", "snapshot", "fsync-off", "fleet", "objstore", "push-bulk", "db-burst"}

// rowGroups are the rows whose group is not the longest group name that
// prefixes them.
var rowGroups = map[string]string{"preflight-single": "preflight-batch"}

// benchRowNames are every row a full run prints, in order (the groups
// whose rows depend on options add theirs: FleetRowNames,
// ObjstoreRowNames, PushBulkRowNames).
var benchRowNames = []string{"cli-startup", "push-incremental", "push-incremental:server", "push-tar-full", "rollback", "idempotency-rollback", "read-commit", "read-refs", "mcp-tool-call",
	"fork-20k", "fork-200", "preflight-deep-20k", "preflight-renames-20k", "materialize-20k", "checkpoint", "restore", "run-true", "run-false", "run-baseline-true", "run-baseline-false",
	"snapshot-take-btrfs", "snapshot-restore-btrfs", "snapshot-take-overlay", "snapshot-restore-overlay",
	"push-incremental (fsync=false)", "rollback (fsync=false)"}

// dist is a distribution of timings in milliseconds.
type dist struct {
	N      int     `json:"n"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	Min    float64 `json:"min_ms"`
	Max    float64 `json:"max_ms"`
}

func newDist(ms []float64) *dist {
	if len(ms) == 0 {
		return nil
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return &dist{N: len(s), Median: med, P90: rank(0.9), Min: s[0], Max: s[len(s)-1]}
}

type benchRow struct {
	Name    string   `json:"scenario"`
	Size    string   `json:"size,omitempty"`
	LS      *dist    `json:"lockstep,omitempty"`
	Git     *dist    `json:"git,omitempty"`
	GitCmd  string   `json:"git_command,omitempty"`
	Ratio   float64  `json:"ratio,omitempty"`
	Target  string   `json:"target"`
	Pass    bool     `json:"pass"`
	Failed  []string `json:"failed,omitempty"`
	Skipped string   `json:"skipped,omitempty"`
	Notes   []string `json:"notes,omitempty"`
}

// check records one condition of the row's target.
func (r *benchRow) check(what string, ok bool) {
	if !ok {
		r.Failed = append(r.Failed, what)
	}
	r.Pass = len(r.Failed) == 0
}

func (r *benchRow) note(format string, a ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, a...))
}

// reqTimer wraps the server's handler and records how long each request
// spent inside it (the server's share of a client round trip).
type reqTimer struct {
	h     http.Handler
	mu    sync.Mutex
	put   time.Duration // last PUT .../worktree
	total time.Duration // sum since reset
	count int
	last  map[string]time.Duration // by route, since reset
}

// routeKey names a request by method and the route after /repos/{repo}.
func routeKey(r *http.Request) string {
	p := strings.TrimPrefix(r.URL.Path, "/api/v1/repos/")
	if _, rest, ok := strings.Cut(p, "/"); ok {
		p = rest
	} else {
		p = "{repo}"
	}
	return r.Method + " " + p
}

func (t *reqTimer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := time.Now()
	t.h.ServeHTTP(w, r)
	d := time.Since(s)
	t.mu.Lock()
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/worktree") {
		t.put = d
	}
	t.total += d
	t.count++
	if t.last == nil {
		t.last = map[string]time.Duration{}
	}
	t.last[routeKey(r)] += d
	t.mu.Unlock()
}

func (t *reqTimer) reset() {
	t.mu.Lock()
	t.put, t.total, t.count = 0, 0, 0
	t.last = map[string]time.Duration{}
	t.mu.Unlock()
}

func (t *reqTimer) read() (put, total time.Duration, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.put, t.total, t.count
}

func (t *reqTimer) routes() map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.last)
}

type benchServer struct {
	name  string
	app   *Server
	hs    *http.Server
	url   string
	key   string
	c     *client.Client
	timer *reqTimer
	data  string
}

func (s *benchServer) close() {
	if s.hs != nil {
		s.hs.Close()
	}
	if s.app != nil && s.app.Close != nil {
		s.app.Close()
	}
}

type bencher struct {
	ctx     context.Context
	e       *env
	o       benchOpts
	root    string
	bin     string
	env     []string
	fsType  string
	logger  *slog.Logger
	rows    []*benchRow
	servers map[bool]*benchServer // by fsync
	seq     int

	small    treeGen
	big      treeGen
	tiny     treeGen
	incs     map[bool]*incState
	g2k      *git2k
	bigNet   *bigState
	smallNet *bigState
}

func newBencher(ctx context.Context, e *env, o benchOpts) (*bencher, error) {
	parent := o.dir
	if parent == "" {
		parent = os.Getenv("TMPDIR")
		if parent == "" {
			parent = os.TempDir()
			if fsTypeOf("/dev/shm") == "tmpfs" {
				parent = "/dev/shm"
			}
		}
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp(parent, "lockstep-bench-")
	if err != nil {
		return nil, err
	}
	b := &bencher{ctx: ctx, e: e, o: o, root: root, servers: map[bool]*benchServer{}, incs: map[bool]*incState{},
		small: newTreeGen(o.files, o.seed), big: newTreeGen(o.bigFiles, o.seed+1), tiny: newTreeGen(200, o.seed+2)}
	b.fsType = fsTypeOf(root)
	b.logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, d := range []string{"home", "cache"} {
		if err := os.MkdirAll(b.path(d), 0o755); err != nil {
			return nil, err
		}
	}
	b.env = append(os.Environ(), "HOME="+b.path("home"), "XDG_CACHE_HOME="+b.path("cache"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com", "GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com")
	return b, nil
}

func (b *bencher) close() {
	for _, s := range b.servers {
		s.close()
	}
	if b.o.keep {
		b.logf("kept %s", b.root)
		return
	}
	os.RemoveAll(b.root)
}

func (b *bencher) path(p ...string) string { return filepath.Join(append([]string{b.root}, p...)...) }

func (b *bencher) logf(format string, a ...any) {
	fmt.Fprintf(b.e.stderr, "bench: "+format+"\n", a...)
}

func (b *bencher) name(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s-%d", prefix, b.seq)
}

func (b *bencher) selected(group string) bool {
	if len(b.o.only) == 0 {
		return true
	}
	for _, s := range b.o.only {
		if g, ok := rowGroups[s]; ok {
			if g == group {
				return true
			}
			continue
		}
		if s == group || strings.HasPrefix(s, group) && longestGroup(s) == group {
			return true
		}
	}
	return false
}

// longestGroup is the longest group name that prefixes a --only item
// (run-baseline-true selects run-baseline, not run).
func longestGroup(s string) string {
	best := ""
	for _, g := range benchGroups {
		if strings.HasPrefix(s, g) && len(g) > len(best) {
			best = g
		}
	}
	return best
}

func (b *bencher) add(r *benchRow) *benchRow {
	if r.LS != nil && r.Git != nil && r.Git.Median > 0 {
		r.Ratio = r.LS.Median / r.Git.Median
	}
	b.rows = append(b.rows, r)
	return r
}

func (b *bencher) skip(name, reason string) {
	b.rows = append(b.rows, &benchRow{Name: name, Skipped: reason, Pass: true})
}

func (b *bencher) runAll() error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("bench: git is not on PATH: %w", err)
	}
	bin, err := b.lockstepBinary()
	if err != nil {
		return err
	}
	b.bin = bin
	if _, err := b.server(true); err != nil {
		return err
	}
	steps := []struct {
		group string
		run   func() error
	}{
		{"cli-startup", b.benchStartup},
		{"push-incremental", b.benchPushIncremental},
		{"push-tar-full", b.benchPushTarFull},
		{"rollback", func() error { return b.benchRollback(true, "rollback") }},
		{"idempotency", b.benchIdempotency},
		{"read", b.benchRead},
		{"mcp", b.benchMCP},
		{"fork", b.benchFork},
		{"preflight", b.benchPreflight},
		{"preflight", b.benchPreflightRenames},
		{"preflight-batch", b.benchPreflightBatch},
		{"materialize", b.benchMaterialize},
		{"checkpoint", b.benchCheckpoint},
		{"run", b.benchRun},
		{"run-baseline", b.benchRunBaseline},
		{"snapshot", b.benchSnapshot},
		{"fsync-off", b.benchFsyncOff},
		{"fleet", b.benchFleet},
		{"objstore", b.benchObjstore},
		{"push-bulk", b.benchPushBulk},
		{"db-burst", b.benchDBBurst},
	}
	for _, s := range steps {
		if !b.selected(s.group) {
			continue
		}
		if err := b.ctx.Err(); err != nil {
			return err
		}
		b.logf("%s …", s.group)
		if err := s.run(); err != nil {
			return fmt.Errorf("bench %s: %w", s.group, err)
		}
	}
	return nil
}

// lockstepBinary is the binary the end-to-end scenarios run (the client
// build, which runs the server build beside it for mcp): --bin; the client
// build that started this server build (LOCKSTEP_CLIENT_BINARY, set by
// `lockstep bench` when it runs lockstep-server); this executable unless
// it is a test binary; else the three builds (client, lockstep-server,
// lockstep-egress) made with go build, side by side.
func (b *bencher) lockstepBinary() (string, error) {
	if b.o.bin != "" {
		return b.o.bin, nil
	}
	if p := os.Getenv("LOCKSTEP_CLIENT_BINARY"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil && !strings.HasSuffix(filepath.Base(exe), ".test") {
		return exe, nil
	}
	out := b.path("lockstep")
	for i, args := range [][]string{
		{"build", "-o", out, "github.com/lockstep-hq/lockstep/cmd/lockstep"},
		{"build", "-tags", "lockstep_server", "-o", b.path("lockstep-server"), "github.com/lockstep-hq/lockstep/cmd/lockstep"},
		{"build", "-o", b.path("lockstep-egress"), "github.com/lockstep-hq/lockstep/cmd/lockstep-egress"},
	} {
		cmd := exec.CommandContext(b.ctx, "go", args...)
		if i != 1 {
			// The client as the image and the release build it: static,
			// started without the dynamic loader.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if msg, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, msg)
		}
	}
	return out, nil
}

// server starts (once) an in-process server with the wiring of `serve`
// (Options.StartServer).
func (b *bencher) server(fsync bool) (*benchServer, error) {
	if s := b.servers[fsync]; s != nil {
		return s, nil
	}
	name := "data-fsync"
	if !fsync {
		name = "data-nofsync"
	}
	s, err := b.startServer(name, ServerConfig{Data: b.path(name), Fsync: fsync, BranchPrefix: benchBranchPrefix, BranchDatabaseURL: b.o.branchDBURL, Logger: b.logger}, "")
	if err != nil {
		return nil, err
	}
	b.servers[fsync] = s
	return s, nil
}

// startServer starts an in-process server (Options.StartServer) behind a
// request timer on 127.0.0.1 and waits until it is ready. key is the
// admin key to use; empty: the one the server wrote into its data
// directory (a fresh metadata database). The caller closes it.
func (b *bencher) startServer(name string, c ServerConfig, key string) (*benchServer, error) {
	s := &benchServer{name: name, data: c.Data}
	a, err := b.o.startServer(b.ctx, c)
	if err != nil {
		return nil, err
	}
	s.app = a
	if key == "" {
		k, err := os.ReadFile(filepath.Join(c.Data, "admin.key"))
		if err != nil {
			s.close()
			return nil, fmt.Errorf("read admin key: %w", err)
		}
		key = strings.TrimSpace(string(k))
	}
	s.key = key
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.close()
		return nil, err
	}
	s.timer = &reqTimer{h: a.Handler}
	s.hs = &http.Server{Handler: s.timer, ReadHeaderTimeout: 10 * time.Second}
	go s.hs.Serve(ln)
	s.url = "http://" + ln.Addr().String()
	s.c = client.New(s.url, s.key)
	if err := s.c.WaitReady(b.ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// ---- measurement helpers ----

// measure runs warm untimed-recorded iterations, then n recorded ones; f
// returns the duration to record (so it can exclude its own setup). With
// --cpuprofile-dir the recorded loop is profiled.
func (b *bencher) measure(name string, warm, n int, f func(i int) (time.Duration, error)) (*dist, error) {
	for i := 0; i < warm; i++ {
		if _, err := f(i); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	stop := b.profile(name)
	defer stop()
	ms := make([]float64, 0, n)
	for i := warm; i < warm+n; i++ {
		d, err := f(i)
		if err != nil {
			return nil, err
		}
		ms = append(ms, float64(d.Microseconds())/1000)
	}
	return newDist(ms), nil
}

// measurePair measures Lockstep and git in alternation (ABBA order), so
// both see the same machine load; ls's loop is the one profiled.
func (b *bencher) measurePair(name string, warm, n int, ls, git func(i int) (time.Duration, error)) (*dist, *dist, error) {
	var lms, gms []float64
	var stop func()
	for i := 0; i < warm+n; i++ {
		if i == warm {
			stop = b.profile(name)
		}
		fs := []func(int) (time.Duration, error){ls, git}
		if i%2 == 1 {
			fs[0], fs[1] = git, ls
		}
		var ds [2]time.Duration
		for k, f := range fs {
			d, err := f(i)
			if err != nil {
				if stop != nil {
					stop()
				}
				return nil, nil, err
			}
			ds[k] = d
		}
		if i%2 == 1 {
			ds[0], ds[1] = ds[1], ds[0]
		}
		if i >= warm {
			lms = append(lms, float64(ds[0].Microseconds())/1000)
			gms = append(gms, float64(ds[1].Microseconds())/1000)
		}
	}
	if stop != nil {
		stop()
	}
	return newDist(lms), newDist(gms), nil
}

func (b *bencher) profile(name string) func() {
	if b.o.cpuDir == "" || strings.HasPrefix(name, "git-") {
		return func() {}
	}
	os.MkdirAll(b.o.cpuDir, 0o755)
	fn := strings.NewReplacer(" ", "_", "(", "", ")", "", "=", "-", ":", "-").Replace(name)
	fh, err := os.Create(filepath.Join(b.o.cpuDir, fn+".pprof"))
	if err != nil {
		b.logf("cpu profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		b.logf("cpu profile: %v", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); fh.Close() }
}

// timed runs one API call and returns its wall time; the time the
// server's handlers spent on it is appended to h.
func timed(s *benchServer, h *[]float64, f func() error) (time.Duration, error) {
	s.timer.reset()
	t := time.Now()
	err := f()
	d := time.Since(t)
	_, total, _ := s.timer.read()
	*h = append(*h, float64(total.Microseconds())/1000)
	return d, err
}

// handlerNote describes the server's share of the recorded iterations.
func handlerNote(h []float64, warm int) string {
	if len(h) <= warm {
		return "server handler time unknown"
	}
	d := newDist(h[warm:])
	return fmt.Sprintf("server handler (in-process) median %.2f ms, p90 %.2f ms; the rest is HTTP and client", d.Median, d.P90)
}

func (b *bencher) slow() int { return max(3, b.o.iters/2) }

func (b *bencher) cmd(dir string, name string, args ...string) *exec.Cmd {
	c := exec.CommandContext(b.ctx, name, args...)
	c.Dir = dir
	c.Env = b.env
	return c
}

// git runs git in dir and returns its trimmed stdout.
func (b *bencher) git(dir string, args ...string) (string, error) {
	c := b.cmd(dir, "git", args...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// timeGit runs git commands one after the other (like `a && b`) and times them.
func (b *bencher) timeGit(dir string, cmds ...[]string) (time.Duration, error) {
	t := time.Now()
	for _, a := range cmds {
		if _, err := b.git(dir, a...); err != nil {
			return 0, err
		}
	}
	return time.Since(t), nil
}

// ---- generated trees ----

// treeGen is a deterministic tree: n text files in about n/5 directories
// (2,000 files → 392 leaf directories under 16 top ones, ~12 KB a file).
type treeGen struct {
	n, ndirs, ntop int
	seed           uint64
}

func newTreeGen(n int, seed uint64) treeGen {
	nd := max(1, n*392/2000)
	return treeGen{n: n, ndirs: nd, ntop: max(1, min(16, nd/24)), seed: seed}
}

func (t treeGen) path(j int) string {
	d := j % t.ndirs
	return fmt.Sprintf("d%02d/s%03d/f%05d.txt", d%t.ntop, d/t.ntop, j)
}

var benchWords = strings.Fields("func return err nil ctx tree commit if for range var const type struct map string int byte go push merge fork ref oid blob")

func (t treeGen) content(j int) []byte {
	r := rand.New(rand.NewPCG(t.seed, uint64(j)))
	lines := 20 + r.IntN(360)
	out := make([]byte, 0, lines*64)
	for l := 0; l < lines; l++ {
		out = strconv.AppendInt(out, int64(l), 10)
		out = append(out, ':')
		for w, nw := 0, 6+r.IntN(8); w < nw; w++ {
			out = append(out, ' ')
			out = append(out, benchWords[r.IntN(len(benchWords))]...)
		}
		out = append(out, '\n')
	}
	return out
}

func (t treeGen) write(dir string) (int64, error) {
	var total int64
	for j := 0; j < t.n; j++ {
		p := filepath.Join(dir, t.path(j))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return 0, err
		}
		c := t.content(j)
		total += int64(len(c))
		if err := os.WriteFile(p, c, 0o644); err != nil {
			return 0, err
		}
	}
	return total, nil
}

func (t treeGen) tar() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for j := 0; j < t.n; j++ {
		c := t.content(j)
		if err := tw.WriteHeader(&tar.Header{Name: t.path(j), Mode: 0o644, Size: int64(len(c)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(c); err != nil {
			return nil, err
		}
	}
	err := tw.Close()
	return buf.Bytes(), err
}

func (t treeGen) describe(bytes int64) string {
	return fmt.Sprintf("%d files, %d dirs, %.1f MB", t.n, t.ndirs+t.ntop, float64(bytes)/1e6)
}

// editLine replaces line `line` (negative: from the end) of file j under
// dir with text and returns the previous content.
func editLine(dir string, t treeGen, j, line int, text string) ([]byte, error) {
	p := filepath.Join(dir, t.path(j%t.n))
	old, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	ls := strings.SplitAfter(string(old), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	}
	i := line
	if i < 0 {
		i = len(ls) + line
	}
	i = max(0, min(i, len(ls)-1))
	ls[i] = text + "\n"
	return old, os.WriteFile(p, []byte(strings.Join(ls, "")), 0o644)
}

// ---- shared setups ----

// incState is the 2,000-file repository pushed incrementally, with a
// worktree directory the lockstep binary pushes.
type incState struct {
	repo, dir, cache string
	first            string // first commit
	bytes            int64
}

func (b *bencher) inc(fsync bool) (*incState, error) {
	if st := b.incs[fsync]; st != nil {
		return st, nil
	}
	s, err := b.server(fsync)
	if err != nil {
		return nil, err
	}
	st, err := b.newInc(s, map[bool]string{true: "inc", false: "inc-nofsync"}[fsync])
	if err != nil {
		return nil, err
	}
	b.incs[fsync] = st
	return st, nil
}

// newInc creates repository tag on s from the small tree (two commits)
// with a worktree of its own.
func (b *bencher) newInc(s *benchServer, tag string) (*incState, error) {
	var err error
	st := &incState{repo: tag, dir: b.path(tag + "-ls"), cache: b.path("statcache", tag)}
	if st.bytes, err = b.small.write(st.dir); err != nil {
		return nil, err
	}
	if _, err := s.c.CreateRepo(b.ctx, st.repo, "main"); err != nil {
		return nil, err
	}
	rep, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "initial"}, true, st.cache)
	if err != nil {
		return nil, err
	}
	st.first = rep.Commit
	if _, err := editLine(st.dir, b.small, 1, 0, "second commit"); err != nil {
		return nil, err
	}
	if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "second"}, true, st.cache); err != nil {
		return nil, err
	}
	return st, nil
}

// git2k is the git side of the 2,000-file scenarios: a worktree that
// pushes to a local bare repository over file://.
type git2k struct {
	dir, remote, firstTree string
	rb                     string // a bare copy the rollback and restore scenarios move
}

func (b *bencher) git2k() (*git2k, error) {
	if b.g2k != nil {
		return b.g2k, nil
	}
	g := &git2k{dir: b.path("git2k"), remote: b.path("git2k-remote.git")}
	if _, err := b.small.write(g.dir); err != nil {
		return nil, err
	}
	steps := [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "initial"},
		{"init", "-q", "--bare", "-b", "main", g.remote}, {"remote", "add", "origin", "file://" + g.remote}, {"push", "-q", "-u", "origin", "main"}}
	for _, a := range steps {
		if _, err := b.git(g.dir, a...); err != nil {
			return nil, err
		}
	}
	var err error
	if g.firstTree, err = b.git(g.dir, "rev-parse", "HEAD^{tree}"); err != nil {
		return nil, err
	}
	if _, err := editLine(g.dir, b.small, 1, 0, "second commit"); err != nil {
		return nil, err
	}
	if _, err := b.timeGit(g.dir, []string{"add", "-A"}, []string{"commit", "-q", "-m", "second"}, []string{"push", "-q"}); err != nil {
		return nil, err
	}
	g.rb = b.path("git2k-rollback.git")
	if _, err := b.git(b.root, "clone", "-q", "--bare", g.remote, g.rb); err != nil {
		return nil, err
	}
	b.g2k = g
	return g, nil
}

// ---- scenarios ----

type pushStats struct {
	wall, git, put, handlers, serverMS *dist
	scan, total                        *dist // as the push reports them
	maxBytes                           int64
	hashed, files, roundTrips          int
	watched                            int // recorded pushes the watcher answered
	routes                             map[string][]float64
}

// pushIncremental changes one file and runs the real `lockstep push`
// binary end to end, iterations times.
func (b *bencher) pushIncremental(fsync bool, name string) (*pushStats, error) {
	s, err := b.server(fsync)
	if err != nil {
		return nil, err
	}
	st, err := b.inc(fsync)
	if err != nil {
		return nil, err
	}
	g, err := b.git2k()
	if err != nil {
		return nil, err
	}
	if b.o.watch {
		stop, err := b.startWatch(st.dir)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	rec := newPushRec()
	wall, gd, err := b.measurePair(name, 2, b.o.iters, func(i int) (time.Duration, error) {
		return b.lsPush(s, st, i, 2, rec)
	}, func(i int) (time.Duration, error) {
		if _, err := editLine(g.dir, b.small, 7, 3, fmt.Sprintf("push %s %d", name, i)); err != nil {
			return 0, err
		}
		return b.timeGit(g.dir, []string{"add", "-A"}, []string{"commit", "-q", "-m", "x"}, []string{"push", "-q"})
	})
	if err != nil {
		return nil, err
	}
	return rec.stats(wall, gd), nil
}

// pushRec collects what the recorded iterations of lsPush report.
type pushRec struct {
	puts, handlers, servers, scans, totals []float64
	ps                                     *pushStats
}

func newPushRec() *pushRec { return &pushRec{ps: &pushStats{routes: map[string][]float64{}}} }

// stats are the collected distributions with the wall times of the
// measure loop (wall) and of the other column (other).
func (r *pushRec) stats(wall, other *dist) *pushStats {
	ps := r.ps
	ps.wall, ps.git, ps.put, ps.handlers, ps.serverMS = wall, other, newDist(r.puts), newDist(r.handlers), newDist(r.servers)
	ps.scan, ps.total = newDist(r.scans), newDist(r.totals)
	return ps
}

// lsPush changes one file of st's worktree and runs the real `lockstep
// push` binary against s once; iterations from warm on are recorded in
// rec.
func (b *bencher) lsPush(s *benchServer, st *incState, i, warm int, rec *pushRec) (time.Duration, error) {
	if _, err := editLine(st.dir, b.small, 7, 3, fmt.Sprintf("push %d", i)); err != nil {
		return 0, err
	}
	s.timer.reset()
	c := b.cmd(st.dir, b.bin, "push", st.dir, "--repo", st.repo, "--expect-current", "--json")
	c.Env = append(slices.Clone(b.env), "LOCKSTEP_URL="+s.url, "LOCKSTEP_KEY="+s.key)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	t := time.Now()
	out, err := c.Output()
	d := time.Since(t)
	if err != nil {
		return 0, fmt.Errorf("lockstep push: %v: %s", err, stderr.String())
	}
	var rep pushOutput
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, fmt.Errorf("push report: %w: %s", err, out)
	}
	if !rep.Changed {
		return 0, fmt.Errorf("push %d did not change the branch", i)
	}
	put, total, _ := s.timer.read()
	if i >= warm {
		ps := rec.ps
		rec.puts = append(rec.puts, float64(put.Microseconds())/1000)
		rec.handlers = append(rec.handlers, float64(total.Microseconds())/1000)
		rec.servers = append(rec.servers, rep.ServerMS)
		rec.scans = append(rec.scans, rep.ScanMS)
		rec.totals = append(rec.totals, rep.TotalMS)
		ps.maxBytes = max(ps.maxBytes, rep.BytesSent)
		ps.hashed, ps.files, ps.roundTrips = rep.Hashed, rep.Files, rep.RoundTrips
		if rep.Watched {
			ps.watched++
		}
		for k, v := range s.timer.routes() {
			ps.routes[k] = append(ps.routes[k], float64(v.Microseconds())/1000)
		}
	}
	return d, nil
}

// startWatch runs `lockstep watch --dir dir` (the --bin binary) until the
// returned stop is called, once its socket answers.
func (b *bencher) startWatch(dir string) (stop func(), err error) {
	c := b.cmd(dir, b.bin, "watch", "--dir", dir)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("lockstep watch: %w", err)
	}
	stop = func() {
		c.Process.Signal(unix.SIGTERM)
		c.Wait()
	}
	sock := filepath.Join(dir, ".lockstep", "watch.sock")
	for t := time.Now(); time.Since(t) < 30*time.Second; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return stop, nil
		}
	}
	stop()
	return nil, fmt.Errorf("lockstep watch did not listen within 30 s: %s", stderr.String())
}

var gitPushCmd = "git add -A && git commit -q -m x && git push -q (file:// bare)"

func (b *bencher) benchPushIncremental() error {
	ps, err := b.pushIncremental(true, "push-incremental")
	if err != nil {
		return err
	}
	b.addPushRows("push-incremental", ps, ps.git, true)
	return nil
}

func (b *bencher) addPushRows(name string, ps *pushStats, gd *dist, serverRow bool) {
	st := b.incs[true]
	if st == nil {
		st = b.incs[false]
	}
	r := b.add(&benchRow{Name: name, Size: b.small.describe(st.bytes), LS: ps.wall, Git: gd, GitCmd: gitPushCmd, Target: "≤ git; bytes sent < 64 KiB"})
	r.check("slower than git", ps.wall.Median <= gd.Median)
	r.check(fmt.Sprintf("sent %d B", ps.maxBytes), ps.maxBytes < 64<<10)
	r.note("whole `lockstep push --expect-current` process; %d files scanned, %d hashed, %d round trips, max %d B sent", ps.files, ps.hashed, ps.roundTrips, ps.maxBytes)
	if b.o.watch {
		r.note("`lockstep watch` running (--watch): %d of %d measured pushes took its changed paths", ps.watched, ps.scan.N)
	}
	r.note("inside the process (total_ms) median %.2f ms: scan %.2f ms, server_ms (client view: missing+objects+PUT) %.2f ms; so process start (package inits), flag parsing and exit take about %.1f ms",
		ps.total.Median, ps.scan.Median, ps.serverMS.Median, ps.wall.Median-ps.total.Median)
	r.note("all server handlers of one push median %.2f ms (POST /objects includes receiving the pack the client streams while it builds it)", ps.handlers.Median)
	keys := slices.Sorted(maps.Keys(ps.routes))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, newDist(ps.routes[k]).Median))
	}
	r.note("server handler medians per request (ms): %s", strings.Join(parts, ", "))
	if serverRow {
		sr := b.add(&benchRow{Name: name + ":server", Size: r.Size, LS: ps.put, Target: "< 5 ms"})
		sr.check("PUT /worktree?tree= handler ≥ 5 ms", ps.put.Median < 5)
		sr.note("time inside the handler of the final PUT /worktree?tree= (in-process timer)")
	}
}

func (b *bencher) benchPushTarFull() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	body, err := b.small.tar()
	if err != nil {
		return err
	}
	n := b.slow()
	ls, err := b.measure("push-tar-full", 1, n, func(i int) (time.Duration, error) {
		name := b.name("full")
		if _, err := s.c.CreateRepo(b.ctx, name, "main"); err != nil {
			return 0, err
		}
		t := time.Now()
		_, err := s.c.PushTar(b.ctx, name, bytes.NewReader(body), client.WriteOptions{Branch: "main", ExpectOID: lockstep.ZeroOID, Message: "full"})
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	dir := b.path("full-git-wt")
	nbytes, err := b.small.write(dir)
	if err != nil {
		return err
	}
	gd, err := b.measure("git-push-tar-full", 1, n, func(i int) (time.Duration, error) {
		gdir := b.path(b.name("full-git") + ".git")
		if _, err := b.git(b.root, "init", "-q", "--bare", "-b", "main", gdir); err != nil {
			return 0, err
		}
		return b.timeGit(dir, []string{"--git-dir=" + gdir, "--work-tree=" + dir, "add", "-A"},
			[]string{"--git-dir=" + gdir, "--work-tree=" + dir, "commit", "-q", "-m", "full"})
	})
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "push-tar-full", Size: b.small.describe(nbytes), LS: ls, Git: gd, GitCmd: "git add -A && git commit (fresh repo)", Target: "< 300 ms"})
	r.check("≥ 300 ms", ls.Median < 300)
	r.note("PUT /worktree with a %.1f MB tar into a new repository", float64(len(body))/1e6)
	return nil
}

func (b *bencher) benchRollback(fsync bool, name string) error {
	s, err := b.server(fsync)
	if err != nil {
		return err
	}
	st, err := b.inc(fsync)
	if err != nil {
		return err
	}
	cur, err := s.c.Ref(b.ctx, st.repo, "main")
	if err != nil {
		return err
	}
	g, err := b.git2k()
	if err != nil {
		return err
	}
	var hrb []float64
	ls, gd, err := b.measurePair(name, 3, b.o.iters, func(i int) (time.Duration, error) {
		var res *client.PushResult
		d, err := timed(s, &hrb, func() (err error) {
			res, err = s.c.Rollback(b.ctx, st.repo, st.first, client.WriteOptions{Branch: "main", ExpectOID: cur, Message: "rollback"})
			return err
		})
		if err != nil {
			return 0, err
		}
		cur = res.Commit
		return d, nil
	}, func(i int) (time.Duration, error) {
		t := time.Now()
		oid, err := b.git(g.rb, "commit-tree", g.firstTree, "-p", "main", "-m", "rollback")
		if err != nil {
			return 0, err
		}
		if _, err := b.git(g.rb, "update-ref", "refs/heads/main", oid); err != nil {
			return 0, err
		}
		return time.Since(t), nil
	})
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: name, Size: b.small.describe(st.bytes), LS: ls, Git: gd, GitCmd: "git commit-tree $OLDTREE -p main + git update-ref (bare)", Target: "≤ git"})
	r.check("slower than git", ls.Median <= gd.Median)
	r.note("POST /rollback with expect_oid over a keep-alive connection; %s", handlerNote(hrb, 3))
	return nil
}

// benchIdempotency: the same rollback with and without an
// Idempotency-Key, alternated (docs/idempotency.md).
func (b *bencher) benchIdempotency() error {
	name := "idempotency-rollback"
	s, err := b.server(true)
	if err != nil {
		return err
	}
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	cur, err := s.c.Ref(b.ctx, st.repo, "main")
	if err != nil {
		return err
	}
	plain := *s.c
	plain.NoIdempotencyKeys = true
	rollback := func(c *client.Client) func(int) (time.Duration, error) {
		return func(int) (time.Duration, error) {
			t := time.Now()
			res, err := c.Rollback(b.ctx, st.repo, st.first, client.WriteOptions{Branch: "main", ExpectOID: cur, Message: "rollback"})
			if err != nil {
				return 0, err
			}
			cur = res.Commit
			return time.Since(t), nil
		}
	}
	keyed, unkeyed, err := b.measurePair(name, 3, b.o.iters, rollback(s.c), rollback(&plain))
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: name, LS: keyed, Git: unkeyed, GitCmd: "the same POST /rollback without Idempotency-Key (this column)", Target: "< +0.3 ms"})
	r.check("the key costs 0.3 ms or more", keyed.Median-unkeyed.Median < 0.3)
	r.note("overhead %.3f ms at the median: one read of the key, its record inserted as done in the commit's own transaction (docs/idempotency.md)", keyed.Median-unkeyed.Median)
	return nil
}

func (b *bencher) benchRead() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	g, err := b.git2k()
	if err != nil {
		return err
	}
	head, err := s.c.Ref(b.ctx, st.repo, "main")
	if err != nil {
		return err
	}
	ghead, err := b.git(g.remote, "rev-parse", "main")
	if err != nil {
		return err
	}
	type sc struct {
		name, gitCmd string
		ls           func() error
		git          []string
	}
	for _, x := range []sc{
		{"read-commit", "git cat-file -p $OID", func() error { _, err := s.c.Commit(b.ctx, st.repo, head); return err }, []string{"cat-file", "-p", ghead}},
		{"read-refs", "git for-each-ref", func() error { _, err := s.c.Refs(b.ctx, st.repo); return err }, []string{"for-each-ref"}},
	} {
		ls, err := b.measure(x.name, 5, b.o.iters*2, func(int) (time.Duration, error) {
			t := time.Now()
			err := x.ls()
			return time.Since(t), err
		})
		if err != nil {
			return err
		}
		gd, err := b.measure("git-"+x.name, 2, b.o.iters, func(int) (time.Duration, error) { return b.timeGit(g.remote, x.git) })
		if err != nil {
			return err
		}
		r := b.add(&benchRow{Name: x.name, LS: ls, Git: gd, GitCmd: x.gitCmd, Target: "< 2 ms"})
		r.check("≥ 2 ms", ls.Median < 2)
		r.note("HTTP round trip over keep-alive, JSON decoded; git pays a process start")
	}
	return nil
}

// bigState is a fork network with a git twin: the big (20k) one carries
// the merge scenarios, the small (200) one only forks.
type bigState struct {
	t                treeGen
	repo, dir, cache string
	gitDir           string
	bytes            int64
	ws               string // preflight workspace
	preflightReady   bool
}

func (b *bencher) network(big bool) (*bigState, error) {
	if big && b.bigNet != nil {
		return b.bigNet, nil
	}
	if !big && b.smallNet != nil {
		return b.smallNet, nil
	}
	s, err := b.server(true)
	if err != nil {
		return nil, err
	}
	tag, t := "n200", b.tiny
	if big {
		tag, t = "n20k", b.big
	}
	st := &bigState{t: t, repo: tag, dir: b.path(tag + "-wt"), cache: b.path("statcache", tag), gitDir: b.path(tag + ".git")}
	start := time.Now()
	if st.bytes, err = t.write(st.dir); err != nil {
		return nil, err
	}
	if _, err := s.c.CreateRepo(b.ctx, st.repo, "main"); err != nil {
		return nil, err
	}
	if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "initial"}, true, st.cache); err != nil {
		return nil, err
	}
	if _, err := b.git(b.root, "init", "-q", "--bare", "-b", "main", st.gitDir); err != nil {
		return nil, err
	}
	if err := b.gitCommitWT(st, "initial"); err != nil {
		return nil, err
	}
	b.logf("  %s network: %s, set up in %s", tag, t.describe(st.bytes), time.Since(start).Round(time.Millisecond))
	if big {
		b.bigNet = st
	} else {
		b.smallNet = st
	}
	return st, nil
}

// gitCommitWT commits the network's worktree on the git twin's HEAD branch.
func (b *bencher) gitCommitWT(st *bigState, msg string) error {
	_, err := b.timeGit(st.dir, []string{"--git-dir=" + st.gitDir, "--work-tree=" + st.dir, "add", "-A"},
		[]string{"--git-dir=" + st.gitDir, "--work-tree=" + st.dir, "commit", "-q", "-m", msg})
	return err
}

func (b *bencher) benchFork() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	type res struct {
		st             *bigState
		ls, upd, clone *dist
		handler        string
	}
	var out [2]res
	for k, big := range []bool{true, false} {
		st, err := b.network(big)
		if err != nil {
			return err
		}
		name := map[bool]string{true: "fork-20k", false: "fork-200"}[big]
		var hf []float64
		ls, err := b.measure(name, 3, b.o.iters, func(i int) (time.Duration, error) {
			ws := b.name("fk-" + st.repo)
			return timed(s, &hf, func() error { _, err := s.c.Fork(b.ctx, st.repo, ws); return err })
		})
		if err != nil {
			return err
		}
		upd, err := b.measure("git-update-ref-"+name, 2, b.o.iters, func(i int) (time.Duration, error) {
			return b.timeGit(b.root, []string{"--git-dir=" + st.gitDir, "update-ref", "refs/heads/" + b.name("ws"), "main"})
		})
		if err != nil {
			return err
		}
		clone, err := b.measure("git-clone-shared-"+name, 2, b.o.iters, func(i int) (time.Duration, error) {
			return b.timeGit(b.root, []string{"clone", "-q", "--bare", "--shared", st.gitDir, b.path(b.name("gclone") + ".git")})
		})
		if err != nil {
			return err
		}
		out[k] = res{st, ls, upd, clone, handlerNote(hf, 3)}
	}
	for k, name := range []string{"fork-20k", "fork-200"} {
		x := out[k]
		r := b.add(&benchRow{Name: name, Size: x.st.t.describe(x.st.bytes), LS: x.ls, Git: x.upd, GitCmd: "git update-ref refs/heads/ws main", Target: "< 2 ms; sizes within ±20%"})
		r.check("≥ 2 ms", x.ls.Median < 2)
		r.note("git clone -q --bare --shared: median %.2f ms (p90 %.2f); %s", x.clone.Median, x.clone.P90, x.handler)
		if k == 1 {
			rel := x.ls.Median/out[0].ls.Median - 1
			r.check(fmt.Sprintf("%+.0f%% vs fork-20k", rel*100), rel >= -0.2 && rel <= 0.2)
			r.note("fork-200 vs fork-20k: %+.0f%%", rel*100)
		}
	}
	return nil
}

// preflightSetup gives the big network a workspace with 10 changed files
// and main 10 other changes, 5 of them in the same files (other hunks);
// the git twin gets the same as branches feature and main.
func (b *bencher) preflightSetup() (*bigState, error) {
	st, err := b.network(true)
	if err != nil {
		return nil, err
	}
	if st.preflightReady {
		return st, nil
	}
	s, _ := b.server(true)
	st.ws = "pre-ws"
	if _, err := s.c.Fork(b.ctx, st.repo, st.ws); err != nil {
		return nil, err
	}
	gd := "--git-dir=" + st.gitDir
	if _, err := b.git(b.root, gd, "update-ref", "refs/heads/feature", "main"); err != nil {
		return nil, err
	}
	saved := map[int][]byte{}
	for j := 5; j < 15; j++ { // theirs: the end of files 5..14
		old, err := editLine(st.dir, st.t, j, -3, fmt.Sprintf("theirs %d", j))
		if err != nil {
			return nil, err
		}
		saved[j] = old
	}
	if _, err := b.pushDir(s.c, st.dir, st.ws, client.WriteOptions{Message: "theirs"}, true, st.cache); err != nil {
		return nil, err
	}
	if _, err := b.git(b.root, gd, "symbolic-ref", "HEAD", "refs/heads/feature"); err != nil {
		return nil, err
	}
	if err := b.gitCommitWT(st, "theirs"); err != nil {
		return nil, err
	}
	for j, c := range saved {
		if err := os.WriteFile(filepath.Join(st.dir, st.t.path(j)), c, 0o644); err != nil {
			return nil, err
		}
	}
	for j := 0; j < 10; j++ { // ours: the start of files 0..9
		if _, err := editLine(st.dir, st.t, j, 2, fmt.Sprintf("ours %d", j)); err != nil {
			return nil, err
		}
	}
	if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "ours"}, true, st.cache); err != nil {
		return nil, err
	}
	if _, err := b.git(b.root, gd, "symbolic-ref", "HEAD", "refs/heads/main"); err != nil {
		return nil, err
	}
	if err := b.gitCommitWT(st, "ours"); err != nil {
		return nil, err
	}
	st.preflightReady = true
	return st, nil
}

func (b *bencher) benchPreflight() error {
	s, _ := b.server(true)
	st, err := b.preflightSetup()
	if err != nil {
		return err
	}
	var inner []float64
	var tree string
	var hp []float64
	var gtree string
	ls, gd, err := b.measurePair("preflight-deep-20k", 3, b.o.iters, func(i int) (time.Duration, error) {
		var m *api.MergeResponse
		d, err := timed(s, &hp, func() (err error) {
			m, err = s.c.MergeBranches(b.ctx, st.repo, client.MergeRequest{Ours: "main", Theirs: st.ws + ":main", Preflight: true, Deep: true})
			return err
		})
		if err != nil {
			return 0, err
		}
		if !m.Clean {
			return 0, fmt.Errorf("preflight not clean: %+v", m)
		}
		tree = m.Tree
		inner = append(inner, m.DurationMS)
		return d, nil
	}, func(i int) (time.Duration, error) {
		t := time.Now()
		out, err := b.git(b.root, "--git-dir="+st.gitDir, "merge-tree", "--write-tree", "main", "feature")
		gtree = out
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "preflight-deep-20k", Size: st.t.describe(st.bytes), LS: ls, Git: gd, GitCmd: "git merge-tree --write-tree main feature", Target: "≤ git"})
	r.check("slower than git", ls.Median <= gd.Median)
	r.note("10 files changed on each side, 5 of them on both (other hunks); server-reported duration_ms median %.2f; %s", newDist(inner[3:]).Median, handlerNote(hp, 3))
	if tree != gtree {
		r.note("merged tree differs from git's (%s vs %s)", short(tree), short(gtree))
	} else {
		r.note("merged tree identical to git's")
	}
	return nil
}

// benchPreflightRenames: branch rn-ours moves 100 files of the 20k tree
// into another directory, branch rn-theirs edits the same 100 files; the
// deep preflight follows the renames (git merge-tree does too). The
// worktree and the git twin go back to main afterwards.
func (b *bencher) benchPreflightRenames() error {
	s, _ := b.server(true)
	st, err := b.preflightSetup()
	if err != nil {
		return err
	}
	gd := "--git-dir=" + st.gitDir
	// 100 files of the 20k tree (fewer on the tiny trees of a smoke run:
	// the files must exist).
	n := min(100, st.t.n/4)
	first := min(100, st.t.n-n)
	branch := func(name string, change, undo func() error) error {
		if err := change(); err != nil {
			return err
		}
		if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Branch: name, From: "main", Message: name}, false, b.path("statcache", st.repo+"-"+name)); err != nil {
			return err
		}
		if _, err := b.git(b.root, gd, "update-ref", "refs/heads/"+name, "main"); err != nil {
			return err
		}
		if _, err := b.git(b.root, gd, "symbolic-ref", "HEAD", "refs/heads/"+name); err != nil {
			return err
		}
		if err := b.gitCommitWT(st, name); err != nil {
			return err
		}
		if err := undo(); err != nil {
			return err
		}
		_, err := b.git(b.root, gd, "symbolic-ref", "HEAD", "refs/heads/main")
		return err
	}
	saved := map[int][]byte{}
	err = branch("rn-theirs", func() error {
		for j := first; j < first+n; j++ {
			old, err := editLine(st.dir, st.t, j, -2, fmt.Sprintf("theirs rn %d", j))
			if err != nil {
				return err
			}
			saved[j] = old
		}
		return nil
	}, func() error {
		for j, c := range saved {
			if err := os.WriteFile(filepath.Join(st.dir, st.t.path(j)), c, 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	move := func(from, to string) error {
		for j := first; j < first+n; j++ {
			dst := filepath.Join(st.dir, to, st.t.path(j))
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.Rename(filepath.Join(st.dir, from, st.t.path(j)), dst); err != nil {
				return err
			}
		}
		return nil
	}
	err = branch("rn-ours", func() error { return move("", "moved") }, func() error {
		if err := move("moved", ""); err != nil {
			return err
		}
		return os.RemoveAll(filepath.Join(st.dir, "moved"))
	})
	if err != nil {
		return err
	}
	var inner, hp []float64
	var tree, gtree string
	ls, gdist, err := b.measurePair("preflight-renames-20k", 3, b.o.iters, func(i int) (time.Duration, error) {
		var m *api.MergeResponse
		d, err := timed(s, &hp, func() (err error) {
			m, err = s.c.MergeBranches(b.ctx, st.repo, client.MergeRequest{Ours: "rn-ours", Theirs: "rn-theirs", Preflight: true, Deep: true})
			return err
		})
		if err != nil {
			return 0, err
		}
		if !m.Clean {
			return 0, fmt.Errorf("renames preflight not clean: %+v", m)
		}
		tree = m.Tree
		inner = append(inner, m.DurationMS)
		return d, nil
	}, func(i int) (time.Duration, error) {
		t := time.Now()
		out, err := b.git(b.root, gd, "merge-tree", "--write-tree", "rn-ours", "rn-theirs")
		gtree = out
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "preflight-renames-20k", Size: st.t.describe(st.bytes), LS: ls, Git: gdist, GitCmd: "git merge-tree --write-tree rn-ours rn-theirs", Target: "≤ git"})
	r.check("slower than git", ls.Median <= gdist.Median)
	r.note("ours moved %d files to moved/, theirs edited the same %d: a clean merge only by following the renames; server-reported duration_ms median %.2f; %s", n, n, newDist(inner[3:]).Median, handlerNote(hp, 3))
	if tree != gtree {
		r.note("merged tree differs from git's (%s vs %s)", short(tree), short(gtree))
	} else {
		r.note("merged tree identical to git's")
	}
	return nil
}

func (b *bencher) benchMaterialize() error {
	s, _ := b.server(true)
	st, err := b.preflightSetup()
	if err != nil {
		return err
	}
	var inner []float64
	var hm []float64
	ls, err := b.measure("materialize-20k", 2, b.o.iters, func(i int) (time.Duration, error) {
		// A new pair: a workspace with 10 changed files, main with 10 others.
		ws := b.name("mat-ws")
		if _, err := s.c.Fork(b.ctx, st.repo, ws); err != nil {
			return 0, err
		}
		off := 20 + 20*i
		saved, edited := map[int][]byte{}, map[int][]byte{}
		for k := 0; k < 10; k++ {
			j := (off + k) % st.t.n
			old, err := editLine(st.dir, st.t, j, 2, fmt.Sprintf("mat theirs %d", i))
			if err != nil {
				return 0, err
			}
			saved[j] = old
			edited[j], _ = os.ReadFile(filepath.Join(st.dir, st.t.path(j)))
		}
		if _, err := b.pushDir(s.c, st.dir, ws, client.WriteOptions{Message: "theirs"}, true, st.cache); err != nil {
			return 0, err
		}
		for j, c := range saved {
			os.WriteFile(filepath.Join(st.dir, st.t.path(j)), c, 0o644)
		}
		for k := 10; k < 20; k++ {
			if _, err := editLine(st.dir, st.t, (off+k)%st.t.n, 2, fmt.Sprintf("mat ours %d", i)); err != nil {
				return 0, err
			}
		}
		if _, err := b.pushDir(s.c, st.dir, st.repo, client.WriteOptions{Message: "ours"}, true, st.cache); err != nil {
			return 0, err
		}
		for j, c := range edited { // the worktree becomes the merge result
			os.WriteFile(filepath.Join(st.dir, st.t.path(j)), c, 0o644)
		}
		var m *api.MergeResponse
		d, err := timed(s, &hm, func() (err error) {
			m, err = s.c.MergeBranches(b.ctx, st.repo, client.MergeRequest{Ours: "main", Theirs: ws + ":main", Materialize: true, Message: "merge " + ws})
			return err
		})
		if err != nil {
			return 0, err
		}
		if !m.Clean || m.Commit == "" || m.FastForward {
			return 0, fmt.Errorf("materialize: want a clean merge commit: %+v", m)
		}
		if i >= 2 {
			inner = append(inner, m.DurationMS)
		}
		return d, nil
	})
	if err != nil {
		return err
	}
	gd, err := b.measure("git-materialize", 2, b.o.iters, func(i int) (time.Duration, error) {
		gdir := "--git-dir=" + st.gitDir
		t := time.Now()
		tree, err := b.git(b.root, gdir, "merge-tree", "--write-tree", "main", "feature")
		if err != nil {
			return 0, err
		}
		c, err := b.git(b.root, gdir, "commit-tree", tree, "-p", "main", "-p", "feature", "-m", "merge")
		if err != nil {
			return 0, err
		}
		_, err = b.git(b.root, gdir, "update-ref", "refs/heads/"+b.name("merged"), c)
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "materialize-20k", Size: st.t.describe(st.bytes), LS: ls, Git: gd, GitCmd: "git merge-tree --write-tree + commit-tree -p -p + update-ref", Target: "< 10 ms"})
	r.check("≥ 10 ms", ls.Median < 10)
	r.note("POST /merges {materialize}: a two-parent merge commit, 10 files changed on each side; server-reported duration_ms median %.2f; %s", newDist(inner).Median, handlerNote(hm, 2))
	return nil
}

func (b *bencher) benchCheckpoint() error {
	s, _ := b.server(true)
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	g, err := b.git2k()
	if err != nil {
		return err
	}
	ws := "cp-ws"
	if _, err := s.c.Fork(b.ctx, st.repo, ws); err != nil {
		return err
	}
	var ids []string
	cp, err := b.measure("checkpoint", 3, b.o.iters, func(i int) (time.Duration, error) {
		t := time.Now()
		c, err := s.c.CreateCheckpoint(b.ctx, ws, api.CheckpointRequest{Label: fmt.Sprintf("bench %d", i)})
		d := time.Since(t)
		if err != nil {
			return 0, err
		}
		if c.ID == "" {
			return 0, fmt.Errorf("checkpoint answer without an id: %+v", c)
		}
		ids = append(ids, c.ID)
		return d, nil
	})
	if err != nil {
		return err
	}
	rs, err := b.measure("restore", 3, b.o.iters, func(i int) (time.Duration, error) {
		t := time.Now()
		_, err := s.c.RestoreCheckpoint(b.ctx, ws, ids[i%len(ids)], api.RestoreRequest{})
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	gcp, err := b.measure("git-checkpoint", 2, b.o.iters, func(i int) (time.Duration, error) {
		return b.timeGit(g.rb, []string{"update-ref", "refs/checkpoints/" + b.name("cp"), "main"})
	})
	if err != nil {
		return err
	}
	grs, err := b.measure("git-restore", 2, b.o.iters, func(i int) (time.Duration, error) {
		t := time.Now()
		oid, err := b.git(g.rb, "commit-tree", g.firstTree, "-p", "main", "-m", "restore")
		if err != nil {
			return 0, err
		}
		_, err = b.git(g.rb, "update-ref", "refs/heads/main", oid)
		return time.Since(t), err
	})
	if err != nil {
		return err
	}
	db := "database branching off (no LOCKSTEP_BRANCH_DATABASE_URL): code only"
	if b.o.branchDBURL != "" {
		db = "database branching on, but the bench binds no template: code only"
	}
	r := b.add(&benchRow{Name: "checkpoint", LS: cp, Git: gcp, GitCmd: "git update-ref refs/checkpoints/N main", Target: "info"})
	r.Pass = true
	r.note("POST /repos/{ws}/checkpoints; %s", db)
	r = b.add(&benchRow{Name: "restore", LS: rs, Git: grs, GitCmd: "git commit-tree + update-ref (bare)", Target: "info"})
	r.Pass = true
	r.note("POST /repos/{ws}/checkpoints/{id}/restore; %s", db)
	return nil
}

func (b *bencher) benchRun() error {
	s, _ := b.server(true)
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	dir := b.path("run-wt")
	nbytes, err := b.small.write(dir)
	if err != nil {
		return err
	}
	ws := "run-ws"
	if _, err := s.c.Fork(b.ctx, st.repo, ws); err != nil {
		return err
	}
	snapArgs := []string{"--driver", "copy", "--state-root", b.path("snap-state"), "--data-root", b.path("snap-data")}
	n := max(3, b.o.iters/2)
	for _, x := range []struct {
		name, cmd string
		limit     float64
		wantExit  int
	}{{"run-true", "true", 150, 0}, {"run-false", "false", 300, 1}} {
		steps := runSteps{}
		ls, err := b.measure(x.name, 1, n, func(i int) (time.Duration, error) {
			return b.lockstepRun(s, ws, dir, snapArgs, x.cmd, x.wantExit, &steps, i >= 1)
		})
		if err != nil {
			return err
		}
		// git analogue: commit the worktree as the checkpoint; on failure reset + clean.
		gdir := b.path("run-git-" + x.cmd)
		if _, err := b.small.write(gdir); err != nil {
			return err
		}
		if _, err := b.timeGit(gdir, []string{"init", "-q", "-b", "main"}, []string{"add", "-A"}, []string{"commit", "-q", "-m", "init"}); err != nil {
			return err
		}
		gd, err := b.measure("git-"+x.name, 1, n, func(i int) (time.Duration, error) {
			t := time.Now()
			if _, err := b.timeGit(gdir, []string{"add", "-A"}, []string{"commit", "-q", "--allow-empty", "-m", "cp"}); err != nil {
				return 0, err
			}
			b.cmd(gdir, x.cmd).Run()
			if x.wantExit != 0 {
				if _, err := b.timeGit(gdir, []string{"reset", "-q", "--hard"}, []string{"clean", "-q", "-fdx"}); err != nil {
					return 0, err
				}
			}
			return time.Since(t), nil
		})
		if err != nil {
			return err
		}
		gitCmd := "git add -A && git commit && true"
		if x.wantExit != 0 {
			gitCmd = "git add -A && git commit; false; git reset --hard && git clean -fdx"
		}
		r := b.add(&benchRow{Name: x.name, Size: b.small.describe(nbytes), LS: ls, Git: gd, GitCmd: gitCmd, Target: fmt.Sprintf("< %.0f ms", x.limit)})
		r.check(fmt.Sprintf("≥ %.0f ms", x.limit), ls.Median < x.limit)
		r.note("whole `lockstep run --driver copy -- %s` process on %s; step medians (ms): %s", x.cmd, b.fsType, &steps)
	}
	return nil
}

func (b *bencher) benchFsyncOff() error {
	if !b.o.fsyncOff {
		b.skip("push-incremental (fsync=false)", "--compare-fsync=false")
		b.skip("rollback (fsync=false)", "--compare-fsync=false")
		return nil
	}
	ps, err := b.pushIncremental(false, "push-incremental-nofsync")
	if err != nil {
		return err
	}
	b.addPushRows("push-incremental (fsync=false)", ps, ps.git, false)
	b.rows[len(b.rows)-1].note("server PUT /worktree?tree= handler median %.2f ms (p90 %.2f)", ps.put.Median, ps.put.P90)
	return b.benchRollback(false, "rollback (fsync=false)")
}

// ---- output ----

func (b *bencher) print() {
	if b.o.asJSON {
		enc := json.NewEncoder(b.e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(map[string]any{"machine": b.machine(), "rows": b.rows})
		return
	}
	m := b.machine()
	fmt.Fprintf(b.e.stdout, "lockstep bench — %s, %d CPUs, %s, %s on %s, go %s, %s, load average at the end %s\n\n",
		m["date"], runtime.NumCPU(), m["kernel"], m["dir"], m["fs"], runtime.Version(), m["git"], m["loadavg"])
	w := tabwriter.NewWriter(b.e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tLOCKSTEP MED\tP90\tGIT MED\tRATIO\tTARGET\tRESULT")
	for _, r := range b.rows {
		if r.Skipped != "" {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\tskipped: %s\n", r.Name, r.Skipped)
			continue
		}
		gm, ratio := "-", "-"
		if r.Git != nil {
			gm = fmtMS(r.Git.Median)
		}
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", r.Ratio)
		}
		res := "PASS"
		if r.Target == "info" {
			res = "-"
		} else if !r.Pass {
			res = "FAIL: " + strings.Join(r.Failed, "; ")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, fmtMS(r.LS.Median), fmtMS(r.LS.P90), gm, ratio, r.Target, res)
	}
	w.Flush()
	fmt.Fprintln(b.e.stdout)
	for _, r := range b.rows {
		if r.Skipped != "" {
			continue
		}
		fmt.Fprintf(b.e.stdout, "%s", r.Name)
		if r.Size != "" {
			fmt.Fprintf(b.e.stdout, " [%s]", r.Size)
		}
		if r.GitCmd != "" {
			fmt.Fprintf(b.e.stdout, " — git: %s", r.GitCmd)
		}
		fmt.Fprintln(b.e.stdout)
		for _, n := range r.Notes {
			fmt.Fprintf(b.e.stdout, "    %s\n", n)
		}
	}
}

func fmtMS(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func (b *bencher) machine() map[string]string {
	m := map[string]string{"date": time.Now().UTC().Format("2006-01-02 15:04 MST"), "dir": b.root, "fs": b.fsType,
		"cpus": strconv.Itoa(runtime.NumCPU()), "go": runtime.Version()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m["kernel"] = "Linux " + unix.ByteSliceToString(u.Release[:])
	}
	if out, err := exec.Command("git", "--version").Output(); err == nil {
		m["git"] = strings.TrimSpace(string(out))
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		m["loadavg"] = strings.Join(strings.Fields(string(la))[:3], " ")
	}
	if len(b.o.only) > 0 {
		m["only"] = strings.Join(b.o.only, ",")
	}
	return m
}

func fsTypeOf(p string) string {
	var s unix.Statfs_t
	if err := unix.Statfs(p, &s); err != nil {
		return "unknown"
	}
	switch uint32(s.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	}
	return fmt.Sprintf("fs 0x%x", s.Type)
}

// pushDir is the incremental push of `lockstep push` (client.PushDir)
// with the stat cache at cachePath.
func (b *bencher) pushDir(c *client.Client, dir, repo string, o client.WriteOptions, expectCurrent bool, cachePath string) (*client.PushDirResult, error) {
	return c.PushDir(b.ctx, repo, dir, client.PushDirOptions{WriteOptions: o, ExpectCurrent: expectCurrent, StatCache: cachePath})
}
