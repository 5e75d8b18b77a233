package bench

// The load generator of `lockstep load`: simulated agents against any set
// of Lockstep base URLs (one server, or several replicas behind nothing or
// behind a load balancer), every HTTP request sent to the next URL in
// turn. Each agent loops fork → checkout → 1–3 pushes with expect_oid →
// preflight → the gate's checks → promote; afterwards every write the
// agents were told succeeded is checked against the server (no lost
// updates) and the operations log's chain is verified.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// LoadOptions are the settings of one load run (`lockstep load`'s flags
// carry the defaults: 64 agents, 60 s).
type LoadOptions struct {
	// URLs are the servers' base URLs (http://host:port); requests go
	// to them round-robin, one request at a time. At least one.
	URLs []string
	// Key is an admin API key: the run may create the base repository,
	// set its gate and post the checks its gate requires.
	Key string
	// Agents is the number of simulated agents running at once (1–4096).
	Agents int
	// Duration is how long agents start new iterations (at least 1 s);
	// iterations under way then finish, so a run lasts a little longer.
	Duration time.Duration
	// Base is the base repository the agents fork. Created when absent,
	// with a small seed tree and a gate that requires the check
	// LoadCheckName (which the agents then post).
	Base string
	// Dir is the parent of the agents' worktrees (a temporary directory
	// under it is removed at the end); empty: os.TempDir().
	Dir string
	// Seed seeds the agents' choices (how many pushes per iteration).
	Seed uint64
	// Retry is the client's retry policy (zero: client.DefaultRetry).
	Retry client.RetryPolicy
	// Stderr receives progress lines; nil: discarded.
	Stderr io.Writer
}

// LoadCheckName is the check a base created by the load run requires.
const LoadCheckName = "load"

// Load operations, in the order of an iteration.
var loadOps = []string{"fork", "checkout", "push", "preflight", "check", "promote"}

// LoadOpStats is one operation's row: calls, failed calls (by error
// code), 5xx answers seen (retried ones included) and the latency of
// every call, failed ones included, retries included.
type LoadOpStats struct {
	Op         string         `json:"op"`
	Count      int            `json:"count"`
	Errors     int            `json:"errors"`
	ErrorCodes map[string]int `json:"error_codes,omitempty"`
	// ErrorExamples holds the first message seen per error code.
	ErrorExamples map[string]string `json:"error_examples,omitempty"`
	Status5xx     int               `json:"status_5xx"`
	P50           float64           `json:"p50_ms"`
	P99           float64           `json:"p99_ms"`
	Max           float64           `json:"max_ms"`
}

// LoadURLStats are the HTTP requests one base URL received.
type LoadURLStats struct {
	URL       string `json:"url"`
	Requests  int64  `json:"requests"`
	Status5xx int64  `json:"status_5xx"`
	// TransportErrors are requests that got no answer (connection
	// refused or reset, timeout).
	TransportErrors int64 `json:"transport_errors"`
}

// LoadReport is the result of a load run.
type LoadReport struct {
	URLs        []string `json:"urls"`
	Agents      int      `json:"agents"`
	DurationS   float64  `json:"duration_s"` // as asked
	ElapsedS    float64  `json:"elapsed_s"`  // until the last iteration ended
	Base        string   `json:"base"`
	BaseCreated bool     `json:"base_created"`
	// Checks are the checks the base's gate requires (posted by the
	// agents as success).
	Checks []string `json:"checks"`
	// Iterations counts started iterations; Promoted those that landed.
	Iterations int            `json:"iterations"`
	Promoted   int            `json:"promoted"`
	PromotesPS float64        `json:"promotes_per_s"`
	Ops        []LoadOpStats  `json:"operations"`
	URLStats   []LoadURLStats `json:"requests"`
	// Status5xx counts every 5xx answer by status (503 with Retry-After
	// is the server's backpressure, retried by the client).
	Status5xx map[string]int `json:"status_5xx"`
	Total5xx  int            `json:"total_5xx"`
	Retries   int64          `json:"retries"`
	// StaleReads are answers that showed a workspace older than a write
	// the agent had already been told succeeded (a checkout or a
	// preflight naming another commit than the agent's head).
	StaleReads int      `json:"stale_reads"`
	Stale      []string `json:"stale,omitempty"`
	// Verified counts the workspace refs and promoted commits checked
	// after the run; LostUpdates those that did not hold (a workspace
	// whose ref is not the head its agent pushed, a promoted commit not
	// reachable from the base branch); Lost describes each.
	VerifiedWorkspaces int      `json:"verified_workspaces"`
	VerifiedPromoted   int      `json:"verified_promoted"`
	LostUpdates        int      `json:"lost_updates"`
	Lost               []string `json:"lost,omitempty"`
	// VerifyErrors are checks that could not be made (the server did
	// not answer them).
	VerifyErrors []string         `json:"verify_errors,omitempty"`
	Oplog        api.VerifyResult `json:"oplog"`
}

// OK reports whether the run kept every promise: no lost update, no
// stale read, every verification made, the operations log intact.
func (r *LoadReport) OK() bool {
	return r.LostUpdates == 0 && r.StaleReads == 0 && len(r.VerifyErrors) == 0 && r.Oplog.OK
}

// ParseURLs reads the --urls flag: comma-separated http(s) base URLs.
func ParseURLs(v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimRight(strings.TrimSpace(s), "/")
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
			return nil, lockstep.Errorf(lockstep.EINVALID, "load: --urls: %q is not an http(s) base URL such as http://127.0.0.1:7070", s)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, lockstep.Errorf(lockstep.EINVALID, "load: --urls: no URL given (comma-separated base URLs, e.g. http://a:7070,http://b:7070)")
	}
	return out, nil
}

// maxLoadBase keeps workspace names (base + "-" + run + "-a" + agent +
// "-" + iteration) within the 100 characters of a repository name.
const maxLoadBase = 72

// RunLoad runs the agents, verifies what they were told, prints the
// table (or nothing: the caller may print the report as JSON) to stdout
// when it is not nil, and returns the report. An error means the run
// could not start or could not finish its verification; a finished run
// with lost updates returns its report and no error (see
// LoadReport.OK).
func RunLoad(ctx context.Context, o LoadOptions, stdout io.Writer) (*LoadReport, error) {
	switch {
	case len(o.URLs) == 0:
		return nil, lockstep.Errorf(lockstep.EINVALID, "load: at least one URL is required (--urls)")
	case o.Key == "":
		return nil, lockstep.Errorf(lockstep.EUNAUTH, "load: no API key: set LOCKSTEP_KEY (or --key, --key-file); an admin key")
	case o.Agents < 1 || o.Agents > 4096:
		return nil, lockstep.Errorf(lockstep.EINVALID, "load: --agents %d: want 1 to 4096", o.Agents)
	case o.Duration < time.Second:
		return nil, lockstep.Errorf(lockstep.EINVALID, "load: --duration %s: want at least 1s", o.Duration)
	case len(o.Base) > maxLoadBase:
		return nil, lockstep.Errorf(lockstep.EINVALID, "load: --base %q: at most %d characters (workspace names add about 25)", o.Base, maxLoadBase)
	}
	if err := lockstep.ValidateName("base repository name", o.Base); err != nil {
		return nil, err
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	parent := o.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	tmp, err := os.MkdirTemp(parent, "lockstep-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	l := newLoader(o, tmp)
	// Every URL must answer /healthz (within 30 s) before any agent starts.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	for _, u := range o.URLs {
		if err := client.New(u, o.Key).WaitReady(wctx); err != nil {
			cancel()
			return nil, lockstep.Errorf(lockstep.EUNAVAILABLE, "load: %v", err)
		}
	}
	cancel()
	rep := &LoadReport{URLs: o.URLs, Agents: o.Agents, DurationS: o.Duration.Seconds(), Base: o.Base}
	if err := l.prepare(ctx, rep); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Stderr, "load: %d agents on %s for %s (run %s, base %s:%s, checks %v)\n", o.Agents, strings.Join(o.URLs, ","), o.Duration, l.run, o.Base, l.branch, l.checks)

	start := time.Now()
	l.deadline = start.Add(o.Duration)
	var wg sync.WaitGroup
	for a := range o.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.agent(ctx, a)
		}()
	}
	wg.Wait()
	rep.ElapsedS = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	fmt.Fprintf(o.Stderr, "load: agents done after %.1f s; verifying %d workspaces\n", rep.ElapsedS, len(l.records))
	l.verify(ctx, rep)
	ov, err := l.c.VerifyOplog(ctx)
	if err != nil {
		rep.VerifyErrors = append(rep.VerifyErrors, "oplog verify: "+err.Error())
	} else {
		rep.Oplog = *ov
	}
	l.fill(rep)
	if stdout != nil {
		printLoad(stdout, rep)
	}
	return rep, nil
}

// newLoader wires the client (round-robin over o.URLs, counting answers)
// and a fresh run id.
func newLoader(o LoadOptions, tmp string) *loader {
	l := &loader{o: o, tmp: tmp, stats: map[string]*opStats{}, status5xx: map[int]int{}}
	for _, op := range loadOps {
		l.stats[op] = &opStats{}
	}
	l.rt = &roundRobin{base: o.URLs[0], urls: o.URLs, next: http.DefaultTransport, l: l, per: make([]LoadURLStats, len(o.URLs))}
	for i, u := range o.URLs {
		l.rt.per[i].URL = u
	}
	l.c = client.New(o.URLs[0], o.Key)
	l.c.HTTP = &http.Client{Transport: l.rt}
	l.c.Retry = o.Retry
	l.c.OnRetry = func(string, string, int, time.Duration, error) { atomic.AddInt64(&l.retries, 1) }
	var rb [3]byte
	for i := range rb {
		rb[i] = byte(rand.IntN(256))
	}
	l.run = fmt.Sprintf("%x", rb)
	return l
}

type loader struct {
	o        LoadOptions
	c        *client.Client
	rt       *roundRobin
	tmp      string
	run      string // this run's id, in every workspace name
	branch   string // the base's default branch
	checks   []string
	deadline time.Time
	retries  int64

	mu         sync.Mutex
	stats      map[string]*opStats
	status5xx  map[int]int
	records    []*wsRecord
	iterations int
	stale      []string
}

type opStats struct {
	ms     []float64
	errors map[string]int
	first  map[string]string
	n5xx   int
}

// wsRecord is what one agent believes about one workspace.
type wsRecord struct {
	name string
	head string // the last commit the agent was told is the workspace's tip
	// uncertain: a later write failed, so the server may hold a newer
	// commit on top of head (never an older one).
	uncertain bool
	promoted  bool // promote answered 2xx for head
}

type opKey struct{}

// roundRobin sends each request to the next base URL and counts answers.
type roundRobin struct {
	base string
	urls []string
	n    atomic.Uint64
	next http.RoundTripper
	l    *loader

	pmu sync.Mutex
	per []LoadURLStats
}

func (t *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	i := int(t.n.Add(1)-1) % len(t.urls)
	rest, ok := strings.CutPrefix(req.URL.String(), t.base)
	if !ok {
		i = 0 // not a request of the client's base URL: sent as is
	}
	if i != 0 {
		u, err := url.Parse(t.urls[i] + rest)
		if err != nil {
			return nil, err
		}
		r2 := req.Clone(req.Context())
		r2.URL, r2.Host = u, u.Host
		req = r2
	}
	resp, err := t.next.RoundTrip(req)
	t.pmu.Lock()
	t.per[i].Requests++
	if err != nil {
		t.per[i].TransportErrors++
	} else if resp.StatusCode >= 500 {
		t.per[i].Status5xx++
	}
	t.pmu.Unlock()
	if err == nil && resp.StatusCode >= 500 {
		op, _ := req.Context().Value(opKey{}).(string)
		t.l.mu.Lock()
		t.l.status5xx[resp.StatusCode]++
		if s := t.l.stats[op]; s != nil {
			s.n5xx++
		}
		t.l.mu.Unlock()
	}
	return resp, err
}

// op times one operation (retries included) and records its outcome.
func (l *loader) op(ctx context.Context, name string, f func(context.Context) error) error {
	t := time.Now()
	err := f(context.WithValue(ctx, opKey{}, name))
	ms := float64(time.Since(t).Microseconds()) / 1000
	l.mu.Lock()
	s := l.stats[name]
	s.ms = append(s.ms, ms)
	if err != nil {
		if s.errors == nil {
			s.errors = map[string]int{}
		}
		code := lockstep.ErrorCode(err)
		s.errors[code]++
		if s.first == nil {
			s.first = map[string]string{}
		}
		if _, ok := s.first[code]; !ok {
			s.first[code] = err.Error()
		}
	}
	l.mu.Unlock()
	return err
}

// prepare finds or creates the base and reads the checks its gate needs.
func (l *loader) prepare(ctx context.Context, rep *LoadReport) error {
	r, err := l.c.Repo(ctx, l.o.Base)
	if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
		if _, err = l.c.CreateRepo(ctx, l.o.Base, "main"); err == nil {
			rep.BaseCreated = true
			if err := l.seed(ctx); err != nil {
				return fmt.Errorf("load: seed %s: %w", l.o.Base, err)
			}
		} else if lockstep.ErrorCode(err) != lockstep.ECONFLICT {
			return fmt.Errorf("load: create %s: %w", l.o.Base, err)
		}
		r, err = l.c.Repo(ctx, l.o.Base)
	}
	if err != nil {
		return fmt.Errorf("load: base %s: %w", l.o.Base, err)
	}
	if r.ForkOf != "" {
		return lockstep.Errorf(lockstep.EINVALID, "load: --base %s is a workspace of %s: name a base repository", l.o.Base, r.ForkOf)
	}
	l.branch = r.DefaultBranch
	if tip, err := l.c.Ref(ctx, l.o.Base, l.branch); err != nil {
		return fmt.Errorf("load: base %s: %w", l.o.Base, err)
	} else if tip == "" {
		return lockstep.Errorf(lockstep.EINVALID, "load: base %s has no commit on %s: push one first, or name a new base to have it created", l.o.Base, l.branch)
	}
	p, err := l.c.Gate(ctx, l.o.Base, l.branch)
	switch {
	case lockstep.ErrorCode(err) == lockstep.ENOTFOUND:
		l.checks = []string{}
	case err != nil:
		return fmt.Errorf("load: gate of %s: %w", l.o.Base, err)
	default:
		l.checks = slices.Clone(p.RequiredChecks)
	}
	rep.Checks = l.checks
	return nil
}

// seed writes a small tree (a README and 20 source files) and the gate.
func (l *loader) seed(ctx context.Context) error {
	edits := []client.Edit{client.WriteFile("README.md", "# "+l.o.Base+"\n\nA base repository of `lockstep load`.\n")}
	for i := range 20 {
		edits = append(edits, client.WriteFile(fmt.Sprintf("src/pkg%d/file%02d.go", i%4, i),
			fmt.Sprintf("package pkg%d\n\n// F%d is seed code.\nfunc F%d() int { return %d }\n", i%4, i, i, i)))
	}
	if _, err := l.c.EditFiles(ctx, l.o.Base, edits, client.WriteOptions{Branch: "main", ExpectOID: api.ZeroOID, Message: "load: seed tree"}); err != nil {
		return err
	}
	_, err := l.c.SetGate(ctx, l.o.Base, api.Policy{Branch: "main", RequiredChecks: []string{LoadCheckName}, PromoteMode: "merge"})
	return err
}

// agent starts iterations until the deadline.
func (l *loader) agent(ctx context.Context, a int) {
	rng := rand.New(rand.NewPCG(l.o.Seed, uint64(a)))
	dir := filepath.Join(l.tmp, fmt.Sprintf("a%d", a))
	for iter := 0; time.Now().Before(l.deadline) && ctx.Err() == nil; iter++ {
		l.mu.Lock()
		l.iterations++
		l.mu.Unlock()
		rec, err := l.iteration(ctx, a, iter, rng, dir)
		if err != nil && rec != nil && !rec.promoted {
			// Best effort: a failed attempt leaves no active workspace.
			l.c.Abandon(context.WithValue(ctx, opKey{}, "abandon"), rec.name, "lockstep load: iteration failed")
		}
	}
}

// iteration is one task of one agent: fork, checkout, pushes, preflight,
// checks, promote. It stops at the first failed operation.
func (l *loader) iteration(ctx context.Context, a, iter int, rng *rand.Rand, dir string) (*wsRecord, error) {
	ws := fmt.Sprintf("%s-%s-a%d-%d", l.o.Base, l.run, a, iter)
	var fr *client.ForkResult
	if err := l.op(ctx, "fork", func(ctx context.Context) (err error) {
		fr, err = l.c.Fork(ctx, l.o.Base, ws)
		return err
	}); err != nil {
		return nil, err
	}
	rec := &wsRecord{name: ws, head: fr.BaseCommit}
	l.mu.Lock()
	l.records = append(l.records, rec)
	l.mu.Unlock()

	wt := filepath.Join(dir, "wt")
	if err := os.RemoveAll(wt); err != nil {
		return rec, err
	}
	if err := os.MkdirAll(wt, 0o755); err != nil {
		return rec, err
	}
	if err := l.op(ctx, "checkout", func(ctx context.Context) error {
		commit, _, err := l.c.Checkout(ctx, ws, l.branch, wt, nil)
		if err == nil && commit != rec.head {
			err = l.staleRead(fmt.Sprintf("checkout of %s answered %s, the fork made it %s", ws, short(commit), short(rec.head)))
		}
		return err
	}); err != nil {
		return rec, err
	}
	file := filepath.Join(wt, "load", fmt.Sprintf("agent-%03d.txt", a))
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return rec, err
	}
	for j := range 1 + rng.IntN(3) {
		fh, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return rec, err
		}
		_, err = fmt.Fprintf(fh, "%s iteration %d push %d\n", ws, iter, j)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return rec, err
		}
		var res *client.PushDirResult
		err = l.op(ctx, "push", func(ctx context.Context) (err error) {
			res, err = l.c.PushDir(ctx, ws, wt, client.PushDirOptions{
				WriteOptions: client.WriteOptions{Branch: l.branch, ExpectOID: rec.head, Message: fmt.Sprintf("load: agent %d iteration %d push %d", a, iter, j)},
				StatCache:    filepath.Join(dir, "statcache"),
			})
			if err == nil && (res.Parent != rec.head || !res.Changed) {
				err = lockstep.Errorf(lockstep.EINTERNAL, "push to %s with expect_oid %s answered commit %s with parent %s (changed %v)", ws, short(rec.head), short(res.Commit), short(res.Parent), res.Changed)
			}
			return err
		})
		l.mu.Lock()
		if err != nil {
			rec.uncertain = true
		} else {
			rec.head = res.Commit
		}
		l.mu.Unlock()
		if err != nil {
			return rec, err
		}
	}
	if err := l.op(ctx, "preflight", func(ctx context.Context) error {
		m, err := l.c.MergeBranches(ctx, l.o.Base, client.MergeRequest{Ours: l.branch, Theirs: ws + ":" + l.branch, Preflight: true})
		switch {
		case err != nil:
			return err
		case m.Theirs != rec.head:
			return l.staleRead(fmt.Sprintf("preflight of %s resolved its tip to %s, the agent pushed %s", ws, short(m.Theirs), short(rec.head)))
		case !m.Clean:
			return lockstep.Errorf(lockstep.EMERGECONFLICT, "preflight of %s into %s:%s is not clean (%d conflicts)", ws, l.o.Base, l.branch, len(m.Conflicts))
		}
		return nil
	}); err != nil {
		return rec, err
	}
	for _, name := range l.checks {
		if err := l.op(ctx, "check", func(ctx context.Context) error {
			_, err := l.c.PostCheck(ctx, ws, rec.head, api.CheckRequest{Name: name, Status: "success", Summary: "lockstep load"})
			return err
		}); err != nil {
			return rec, err
		}
	}
	err := l.op(ctx, "promote", func(ctx context.Context) error {
		_, err := l.c.Promote(ctx, ws, api.PromoteRequest{Commit: rec.head, Mode: "merge", Message: "load: promote " + ws})
		return err
	})
	l.mu.Lock()
	rec.promoted = err == nil
	l.mu.Unlock()
	return rec, err
}

func (l *loader) staleRead(msg string) error {
	l.mu.Lock()
	l.stale = append(l.stale, msg)
	l.mu.Unlock()
	return lockstep.Errorf(lockstep.EINTERNAL, "stale read: %s", msg)
}

// verify checks every workspace ref against its agent's head and every
// promoted commit against the base branch, 8 requests at a time.
func (l *loader) verify(ctx context.Context, rep *LoadReport) {
	var mu sync.Mutex
	lost := func(s string) {
		mu.Lock()
		rep.Lost = append(rep.Lost, s)
		mu.Unlock()
	}
	verr := func(s string) {
		mu.Lock()
		rep.VerifyErrors = append(rep.VerifyErrors, s)
		mu.Unlock()
	}
	// contains: is commit reachable from repo's branch (equal included)?
	contains := func(repo, commit string) (bool, error) {
		m, err := l.c.MergeBranches(ctx, repo, client.MergeRequest{Ours: l.branch, Theirs: commit, Preflight: true})
		if err != nil {
			return false, err
		}
		return m.UpToDate, nil
	}
	jobs := make(chan *wsRecord)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range jobs {
				ref, err := l.c.Ref(ctx, r.name, l.branch)
				if err != nil {
					verr(fmt.Sprintf("refs of %s: %v", r.name, err))
					continue
				}
				switch {
				case ref == r.head:
				case !r.uncertain:
					lost(fmt.Sprintf("workspace %s is at %s, its agent pushed %s", r.name, short(ref), short(r.head)))
				default:
					// A write after head failed: it may have landed on top.
					ok, err := contains(r.name, r.head)
					if err != nil {
						verr(fmt.Sprintf("ancestry in %s: %v", r.name, err))
						continue
					}
					if !ok {
						lost(fmt.Sprintf("workspace %s is at %s, which does not contain %s, the last push its agent was told succeeded", r.name, short(ref), short(r.head)))
					}
				}
				if r.promoted {
					ok, err := contains(l.o.Base, r.head)
					if err != nil {
						verr(fmt.Sprintf("ancestry of %s in %s: %v", short(r.head), l.o.Base, err))
						continue
					}
					if !ok {
						lost(fmt.Sprintf("promoted commit %s of %s is not reachable from %s:%s", short(r.head), r.name, l.o.Base, l.branch))
					}
					mu.Lock()
					rep.VerifiedPromoted++
					mu.Unlock()
				}
				mu.Lock()
				rep.VerifiedWorkspaces++
				mu.Unlock()
			}
		}()
	}
	l.mu.Lock()
	recs := slices.Clone(l.records)
	l.mu.Unlock()
	for _, r := range recs {
		jobs <- r
	}
	close(jobs)
	wg.Wait()
	sort.Strings(rep.Lost)
	sort.Strings(rep.VerifyErrors)
	rep.LostUpdates = len(rep.Lost)
}

// fill copies the counters into the report.
func (l *loader) fill(rep *LoadReport) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep.Iterations = l.iterations
	for _, r := range l.records {
		if r.promoted {
			rep.Promoted++
		}
	}
	if rep.ElapsedS > 0 {
		rep.PromotesPS = float64(rep.Promoted) / rep.ElapsedS
	}
	for _, op := range loadOps {
		s := l.stats[op]
		row := LoadOpStats{Op: op, Count: len(s.ms), Status5xx: s.n5xx, ErrorCodes: s.errors, ErrorExamples: s.first}
		for _, n := range s.errors {
			row.Errors += n
		}
		if len(s.ms) > 0 {
			v := slices.Clone(s.ms)
			slices.Sort(v)
			row.P50, row.P99, row.Max = percentile(v, 0.50), percentile(v, 0.99), v[len(v)-1]
		}
		rep.Ops = append(rep.Ops, row)
	}
	rep.Status5xx = map[string]int{}
	for code, n := range l.status5xx {
		rep.Status5xx[strconv.Itoa(code)] = n
		rep.Total5xx += n
	}
	rep.Retries = atomic.LoadInt64(&l.retries)
	rep.StaleReads = len(l.stale)
	rep.Stale = slices.Clone(l.stale)
	l.rt.pmu.Lock()
	rep.URLStats = slices.Clone(l.rt.per)
	l.rt.pmu.Unlock()
}

// percentile of sorted values by the nearest-rank rule.
func percentile(sorted []float64, p float64) float64 {
	i := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func printLoad(w io.Writer, r *LoadReport) {
	fmt.Fprintf(w, "lockstep load: %d agents, %s, %.0f s asked, %.1f s run, base %s (created: %v), checks %v\n",
		r.Agents, strings.Join(r.URLs, ","), r.DurationS, r.ElapsedS, r.Base, r.BaseCreated, r.Checks)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "op\tcount\terrors\t5xx\tp50\tp99\tmax\t")
	for _, o := range r.Ops {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t\n", o.Op, o.Count, o.Errors, o.Status5xx, fmtMS(o.P50), fmtMS(o.P99), fmtMS(o.Max))
	}
	tw.Flush()
	for _, o := range r.Ops {
		if len(o.ErrorCodes) > 0 {
			fmt.Fprintf(w, "  %s errors: %v\n", o.Op, o.ErrorCodes)
			for _, code := range sortedKeys(o.ErrorExamples) {
				fmt.Fprintf(w, "    first %s: %s\n", code, o.ErrorExamples[code])
			}
		}
	}
	for _, u := range r.URLStats {
		fmt.Fprintf(w, "requests %s: %d (5xx %d, no answer %d)\n", u.URL, u.Requests, u.Status5xx, u.TransportErrors)
	}
	fmt.Fprintf(w, "iterations %d, promoted %d (%.1f/s), 5xx %d %v, client retries %d\n", r.Iterations, r.Promoted, r.PromotesPS, r.Total5xx, r.Status5xx, r.Retries)
	fmt.Fprintf(w, "verified %d workspace refs and %d promoted commits: lost_updates %d, stale_reads %d\n", r.VerifiedWorkspaces, r.VerifiedPromoted, r.LostUpdates, r.StaleReads)
	for _, s := range r.Lost {
		fmt.Fprintln(w, "  LOST:", s)
	}
	for _, s := range r.Stale {
		fmt.Fprintln(w, "  STALE:", s)
	}
	for _, s := range r.VerifyErrors {
		fmt.Fprintln(w, "  NOT VERIFIED:", s)
	}
	ov := "ok"
	if !r.Oplog.OK {
		ov = "BROKEN"
		if r.Oplog.FirstBad != nil {
			ov += fmt.Sprintf(" at %d", *r.Oplog.FirstBad)
		}
		if r.Oplog.Reason != "" {
			ov += ": " + r.Oplog.Reason
		}
	}
	fmt.Fprintf(w, "oplog verify: %s (%d entries)\n", ov, r.Oplog.Entries)
}

// ErrLoadFailed is what the command returns (after printing the report)
// when a finished run's report is not OK.
var ErrLoadFailed = errors.New("load: a promise did not hold (lost updates, stale reads, unverified writes or a broken oplog)")

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
