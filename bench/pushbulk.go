package bench

// The push-bulk group (issue #26 row "bulk git push"): the full history
// of a bundle (every branch and tag) pushed with the real git client,
// three ways in rotating order, each to a fresh repository: to Lockstep
// over HTTP (the bench's main server: local disk, embedded SQLite, fsync
// on), to git's own receive-pack behind a minimal smart-HTTP server in
// this process, and over file:// (the baseline). The source holds
// what a user's clone of the history holds: its branches and tags. A
// --mirror clone of a GitHub bundle also holds refs/pull/* (echo: 1,380
// of 1,527 refs), and git's HTTP push matches every pushed ref against
// every local ref (send-pack, ~75 ms of echo's CPU) where file:// pays
// nothing of the kind; the rows' notes still report Lockstep and file://
// pushed from that --mirror clone, measured in the same rounds. Wall time is the
// `git push` process's; CPU is what the machine spent on the push: this
// process (the in-process servers) plus its waited children (git push,
// and through it remote-http and pack-objects; receive-pack and, through
// it, index-pack; the server's own git children).

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// pushBulkRowNames are the rows of the push-bulk group for the given
// bundles: per bundle, Lockstep against file:// and against git's own
// receive-pack over HTTP.
func pushBulkRowNames(bundles []string) []string {
	var out []string
	for _, bundle := range bundles {
		out = append(out, pushBulkRow(bundle), pushBulkRow(bundle)+":git-http")
	}
	return out
}

// PushBulkRowNames are the rows the push-bulk group prints when it runs
// with these bundles (Options.Objstore.Bundles).
func PushBulkRowNames(bundles []string) []string { return pushBulkRowNames(bundles) }

func pushBulkRow(bundle string) string { return "push-bulk-" + bundleName(bundle) }

// pushBulkRounds is the number of rounds of each bundle, as the other
// slow scenarios: half of --iterations, at least 3. A round pushes once
// each way (about 3 s for echo and 1.5 s for testify on 2 CPUs), so the
// default 20 iterations take under a minute for both; fewer rounds left
// the wall medians at the mercy of a loaded machine.
func (b *bencher) pushBulkRounds() int { return b.slow() }

func (b *bencher) benchPushBulk() error {
	bundles := b.o.objstore.Bundles
	if len(bundles) == 0 {
		msg := "no bundles given (--bundles, LOCKSTEP_BENCH_BUNDLES; e.g. /work/shared/corpus/echo.bundle)"
		b.logf("push-bulk: skipped: %s", msg)
		b.skip("push-bulk", msg)
		return nil
	}
	s, err := b.server(true)
	if err != nil {
		return err
	}
	gh, err := startGitHTTP(b)
	if err != nil {
		return err
	}
	defer gh.close()
	for _, bundle := range bundles {
		if err := b.pushBulk(s, gh, bundle); err != nil {
			return fmt.Errorf("push-bulk of %s: %w", bundleName(bundle), err)
		}
	}
	return nil
}

// gitHTTP is the least an HTTP git server that stores with git does: the
// smart-HTTP receive answered by `git receive-pack --stateless-rpc` on a
// bare repository under root, the request body streamed to its stdin and
// its stdout to the response. It serves only pushes.
type gitHTTP struct {
	b    *bencher
	root string
	url  string
	hs   *http.Server
}

func startGitHTTP(b *bencher) (*gitHTTP, error) {
	g := &gitHTTP{b: b, root: b.path("git-http")}
	if err := os.MkdirAll(g.root, 0o755); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g.url = "http://" + ln.Addr().String()
	g.hs = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go g.hs.Serve(ln)
	return g, nil
}

func (g *gitHTTP) close() { g.hs.Close() }

// repoDir is the repository a request names (/NAME.git/…): a direct
// child of root, never anything above it.
func (g *gitHTTP) repoDir(p, suffix string) (string, bool) {
	name, ok := strings.CutSuffix(strings.TrimPrefix(p, "/"), suffix)
	if !ok || name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return "", false
	}
	return filepath.Join(g.root, name), true
}

func (g *gitHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs"):
		dir, ok := g.repoDir(r.URL.Path, "/info/refs")
		if !ok || r.URL.Query().Get("service") != "git-receive-pack" {
			http.NotFound(w, r) // pushes only
			return
		}
		w.Header().Set("Content-Type", "application/x-git-receive-pack-advertisement")
		w.Header().Set("Cache-Control", "no-cache")
		line := "# service=git-receive-pack\n"
		fmt.Fprintf(w, "%04x%s0000", len(line)+4, line)
		g.run(w, nil, "receive-pack", "--stateless-rpc", "--advertise-refs", dir)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		dir, ok := g.repoDir(r.URL.Path, "/git-receive-pack")
		if !ok {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			defer zr.Close()
			body = zr
		}
		w.Header().Set("Content-Type", "application/x-git-receive-pack-result")
		w.Header().Set("Cache-Control", "no-cache")
		g.run(w, body, "receive-pack", "--stateless-rpc", dir)
	default:
		http.NotFound(w, r)
	}
}

// run runs git with stdin and stdout streamed; a failure is logged (the
// answer has begun, so the pushing git reports it too).
func (g *gitHTTP) run(w io.Writer, stdin io.Reader, args ...string) {
	c := exec.CommandContext(g.b.ctx, "git", args...)
	c.Env = g.b.env
	c.Stdin, c.Stdout = stdin, w
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		g.b.logf("push-bulk: git-http: git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
}

// cpuTimes are the CPU seconds spent so far by this process (self) and by
// its waited descendants (children): RUSAGE_CHILDREN counts a child once
// it is reaped, with the descendants it reaped itself.
func cpuTimes() (self, children time.Duration, err error) {
	var s, c unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &s); err != nil {
		return 0, 0, fmt.Errorf("getrusage: %w", err)
	}
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &c); err != nil {
		return 0, 0, fmt.Errorf("getrusage: %w", err)
	}
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime), nil
}

// bulkSide collects one way's measurements (milliseconds).
type bulkSide struct {
	wall, cpu, child []float64
}

func (s *bulkSide) dists() (wall, cpu *dist) { return newDist(s.wall), newDist(s.cpu) }

// pushBulk measures one bundle.
func (b *bencher) pushBulk(s *benchServer, gh *gitHTTP, bundle string) error {
	base := bundleName(bundle)
	b.logf("push-bulk: %s …", base)
	load0 := loadAvg()
	mirror, err := b.mirrorBundle(bundle, "pb-mirror-"+base)
	if err != nil {
		return err
	}
	defer os.RemoveAll(mirror.src)
	m, err := b.branchesAndTagsClone(mirror, "pb-src-"+base)
	if err != nil {
		return err
	}
	defer os.RemoveAll(m.src)
	defBranch, wantRefs := m.defBranch, m.refs

	// push runs `git push` of every branch and tag from src to dst and
	// records its wall time and the CPU spent meanwhile.
	push := func(side *bulkSide, src, dst string) error {
		self0, child0, err := cpuTimes()
		if err != nil {
			return err
		}
		t := time.Now()
		_, err = b.git(src, append([]string{"push", "-q", dst}, fullPushSpecs...)...)
		wall := time.Since(t)
		if err != nil {
			return err
		}
		self1, child1, err := cpuTimes()
		if err != nil {
			return err
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		side.wall = append(side.wall, ms(wall))
		side.cpu = append(side.cpu, ms(self1-self0+child1-child0))
		side.child = append(side.child, ms(child1-child0))
		return nil
	}
	// verify compares the branches and tags remote lists (ls-remote)
	// with the source's.
	verify := func(what, remote string) error { return m.verify(b, what, remote) }
	freshBare := func(dir string) error {
		_, err := b.git(b.root, "init", "-q", "--bare", dir)
		return err
	}

	// ls, gitHTTPSide and file push from m (branches and tags); lsOld
	// and fileOld from the --mirror clone (the fixture before).
	var ls, gitHTTPSide, file, lsOld, fileOld bulkSide
	lockstepTo := func(side *bulkSide, src, what string, round int) error {
		name := b.name("pb-" + base)
		if _, err := s.c.CreateRepo(b.ctx, name, defBranch); err != nil {
			return err
		}
		u, _ := url.Parse(s.url + "/git/" + name + ".git")
		u.User = url.UserPassword("x", s.key)
		if err := push(side, src, u.String()); err != nil {
			return fmt.Errorf("to Lockstep%s: %w", what, err)
		}
		if round == 0 {
			return verify("Lockstep"+what, u.String())
		}
		return nil
	}
	fileTo := func(side *bulkSide, src, what string) error {
		dir := b.path(b.name("pb-file-"+base) + ".git")
		if err := freshBare(dir); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := push(side, src, "file://"+dir); err != nil {
			return fmt.Errorf("over file://%s: %w", what, err)
		}
		return nil
	}
	const fromMirror = " (from the --mirror clone)"
	lockstepPush := func(round int) error { return lockstepTo(&ls, m.src, "", round) }
	lockstepOldPush := func(round int) error { return lockstepTo(&lsOld, mirror.src, fromMirror, round) }
	filePush := func(int) error { return fileTo(&file, m.src, "") }
	fileOldPush := func(int) error { return fileTo(&fileOld, mirror.src, fromMirror) }
	gitHTTPPush := func(round int) error {
		name := b.name("pb-" + base)
		dir := filepath.Join(gh.root, name+".git")
		if err := freshBare(dir); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := push(&gitHTTPSide, m.src, gh.url+"/"+name+".git"); err != nil {
			return fmt.Errorf("to git receive-pack over HTTP: %w", err)
		}
		if round == 0 {
			// The minimal server answers pushes only: list the
			// repository it wrote.
			return verify("git receive-pack over HTTP", dir)
		}
		return nil
	}
	rounds := b.pushBulkRounds()
	stop := b.profile(pushBulkRow(bundle))
	for r := 0; r < rounds; r++ {
		steps := []func(int) error{lockstepPush, gitHTTPPush, filePush, lockstepOldPush, fileOldPush}
		for k := range steps {
			if err := b.ctx.Err(); err != nil {
				stop()
				return err
			}
			if err := steps[(k+r)%len(steps)](r); err != nil {
				stop()
				return err
			}
		}
	}
	stop()
	load1 := loadAvg()

	lw, lc := ls.dists()
	hw, hc := gitHTTPSide.dists()
	fw, fc := file.dists()
	ow, oc := lsOld.dists()
	ofw, ofc := fileOld.dists()
	mmm := func(d *dist) string {
		return fmt.Sprintf("%s–%s–%s", fmtMS(d.Min), fmtMS(d.Median), fmtMS(d.Max))
	}
	// selfMed is the median CPU of this process alone (the in-process
	// server's own work, without the git processes).
	selfMed := func(side *bulkSide) string {
		self := make([]float64, len(side.cpu))
		for i := range self {
			self[i] = side.cpu[i] - side.child[i]
		}
		return fmtMS(newDist(self).Median)
	}
	size := m.describe()
	how := fmt.Sprintf("`git push -q URL %s` from a clone of %s holding its %d branches and tags only (what a user's clone holds: the --mirror clone with its %d other refs deleted, its pack kept), each to a fresh repository; %d rounds, each pushing once to Lockstep (HTTP, local disk, SQLite, fsync on), to git receive-pack over HTTP and over file://, and from the --mirror clone to Lockstep and over file://, the order rotating; after round 0, ls-remote of the Lockstep and git-http targets lists the %d branches and tags of the bundle at the same objects",
		strings.Join(fullPushSpecs, " "), filepath.Base(bundle), len(wantRefs), m.otherRefs, rounds, len(wantRefs))
	oldNote := fmt.Sprintf("from the --mirror clone (%d branches and tags + %d other refs, e.g. GitHub's refs/pull/*: the fixture before; the same refs and objects pushed), same rounds: wall median Lockstep %s, file:// %s (%.2f×); CPU median Lockstep %s, file:// %s (%.2f×)",
		len(wantRefs), m.otherRefs, fmtMS(ow.Median), fmtMS(ofw.Median), ow.Median/ofw.Median, fmtMS(oc.Median), fmtMS(ofc.Median), oc.Median/ofc.Median)
	cpuHow := "CPU: getrusage of this process (the in-process servers) and of its waited children (git push with remote-http and pack-objects, receive-pack with index-pack, the server's git), deltas around each push"
	loadNote := fmt.Sprintf("load average (1 min) %s at the start of the bundle, %s at the end", load0, load1)
	// A file:// push runs receive-pack and index-pack as descendants of
	// git push: child CPU of 0 means the accounting missed them.
	childCounted := file.child != nil && newDist(file.child).Min > 0

	row := b.add(&benchRow{Name: pushBulkRow(bundle), Size: size, LS: lw, Git: fw,
		GitCmd: "git push of the same refs to a fresh bare repository over file://", Target: "≤ 1.2× file:// (issue #26)"})
	row.check(fmt.Sprintf("%.2f× file:// wall", lw.Median/fw.Median), lw.Median <= 1.2*fw.Median)
	row.check("child CPU not counted (0 ms in a file:// push)", childCounted)
	row.note("%s", how)
	row.note("wall min–median–max: Lockstep %s, file:// %s, git receive-pack over HTTP %s", mmm(lw), mmm(fw), mmm(hw))
	row.note("CPU min–median–max: Lockstep %s (this process alone: median %s), file:// %s (Lockstep %.2f× file://), git receive-pack over HTTP %s (this process alone: median %s); %s",
		mmm(lc), selfMed(&ls), mmm(fc), lc.Median/fc.Median, mmm(hc), selfMed(&gitHTTPSide), cpuHow)
	row.note("git's own receive-pack over HTTP reaches %.2f× file:// wall and %.2f× its CPU: what the HTTP transport costs a server that stores with git", hw.Median/fw.Median, hc.Median/fc.Median)
	row.note("%s", oldNote)
	row.note("%s", loadNote)

	hrow := b.add(&benchRow{Name: pushBulkRow(bundle) + ":git-http", Size: size, LS: lw, Git: hw,
		GitCmd: "git push of the same refs to git receive-pack --stateless-rpc behind a minimal smart-HTTP server (in-process, fresh bare repository)",
		Target: "≤ 1.2× git receive-pack over HTTP"})
	hrow.check(fmt.Sprintf("%.2f× git-http wall", lw.Median/hw.Median), lw.Median <= 1.2*hw.Median)
	hrow.note("%s", how)
	hrow.note("CPU median: Lockstep %s, git receive-pack over HTTP %s: %.2f×; %s", fmtMS(lc.Median), fmtMS(hc.Median), lc.Median/hc.Median, cpuHow)
	hrow.note("%s", loadNote)
	return nil
}

// refsDiffer counts the lines of a and b (both sorted) not in the other.
func refsDiffer(a, b []string) int {
	n := 0
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			n++
		}
	}
	for _, x := range b {
		if _, ok := slices.BinarySearch(a, x); !ok {
			n++
		}
	}
	return n
}

// mirroredBundle is a --mirror clone of a bundle, the source of the
// full-history pushes (push-bulk, objstore).
type mirroredBundle struct {
	src, defBranch string
	refs           []string // "oid refname" of every branch and tag, sorted
	otherRefs      int      // refs outside refs/heads and refs/tags the --mirror clone held
	commits        string
	packed         int64
	branchesOnly   bool // a branchesAndTagsClone
}

func (b *bencher) mirrorBundle(bundle, name string) (*mirroredBundle, error) {
	m := &mirroredBundle{src: b.path(name + ".git")}
	if _, err := b.git(b.root, "clone", "-q", "--mirror", bundle, m.src); err != nil {
		return nil, err
	}
	head, err := b.git(m.src, "symbolic-ref", "HEAD")
	if err != nil {
		return nil, err
	}
	m.defBranch = strings.TrimPrefix(head, "refs/heads/")
	refList, err := b.git(m.src, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads", "refs/tags")
	if err != nil {
		return nil, err
	}
	m.refs = strings.Split(refList, "\n")
	slices.Sort(m.refs)
	if m.commits, err = b.git(m.src, "rev-list", "--count", "--branches", "--tags"); err != nil {
		return nil, err
	}
	if m.packed, err = dirBytes(filepath.Join(m.src, "objects")); err != nil {
		return nil, err
	}
	return m, nil
}

// branchesAndTagsClone is what a user's clone of the history holds: a
// local clone of the --mirror clone m (its objects hard-linked: the same
// pack) with every ref outside refs/heads and refs/tags deleted (GitHub's
// refs/pull/*, which git's HTTP push, unlike file://, matches every
// pushed ref against). It checks that the branches and tags are m's and
// nothing else is left.
func (b *bencher) branchesAndTagsClone(m *mirroredBundle, name string) (*mirroredBundle, error) {
	c := *m
	c.src, c.branchesOnly = b.path(name+".git"), true
	if _, err := b.git(b.root, "clone", "-q", "--mirror", "--local", m.src, c.src); err != nil {
		return nil, err
	}
	all, err := b.git(c.src, "for-each-ref", "--format=%(refname)")
	if err != nil {
		return nil, err
	}
	var del strings.Builder
	c.otherRefs = 0
	for _, ref := range strings.Split(all, "\n") {
		if ref != "" && !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
			fmt.Fprintf(&del, "delete %s\n", ref)
			c.otherRefs++
		}
	}
	if c.otherRefs > 0 {
		cmd := b.cmd(c.src, "git", "update-ref", "--stdin")
		cmd.Stdin = strings.NewReader(del.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("git update-ref --stdin (delete %d refs): %v: %s", c.otherRefs, err, strings.TrimSpace(string(out)))
		}
	}
	left, err := b.git(c.src, "for-each-ref", "--format=%(objectname) %(refname)")
	if err != nil {
		return nil, err
	}
	got := strings.Split(left, "\n")
	slices.Sort(got)
	if !slices.Equal(got, m.refs) {
		return nil, fmt.Errorf("clone of %s: %d refs left (%d differ), want the %d branches and tags", m.src, len(got), refsDiffer(got, m.refs), len(m.refs))
	}
	return &c, nil
}

func (m *mirroredBundle) describe() string {
	if m.branchesOnly {
		return fmt.Sprintf("%s commits, %d branches and tags, %.1f MB packed (a clone of the branches and tags; the --mirror clone also held %d other refs)",
			m.commits, len(m.refs), float64(m.packed)/1e6, m.otherRefs)
	}
	return fmt.Sprintf("%s commits, %d branches and tags, %.1f MB packed (mirror clone)", m.commits, len(m.refs), float64(m.packed)/1e6)
}

// verify compares the branches and tags remote lists (ls-remote) with
// the bundle's.
func (m *mirroredBundle) verify(b *bencher, what, remote string) error {
	out, err := b.git(m.src, "ls-remote", remote, "refs/heads/*", "refs/tags/*")
	if err != nil {
		return err
	}
	var got []string
	for _, l := range strings.Split(out, "\n") {
		oid, ref, ok := strings.Cut(l, "\t")
		if ok && !strings.HasSuffix(ref, "^{}") {
			got = append(got, oid+" "+ref)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, m.refs) {
		return fmt.Errorf("%s: ls-remote lists %d refs after the push (%d differ), want the %d branches and tags of the bundle",
			what, len(got), refsDiffer(got, m.refs), len(m.refs))
	}
	return nil
}
