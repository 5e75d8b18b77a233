package gitstore

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// MustOpen opens a fresh Network in a temp dir.
func MustOpen(tb testing.TB) *Network {
	tb.Helper()
	n, err := Open(filepath.Join(tb.TempDir(), "net.git"), Options{Fsync: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	return n
}

// git runs the git CLI with a clean environment and returns stdout.
func git(tb testing.TB, dir string, env []string, args ...string) string {
	tb.Helper()
	return gitRun(tb, dir, env, "", args...)
}

// gitIn is git with stdin.
func gitIn(tb testing.TB, dir, stdin string, args ...string) string {
	tb.Helper()
	return gitRun(tb, dir, nil, stdin, args...)
}

func gitRun(tb testing.TB, dir string, env []string, stdin string, args ...string) string {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+os.TempDir(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// tarEntry describes one entry of a test tar.
type tarEntry struct {
	Name     string
	Body     string
	Mode     int64
	Type     byte // tar.TypeReg if zero
	Linkname string
	Size     int64 // overrides len(Body) in the header when set
	PAX      bool
}

func makeTar(tb testing.TB, entries []tarEntry) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Mode: mode, Linkname: e.Linkname, ModTime: time.Unix(1700000000, 0)}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if e.PAX {
			h.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatalf("tar header %q: %v", e.Name, err)
		}
		if typ == tar.TypeReg {
			tw.Write([]byte(e.Body))
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func gzipBytes(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

var testSig = object.Signature{Name: "Agent", Email: "agent@example.com", When: time.Unix(1700000000, 0).UTC()}

func sigAt(sec int64) object.Signature {
	s := testSig
	s.When = time.Unix(sec, 0).UTC()
	return s
}

// mustPush ingests a tar, writes its objects and a commit.
func mustPush(tb testing.TB, n *Network, entries []tarEntry, parents []plumbing.Hash, when int64) (commit, tree plumbing.Hash) {
	tb.Helper()
	in, err := IngestTar(context.Background(), bytes.NewReader(makeTar(tb, entries)), Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	defer in.Close() // a large file's spool lives in the system temp directory
	if _, err := n.WriteObjects(in.Objects); err != nil {
		tb.Fatal(err)
	}
	c, _, err := n.WriteCommit(CommitSpec{Tree: in.Tree, Parents: parents, Author: sigAt(when), Committer: sigAt(when), Message: "push\n"})
	if err != nil {
		tb.Fatal(err)
	}
	return c, in.Tree
}

// storeFiles lists every file under objects/ (to prove nothing was written).
func storeFiles(tb testing.TB, n *Network) []string {
	tb.Helper()
	var out []string
	filepath.Walk(filepath.Join(n.Dir(), "objects"), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}
