package web_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// echoBundle finds shared/corpus/echo.bundle beside the repository or
// above it (LOCKSTEP_CORPUS overrides the directory).
func echoBundle() string {
	if d := os.Getenv("LOCKSTEP_CORPUS"); d != "" {
		return filepath.Join(d, "echo.bundle")
	}
	wd, _ := os.Getwd()
	for d := wd; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if p := filepath.Join(d, "shared", "corpus", "echo.bundle"); fileExists(p) {
			return p
		}
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func gitOut(b *testing.B, dir string, stdin []byte, args ...string) string {
	b.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && cmd.Args[1] == "merge-tree" && ee.ExitCode() == 1 {
			return string(out) // conflicts
		}
		b.Fatalf("git %v: %v %s", args, err, out)
	}
	return string(out)
}

// preflightBench is the set-up of the preflight benchmarks: a server
// with labstack/echo pushed as "echo" at the first parent of master's
// 51st newest first-parent merge, and 50 workspaces, each at the second
// parent of one of the 50 newest. stdin is those 50 pairs for `git
// merge-tree --stdin`; src the mirror git runs in.
type preflightBench struct {
	ctx   context.Context
	c     *client.Client
	names []string
	src   string
	stdin []byte
}

func newPreflightBench(b *testing.B) *preflightBench {
	b.Helper()
	bundle := echoBundle()
	if bundle == "" {
		b.Skip("no shared/corpus/echo.bundle (set LOCKSTEP_CORPUS)")
	}
	ctx := context.Background()
	dir := b.TempDir()
	src := filepath.Join(dir, "echo.git")
	gitOut(b, dir, nil, "clone", "-q", "--mirror", bundle, src)
	var p2 []string
	base := ""
	for _, l := range strings.Split(gitOut(b, src, nil, "rev-list", "--first-parent", "--merges", "--parents", "-n", "51", "master"), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		if len(p2) == 50 {
			base = f[1]
			break
		}
		p2 = append(p2, f[2])
	}
	if len(p2) != 50 || base == "" {
		b.Fatalf("echo corpus: %d merges", len(p2))
	}

	w := newSQLiteServer(b, nil)
	repos, wss, admin, secret, s := w.repos, w.wss, w.admin, w.secret, w.s
	srv := httptest.NewServer(s.Handler())
	b.Cleanup(srv.Close)
	if _, err := repos.CreateRepo(ctx, admin, "echo", "main"); err != nil {
		b.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("x", secret)
	remote := func(repo string) string { return u.String() + "/git/" + repo + ".git" }
	gitOut(b, src, nil, "push", "-q", "--force", remote("echo"), base+":refs/heads/main", "refs/heads/master:refs/heads/master")
	var names []string
	var stdin bytes.Buffer
	for i, c := range p2 {
		name := fmt.Sprintf("attempt-%02d", i)
		if _, err := wss.Fork(ctx, admin, "echo", name, "bench"); err != nil {
			b.Fatal(err)
		}
		gitOut(b, src, nil, "push", "-q", "--force", remote(name), c+":refs/heads/main")
		names = append(names, name)
		fmt.Fprintf(&stdin, "%s %s\n", base, c)
	}
	c := client.New(srv.URL, secret)
	// The three agree on which merges are clean.
	batch, err := c.PreflightBatch(ctx, "echo", api.PreflightBatchRequest{Task: "bench", Deep: true})
	if err != nil {
		b.Fatal(err)
	}
	git := strings.Split(gitOut(b, src, stdin.Bytes(), "merge-tree", "--stdin", "--write-tree", "--name-only", "--no-messages", "-z"), "\x00")
	cleanGit, cleanBatch := 0, 0
	for _, r := range git {
		if r == "1" {
			cleanGit++
		}
	}
	for _, it := range batch.Results {
		if it.Result == nil {
			b.Fatalf("%s: %+v", it.Workspace, it.Error)
		}
		if it.Result.Clean {
			cleanBatch++
		}
	}
	b.Logf("50 echo merges into %s: %d clean (git: %d)", base[:10], cleanBatch, cleanGit)

	return &preflightBench{ctx: ctx, c: c, names: names, src: src, stdin: stdin.Bytes()}
}

// single is one POST /merges preflight (deep) per workspace.
func (p *preflightBench) single(b *testing.B) {
	for _, n := range p.names {
		if _, err := p.c.MergeBranches(p.ctx, "echo", client.MergeRequest{Ours: "main", Theirs: n + ":main", Preflight: true, Deep: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPreflightBatch: 50 deep preflights of real labstack/echo
// branches (the second parents of master's 50 newest merges, each a
// workspace) into one base commit (the first parent of the 51st), three
// ways, interleaved in every iteration: 50 single POST /merges requests,
// one POST /merges/preflight batch, and one `git merge-tree --stdin`
// process. Metrics are per merge.
//
//	go test -run XXX -bench PreflightBatch -benchtime 20x ./web/
func BenchmarkPreflightBatch(b *testing.B) {
	p := newPreflightBench(b)
	ctx, c, names, src := p.ctx, p.c, p.names, p.src
	var single, batched, gitd time.Duration
	for b.Loop() {
		t0 := time.Now()
		p.single(b)
		t1 := time.Now()
		if _, err := c.PreflightBatch(ctx, "echo", api.PreflightBatchRequest{Workspaces: names, Deep: true}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		gitOut(b, src, p.stdin, "merge-tree", "--stdin", "--write-tree", "--name-only", "--no-messages", "-z")
		t3 := time.Now()
		single += t1.Sub(t0)
		batched += t2.Sub(t1)
		gitd += t3.Sub(t2)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) / 50 }
	b.ReportMetric(per(single), "ms/merge-single")
	b.ReportMetric(per(batched), "ms/merge-batch")
	b.ReportMetric(per(gitd), "ms/merge-git")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPreflightSingle is the single requests of
// BenchmarkPreflightBatch alone, for a CPU profile of the request path:
//
//	go test -run XXX -bench PreflightSingle -benchtime 100x -cpuprofile cpu.out ./web/
func BenchmarkPreflightSingle(b *testing.B) {
	newPreflightBench(b).rounds(b)
}

// rounds runs p.single b.N times and reports the mean and the median
// round, per merge (the median is steadier when other work shares the
// CPUs).
func (p *preflightBench) rounds(b *testing.B) {
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		p.single(b)
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N)/50, "ms/merge-single")
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000/50, "ms/merge-median")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPreflightSingleUnkeyed is BenchmarkPreflightSingle without an
// Idempotency-Key on the requests (the read-only path without the
// entry's write):
//
//	go test -run XXX -bench PreflightSingleUnkeyed -benchtime 100x -cpuprofile cpu.out ./web/
func BenchmarkPreflightSingleUnkeyed(b *testing.B) {
	p := newPreflightBench(b)
	p.c.NoIdempotencyKeys = true
	p.rounds(b)
}
