package worktree_test

// Benchmarks: run them on a tmpfs (the root filesystem here is slow and
// noisy for file creation), for example
//
//	TMPDIR=/dev/shm go test -run '^$' -bench . -benchmem ./worktree
//
// The tree is the 2k tree of NOTES-machine.md: 2,000 files in 400
// directories, about 20 MB. The Git* benchmarks run the git CLI on the same
// tree, process start included, for a side-by-side comparison.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/lockstep-hq/lockstep/worktree"
)

var (
	benchOnce  sync.Once
	benchDir   string
	benchFiles []string
	benchBytes int64
)

// benchTree returns the shared 2k tree, creating it on first use. Each
// benchmark leaves it as a warm cache would find it, except for the
// contents of benchFiles[0], which benchmarks rewrite.
func benchTree(b *testing.B) (string, []string) {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "worktree-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		benchFiles = genTree(b, dir, genSpec{Files: 2000, Dirs: 400, AvgSize: 10000, Seed: 2026})
		ageFiles(b, dir, benchFiles)
		for _, f := range benchFiles {
			fi, err := os.Stat(filepath.Join(dir, f))
			if err != nil {
				b.Fatal(err)
			}
			benchBytes += fi.Size()
		}
	})
	return benchDir, benchFiles
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// deepest returns the file with the most directories above it: the worst
// case for negotiation.
func deepest(files []string) string {
	d := files[0]
	for _, f := range files {
		if strings.Count(f, "/") > strings.Count(d, "/") {
			d = f
		}
	}
	return d
}

// touches makes every touchOne write new content, across benchmarks too.
var touches int

// touchOne rewrites one file with new content of the same size class.
func touchOne(b *testing.B, dir, rel string, i int) {
	touches++
	mustWrite(b, filepath.Join(dir, rel), []byte(fmt.Sprintf("touch %d iteration %d\n%s", touches, i, strings.Repeat("x", 5000))), 0o644)
}

func BenchmarkScanCold(b *testing.B) {
	dir, _ := benchTree(b)
	b.SetBytes(benchBytes)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := worktree.Scan(dir, worktree.ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScanWarm is what the CLI does on each push: load the cache,
// scan with one file changed, save the cache.
func BenchmarkScanWarm(b *testing.B) {
	dir, files := benchTree(b)
	cachePath := filepath.Join(b.TempDir(), "statcache")
	c := openCache(b, cachePath)
	mustScan(b, dir, worktree.ScanOptions{Cache: c})
	if err := c.Save(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, deepest(files), i)
		b.StartTimer()
		c, err := worktree.OpenStatCache(cachePath)
		if err != nil {
			b.Fatal(err)
		}
		snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Save(); err != nil {
			b.Fatal(err)
		}
		if snap.Hashed > 2 { // the changed file, and perhaps a racy one
			b.Fatalf("warm scan hashed %d files", snap.Hashed)
		}
	}
}

// BenchmarkPlanWritePack negotiates against an in-memory server holding
// the previous push and writes the pack for one changed file, level by
// level (Level) or with the hint of the last push (Known).
func BenchmarkPlanWritePack(b *testing.B) {
	b.Run("Level", func(b *testing.B) { benchPlanWritePack(b, false) })
	b.Run("Known", func(b *testing.B) { benchPlanWritePack(b, true) })
}

func benchPlanWritePack(b *testing.B, hint bool) {
	dir, files := benchTree(b)
	srv := &server{st: memory.NewStorage()}
	prev := mustScan(b, dir, worktree.ScanOptions{})
	srv.push(b, prev)
	touchOne(b, dir, deepest(files), -1)
	snap := mustScan(b, dir, worktree.ScanOptions{})
	opts := &worktree.PlanOptions{}
	if hint {
		opts.Known = prev.Known()
	}
	b.ReportAllocs()
	var packBytes int64
	var objects int
	for b.Loop() {
		srv.roundTrips, srv.asked = 0, 0
		oids, err := worktree.Plan(context.Background(), snap, srv.missing, opts)
		if err != nil {
			b.Fatal(err)
		}
		objects, packBytes, err = worktree.WritePack(snap, oids, io.Discard, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(packBytes), "pack-bytes")
	b.ReportMetric(float64(objects), "objects")
	b.ReportMetric(float64(srv.roundTrips), "round-trips")
	b.ReportMetric(float64(srv.asked), "oids-asked")
}

// BenchmarkPushOneFile is the client's whole push minus HTTP and process
// start: load cache, scan, plan with the hint of the last push (which the
// server does not receive here, so the hint stays that of the first push),
// pack, save cache.
func BenchmarkPushOneFile(b *testing.B) {
	dir, files := benchTree(b)
	srv := &server{st: memory.NewStorage()}
	cachePath := filepath.Join(b.TempDir(), "statcache")
	c := openCache(b, cachePath)
	first := mustScan(b, dir, worktree.ScanOptions{Cache: c})
	srv.push(b, first)
	c.SetKnown(first.Known())
	if err := c.Save(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	var packBytes int64
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, deepest(files), i)
		b.StartTimer()
		c, err := worktree.OpenStatCache(cachePath)
		if err != nil {
			b.Fatal(err)
		}
		snap, err := worktree.Scan(dir, worktree.ScanOptions{Cache: c})
		if err != nil {
			b.Fatal(err)
		}
		oids, err := worktree.Plan(context.Background(), snap, srv.missing, &worktree.PlanOptions{Known: c.Known()})
		if err != nil {
			b.Fatal(err)
		}
		if _, packBytes, err = worktree.WritePack(snap, oids, io.Discard, nil); err != nil {
			b.Fatal(err)
		}
		if err := c.Save(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(packBytes), "pack-bytes")
}

// gitBench runs git commands in a repository whose work tree is the bench
// tree (GIT_DIR kept outside it).
type gitBench struct {
	b      *testing.B
	env    []string
	dir    string
	gitDir string
}

func newGitBench(b *testing.B, dir string) *gitBench {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("git not installed")
	}
	gitDir := filepath.Join(b.TempDir(), "wt.git")
	g := &gitBench{b: b, dir: dir, gitDir: gitDir, env: append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+gitDir,
		"GIT_DIR="+gitDir, "GIT_WORK_TREE="+dir,
		"GIT_AUTHOR_NAME=b", "GIT_AUTHOR_EMAIL=b@example.com",
		"GIT_COMMITTER_NAME=b", "GIT_COMMITTER_EMAIL=b@example.com")}
	g.run("init", "-q")
	g.run("add", "-A")
	g.run("commit", "-q", "-m", "base")
	return g
}

func (g *gitBench) run(args ...string) {
	cmd := exec.Command("git", args...)
	cmd.Env, cmd.Dir = g.env, g.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		g.b.Fatalf("git %v: %v: %s", args, err, out)
	}
}

func BenchmarkGitAddWriteTreeCold(b *testing.B) {
	dir, _ := benchTree(b)
	g := newGitBench(b, dir)
	index := filepath.Join(g.gitDir, "index")
	b.SetBytes(benchBytes)
	for b.Loop() {
		b.StopTimer()
		if err := os.Remove(index); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		g.run("add", "-A")
		g.run("write-tree")
	}
}

func BenchmarkGitAddWriteTreeWarm(b *testing.B) {
	dir, files := benchTree(b)
	g := newGitBench(b, dir)
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, deepest(files), i)
		b.StartTimer()
		g.run("add", "-A")
		g.run("write-tree")
	}
}

func BenchmarkGitStatus(b *testing.B) {
	dir, _ := benchTree(b)
	g := newGitBench(b, dir)
	for b.Loop() {
		g.run("status", "--porcelain")
	}
}

// BenchmarkGitPushOneFile is the target: add, commit, push to a local
// bare repository.
func BenchmarkGitPushOneFile(b *testing.B) {
	dir, files := benchTree(b)
	g := newGitBench(b, dir)
	bare := filepath.Join(b.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", bare).CombinedOutput(); err != nil {
		b.Fatalf("git init: %v: %s", err, out)
	}
	g.run("push", "-q", bare, "HEAD:refs/heads/main")
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		touchOne(b, dir, deepest(files), i)
		b.StartTimer()
		g.run("add", "-A")
		g.run("commit", "-q", "-m", "x")
		g.run("push", "-q", bare, "HEAD:refs/heads/main")
	}
}

// BenchmarkStatCache20k loads and saves a cache of 20,000 entries, as the
// CLI does once per push on the 20k tree.
func BenchmarkStatCache20k(b *testing.B) {
	path := filepath.Join(b.TempDir(), "statcache")
	c := openCache(b, path)
	worktree.FillCache(c, 20000)
	if err := c.Save(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := worktree.OpenStatCache(path)
		if err != nil || c.Len() != 20000 {
			b.Fatalf("load: %v, %d entries", err, c.Len())
		}
		if err := c.Save(); err != nil {
			b.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size()), "file-bytes")
}
