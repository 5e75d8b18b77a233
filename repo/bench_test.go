package repo

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
)

// Benchmarks run on tmpfs (/dev/shm) when it exists, as NOTES-machine.md
// asks for file-heavy work.
func benchDir(b *testing.B) string {
	b.Helper()
	root := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
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

func BenchmarkIngestAndWrite2k(b *testing.B) {
	entries := genTree(1, 2000, 20<<20)
	data := makeTar(b, entries)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		n := benchOpen(b)
		b.StartTimer()
		in, err := IngestTar(context.Background(), bytes.NewReader(data), Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := n.WriteObjects(in.Objects); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkIngestOnly2k(b *testing.B) {
	data := makeTar(b, genTree(1, 2000, 20<<20))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := IngestTar(context.Background(), bytes.NewReader(data), Limits{}); err != nil {
			b.Fatal(err)
		}
	}
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
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		gd := filepath.Join(work, fmt.Sprintf("g%d.git", i))
		exec.Command("git", "init", "-q", "--bare", gd).Run()
		b.StartTimer()
		cmd := exec.Command("sh", "-c", "git add -A && git write-tree >/dev/null")
		cmd.Dir = filepath.Join(work, "src")
		cmd.Env = append(os.Environ(), "GIT_DIR="+gd, "GIT_WORK_TREE=.", "GIT_INDEX_FILE="+gd+"/index")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
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

// BenchmarkWriteCommit is the rollback path: one commit object with an
// existing tree, written loose and fsynced, then the ref mirrored.
func BenchmarkWriteCommit(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sig := sigAt(1700000000 + int64(i))
		h, _, err := n.WriteCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sig, Committer: sig, Message: "rollback\n"})
		if err != nil {
			b.Fatal(err)
		}
		if err := n.MirrorRef("ws", "refs/heads/main", h); err != nil {
			b.Fatal(err)
		}
		c = h
	}
}

// BenchmarkWriteCommitAsPack writes the same commit as a one-object pack,
// the alternative WriteCommit does not take.
func BenchmarkWriteCommitAsPack(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sig := sigAt(1700000000 + int64(i))
		obj := EncodeCommit(CommitSpec{Tree: tree, Parents: []plumbing.Hash{c}, Author: sig, Committer: sig, Message: "rollback\n"})
		if _, err := n.WriteObjects([]plumbing.EncodedObject{obj}); err != nil {
			b.Fatal(err)
		}
		c = obj.Hash()
	}
}

// BenchmarkGitCommitTreeUpdateRef is the git CLI rollback:
// `git commit-tree` + `git update-ref`.
func BenchmarkGitCommitTreeUpdateRef(b *testing.B) {
	n, c, tree := benchCommitSetup(b)
	must(b, n.MirrorRef("ws", "refs/heads/main", c))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("sh", "-c", `c=$(git commit-tree -m rollback -p refs/namespaces/ws/refs/heads/main `+tree.String()+`) && git update-ref refs/namespaces/ws/refs/heads/main $c`)
		cmd.Env = append(os.Environ(), "GIT_DIR="+n.Dir(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@b", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@b",
			fmt.Sprintf("GIT_COMMITTER_DATE=%d +0000", 1700000000+i))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v %s", err, out)
		}
	}
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
var _ = time.Second
