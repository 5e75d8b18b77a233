package gitstore

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// Benchmarks run on tmpfs (/dev/shm) when it exists, as NOTES-machine.md
// asks for file-heavy work; LOCKSTEP_BENCH_DIR overrides (e.g. a real disk
// to see what fsync costs).
func benchDir(b *testing.B) string {
	b.Helper()
	root := os.Getenv("LOCKSTEP_BENCH_DIR")
	if fi, err := os.Stat("/dev/shm"); root == "" && err == nil && fi.IsDir() {
		root = "/dev/shm"
	}
	d, err := os.MkdirTemp(root, "lockstep-repo-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func benchOpen(b *testing.B) *Network {
	n, err := Open(filepath.Join(benchDir(b), "net.git"), Options{Fsync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	return n
}

var words = strings.Fields("func return if else for range package import type struct interface map chan go defer select case switch var const nil err string int byte error fmt context ctx")

// genTree returns files of a generated source tree: files files in about
// files/5 directories, totalBytes in all, code-like (compressible) text.
func genTree(seed int64, files int, totalBytes int) []tarEntry {
	r := rand.New(rand.NewSource(seed))
	per := totalBytes / files
	out := make([]tarEntry, 0, files)
	for i := 0; i < files; i++ {
		dir := fmt.Sprintf("pkg%02d/sub%d", i/50, (i/5)%10)
		var sb strings.Builder
		for sb.Len() < per {
			for k := 0; k < 8; k++ {
				sb.WriteString(words[r.Intn(len(words))])
				sb.WriteByte(' ')
			}
			fmt.Fprintf(&sb, "%d\n", r.Int63())
		}
		mode := int64(0o644)
		if i%97 == 0 {
			mode = 0o755
		}
		out = append(out, tarEntry{Name: fmt.Sprintf("%s/file%04d.go", dir, i), Body: sb.String(), Mode: mode})
	}
	return out
}

// cpuTime returns the CPU time (user + system) used so far by this
// process and its waited-for children. Benchmarks report it per op beside
// wall time because the shared 2-core machine is often loaded by other
// work: CPU time barely moves with load, wall time does.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// cpuMeter accumulates CPU time between start and stop calls.
type cpuMeter struct {
	t0    time.Duration
	total time.Duration
}

func (m *cpuMeter) start() { m.t0 = cpuTime() }
func (m *cpuMeter) stop()  { m.total += cpuTime() - m.t0 }
func (m *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(m.total.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// loop runs body b.N times after ResetTimer and reports CPU time per op.
func loop(b *testing.B, body func(i int)) {
	var cpu cpuMeter
	b.ResetTimer()
	cpu.start()
	for i := 0; i < b.N; i++ {
		body(i)
	}
	cpu.stop()
	b.StopTimer()
	cpu.report(b)
}

func BenchmarkIngestAndWrite2k(b *testing.B) {
	entries := genTree(1, 2000, 20<<20)
	data := makeTar(b, entries)
	b.SetBytes(int64(len(data)))
	var cpu cpuMeter
	defer cpu.report(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		n := benchOpen(b)
		b.StartTimer()
		cpu.start()
		in, err := IngestTar(context.Background(), bytes.NewReader(data), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n.WriteObjects(in.Objects); err != nil {
			b.Fatal(err)
		}
		cpu.stop()
	}
}

func BenchmarkIngestOnly2k(b *testing.B) {
	data := makeTar(b, genTree(1, 2000, 20<<20))
	loop(b, func(i int) {
		if _, err := IngestTar(context.Background(), bytes.NewReader(data), Limits{}); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkGitAddWriteTree2k is the git CLI doing the same work:
// `git add -A && git write-tree` on the extracted files (fresh index).
func BenchmarkGitAddWriteTree2k(b *testing.B) {
	entries := genTree(1, 2000, 20<<20)
	work := benchDir(b)
	for _, e := range entries {
		p := filepath.Join(work, "src", e.Name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(e.Body), os.FileMode(e.Mode))
	}
	var cpu cpuMeter
	defer cpu.report(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		gd := filepath.Join(work, fmt.Sprintf("g%d.git", i))
		exec.Command("git", "init", "-q", "--bare", gd).Run()
		b.StartTimer()
		cpu.start()
		cmd := exec.Command("sh", "-c", "git add -A && git write-tree >/dev/null")
		cmd.Dir = filepath.Join(work, "src")
		cmd.Env = append(os.Environ(), "GIT_DIR="+gd, "GIT_WORK_TREE=.", "GIT_INDEX_FILE="+gd+"/index")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
		cpu.stop()
		b.StopTimer()
		os.RemoveAll(gd)
		b.StartTimer()
	}
}

func benchCommitSetup(b *testing.B) (*Network, plumbing.Hash, plumbing.Hash) {
	n := benchOpen(b)
	in, err := IngestTar(context.Background(), bytes.NewReader(makeTar(b, genTree(2, 200, 1<<20))), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := n.WriteObjects(in.Objects); err != nil {
		b.Fatal(err)
	}
	c, _, err := n.WriteCommit(CommitSpec{Tree: in.Tree, Author: testSig, Committer: testSig, Message: "base\n"})
	if err != nil {
		b.Fatal(err)
	}
	return n, c, in.Tree
}

// BenchmarkWriteCommit is the object half of a rollback: one commit
// object with an existing tree, written loose and fsynced.
func BenchmarkWriteCommit(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	loop(b, func(i int) {
		sig := sigAt(1700000000 + int64(i))
		h, _, err := n.WriteCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sig, Committer: sig, Message: "rollback\n"})
		if err != nil {
			b.Fatal(err)
		}
		c = h
	})
}

// BenchmarkRollback is WriteCommit plus MirrorRef (both fsynced), the
// same work as `git commit-tree` + `git update-ref`.
func BenchmarkRollback(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	loop(b, func(i int) {
		sig := sigAt(1700000000 + int64(i))
		h, _, err := n.WriteCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sig, Committer: sig, Message: "rollback\n"})
		if err != nil {
			b.Fatal(err)
		}
		if err := n.MirrorRef("ws", "refs/heads/main", h); err != nil {
			b.Fatal(err)
		}
		c = h
	})
}

// BenchmarkWriteCommitAsPack writes the same commit as a one-object pack,
// the alternative WriteCommit does not take.
func BenchmarkWriteCommitAsPack(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	loop(b, func(i int) {
		sig := sigAt(1700000000 + int64(i))
		obj := EncodeCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sig, Committer: sig, Message: "rollback\n"})
		if _, err := n.WriteObjects([]plumbing.EncodedObject{obj}); err != nil {
			b.Fatal(err)
		}
		c = obj.Hash()
	})
}

// BenchmarkGitCommitTreeUpdateRef is the git CLI rollback:
// `git commit-tree` + `git update-ref`.
func BenchmarkGitCommitTreeUpdateRef(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	must(b, n.MirrorRef("ws", "refs/heads/main", c))
	loop(b, func(i int) {
		cmd := exec.Command("sh", "-c", `c=$(git commit-tree -m rollback -p refs/namespaces/ws/refs/heads/main `+tree.String()+`) && git update-ref refs/namespaces/ws/refs/heads/main $c`)
		cmd.Env = append(os.Environ(), "GIT_DIR="+n.Dir(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b",
			fmt.Sprintf("GIT_COMMITTER_DATE=%d +0000", 1700000000+i))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
	})
}

func BenchmarkCommitRead(b *testing.B) {
	n, c, _ := benchCommitSetup(b)
	// Also a commit inside a pack.
	obj := EncodeCommit(CommitSpec{Tree: must2(n.Commit(c)).Tree, Parents: []plumbing.Hash{c}, Author: testSig, Committer: testSig, Message: "packed\n"})
	n.WriteObjects([]plumbing.EncodedObject{obj})
	for _, tc := range []struct {
		name string
		h    plumbing.Hash
	}{{"loose", c}, {"packed", obj.Hash()}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := n.Commit(tc.h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

var _ = tar.TypeReg

// BenchmarkIngestAndWriteIncremental2k is the common push: the whole
// worktree is uploaded again with one file changed; only that blob and
// its trees are new.
func BenchmarkIngestAndWriteIncremental2k(b *testing.B) {
	entries := genTree(1, 2000, 20<<20)
	n := benchOpen(b)
	in, err := IngestTar(context.Background(), bytes.NewReader(makeTar(b, entries)), Limits{})
	if err != nil {
		b.Fatal(err)
	}
	n.WriteObjects(in.Objects)
	tars := make([][]byte, 0, 16)
	for i := 0; i < cap(tars); i++ {
		e := append([]tarEntry(nil), entries...)
		e[i*100].Body += fmt.Sprintf("change %d\n", i)
		tars = append(tars, makeTar(b, e))
	}
	loop(b, func(i int) {
		in, err := IngestTar(context.Background(), bytes.NewReader(tars[i%len(tars)]), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n.WriteObjects(in.Objects); err != nil {
			b.Fatal(err)
		}
	})
}

// receiveSetup builds a 2,000-file git repository, its full pack and thin
// packs of commits that each change one file of it.
func receiveSetup(b *testing.B, changes int) (full []byte, thin [][]byte) {
	dir := filepath.Join(benchDir(b), "client")
	os.MkdirAll(dir, 0o755)
	env := []string{"GIT_CONFIG_NOSYSTEM=1"}
	run := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append(env, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b")...)
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	run("init", "-q")
	entries := genTree(1, 2000, 20<<20)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(e.Body), os.FileMode(e.Mode))
	}
	run("add", "-A")
	run("commit", "-q", "-m", "base")
	base := run("rev-parse", "HEAD")
	full = packObjectsB(b, filepath.Join(dir, ".git"), base+"\n", "--revs")
	for i := 0; i < changes; i++ {
		run("checkout", "-q", base)
		p := filepath.Join(dir, entries[i*7].Name)
		f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		fmt.Fprintf(f, "change %d\n", i)
		f.Close()
		run("commit", "-q", "-am", "change")
		c := run("rev-parse", "HEAD")
		thin = append(thin, packObjectsB(b, filepath.Join(dir, ".git"), c+"\n^"+base+"\n", "--revs", "--thin"))
	}
	return full, thin
}

func packObjectsB(b *testing.B, gitDir, revs string, args ...string) []byte {
	cmd := exec.Command("git", append([]string{"--git-dir=" + gitDir, "pack-objects", "--stdout", "-q"}, args...)...)
	cmd.Stdin = strings.NewReader(revs)
	out, err := cmd.Output()
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkReceivePackIncremental receives a thin pack of a commit that
// changes one file of a 2,000-file tree (a ref delta against the stored
// blob). Symlink-escape bookkeeping of stored trees is warm (a previous
// push on the same Network), as in a running server.
func BenchmarkReceivePackIncremental(b *testing.B) {
	full, thin := receiveSetup(b, 64)
	var n *Network
	fresh := func() {
		n = benchOpen(b)
		if _, err := n.ReceivePack(bytes.NewReader(full), Limits{}); err != nil {
			b.Fatal(err)
		}
		if _, err := n.ReceivePack(bytes.NewReader(thin[0]), Limits{}); err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	loop(b, func(i int) {
		// Each pack is new only once: start over on a fresh store (not
		// timed) when they are used up.
		k := i%(len(thin)-1) + 1
		if k == 1 && i > 0 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		st, err := n.ReceivePack(bytes.NewReader(thin[k]), Limits{})
		if err != nil || st.Objects == 0 {
			b.Fatal(err, st)
		}
	})
}

// BenchmarkGitIndexPackIncremental is git's receive path for the same
// packs: `git index-pack --stdin --fix-thin --strict`.
func BenchmarkGitIndexPackIncremental(b *testing.B) {
	full, thin := receiveSetup(b, 64)
	var gd string
	indexPack := func(p []byte) {
		cmd := exec.Command("git", "--git-dir="+gd, "index-pack", "--stdin", "--fix-thin", "--strict")
		cmd.Stdin = bytes.NewReader(p)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
	}
	fresh := func() {
		gd = filepath.Join(benchDir(b), "srv.git")
		exec.Command("git", "init", "-q", "--bare", gd).Run()
		indexPack(full)
		indexPack(thin[0])
	}
	fresh()
	loop(b, func(i int) {
		k := i%(len(thin)-1) + 1
		if k == 1 && i > 0 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		indexPack(thin[k])
	})
}

func compareSetup(b *testing.B) (*Network, plumbing.Hash, plumbing.Hash) {
	entries := genTree(1, 2000, 20<<20)
	n := benchOpen(b)
	base, _ := mustPush(b, n, entries, nil, 1700000000)
	e := append([]tarEntry(nil), entries...)
	for i := 0; i < 10; i++ {
		body := e[i*150].Body
		mid := len(body) / 2
		e[i*150].Body = body[:mid] + "an inserted line\n" + body[mid:]
	}
	head, _ := mustPush(b, n, e, []plumbing.Hash{base}, 1700000100)
	return n, base, head
}

// BenchmarkCompare10 diffs two 2,000-file commits that differ in 10
// files (10 KB each), patches included.
func BenchmarkCompare10(b *testing.B) {
	n, base, head := compareSetup(b)
	loop(b, func(i int) {
		ch, err := n.Compare(base, head, CompareOptions{})
		if err != nil || len(ch) != 10 {
			b.Fatal(err, len(ch))
		}
	})
}

// BenchmarkGitDiff10 is `git diff base head` for the same commits.
func BenchmarkGitDiff10(b *testing.B) {
	n, base, head := compareSetup(b)
	loop(b, func(i int) {
		cmd := exec.Command("git", "--git-dir="+n.Dir(), "diff", base.String(), head.String())
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkArchive2k streams a 2,000-file commit as tar to io.Discard.
func BenchmarkArchive2k(b *testing.B) {
	n, _, head := compareSetup(b)
	loop(b, func(i int) {
		if err := n.Archive(context.Background(), io.Discard, head); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkGitArchive2k is `git archive` of the same commit.
func BenchmarkGitArchive2k(b *testing.B) {
	n, _, head := compareSetup(b)
	loop(b, func(i int) {
		cmd := exec.Command("git", "--git-dir="+n.Dir(), "archive", head.String())
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	})
}

// fullHistoryPack returns the pack `git push` sends for every branch and
// tag of a real history (a corpus bundle cloned on tmpfs): what a full
// push to an empty repository transfers. It skips when the corpus is
// absent (LOCKSTEP_CORPUS_DIR, default /work/shared/corpus).
func fullHistoryPack(b *testing.B, bundle string) []byte {
	b.Helper()
	corpus := os.Getenv("LOCKSTEP_CORPUS_DIR")
	if corpus == "" {
		corpus = "/work/shared/corpus"
	}
	src := filepath.Join(corpus, bundle)
	if _, err := os.Stat(src); err != nil {
		b.Skipf("corpus %s not found (set LOCKSTEP_CORPUS_DIR): %v", src, err)
	}
	gd := filepath.Join(benchDir(b), "client.git")
	if out, err := exec.Command("git", "clone", "-q", "--mirror", src, gd).CombinedOutput(); err != nil {
		b.Fatalf("clone %s: %v %s", src, err, out)
	}
	refs, err := exec.Command("git", "--git-dir="+gd, "for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags").Output()
	if err != nil {
		b.Fatal(err)
	}
	// What git push sends: --revs --thin --delta-base-offset (a full push
	// has nothing to be thin against), progress off.
	return packObjectsB(b, gd, string(refs), "--revs", "--thin", "--delta-base-offset")
}

// packDirBytes is the size of the pack directory of a repository (what
// du reports for a network after a full push, loose objects aside).
func packDirBytes(b *testing.B, gitDir string) int64 {
	var total int64
	filepath.WalkDir(filepath.Join(gitDir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				total += fi.Size()
			}
		}
		return nil
	})
	return total
}

// BenchmarkReceivePackFullHistory receives a full-history push of a real
// repository (echo: 4,446 commits; testify: 3,261) into an empty
// network and reports the bytes stored ("stored-B") beside the pack's
// size ("pack-B"), and of cpu-ms (this process and git's) this
// process's own ("self-cpu-ms": prescan, validation; git index-pack
// and cat-file are the rest, and vary with the load more than this);
// BenchmarkGitIndexPackFullHistory is git's receive side for the same
// pack (`git push` to a bare repository over file://).
func BenchmarkReceivePackFullHistory(b *testing.B) {
	for _, bundle := range []string{"echo.bundle", "testify.bundle"} {
		b.Run(strings.TrimSuffix(bundle, ".bundle"), func(b *testing.B) {
			full := fullHistoryPack(b, bundle)
			var stored int64
			var self time.Duration
			loop(b, func(int) {
				b.StopTimer()
				n := benchOpen(b)
				b.StartTimer()
				t0 := selfCPUTime()
				if _, err := n.ReceivePack(bytes.NewReader(full), Limits{}); err != nil {
					b.Fatal(err)
				}
				self += selfCPUTime() - t0
				b.StopTimer()
				stored = packDirBytes(b, n.Dir())
				n.Close()
				b.StartTimer()
			})
			b.ReportMetric(float64(stored), "stored-B")
			b.ReportMetric(float64(len(full)), "pack-B")
			b.ReportMetric(float64(self.Microseconds())/1000/float64(b.N), "self-cpu-ms/op")
		})
	}
}

// selfCPUTime is cpuTime without the children (git).
func selfCPUTime() time.Duration {
	var self syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano())
}

func BenchmarkGitIndexPackFullHistory(b *testing.B) {
	for _, bundle := range []string{"echo.bundle", "testify.bundle"} {
		b.Run(strings.TrimSuffix(bundle, ".bundle"), func(b *testing.B) {
			full := fullHistoryPack(b, bundle)
			var stored int64
			loop(b, func(int) {
				b.StopTimer()
				gd := filepath.Join(benchDir(b), "srv.git")
				exec.Command("git", "init", "-q", "--bare", gd).Run()
				b.StartTimer()
				cmd := exec.Command("git", "--git-dir="+gd, "index-pack", "--stdin", "--fix-thin", "--strict")
				cmd.Stdin = bytes.NewReader(full)
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v %s", err, out)
				}
				b.StopTimer()
				stored = packDirBytes(b, gd)
				b.StartTimer()
			})
			b.ReportMetric(float64(stored), "stored-B")
			b.ReportMetric(float64(len(full)), "pack-B")
		})
	}
}

// BenchmarkPrescanFullHistory is prescan alone (the size check every
// received pack goes through, in this process, beside git index-pack) on
// the full-history packs of BenchmarkReceivePackFullHistory.
func BenchmarkPrescanFullHistory(b *testing.B) {
	for _, bundle := range []string{"echo.bundle", "testify.bundle"} {
		b.Run(strings.TrimSuffix(bundle, ".bundle"), func(b *testing.B) {
			full := fullHistoryPack(b, bundle)
			body := full[:len(full)-20]
			lim := Limits{}.WithDefaults()
			b.SetBytes(int64(len(body)))
			loop(b, func(int) {
				if err := prescan(bytes.NewReader(body), lim); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}
