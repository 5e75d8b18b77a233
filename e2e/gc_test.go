package e2e

// Object GC, end to end (issue 28 item 1, "Done when"): attempts that
// pushed large blobs are deleted, `lockstep gc --prune now` frees their
// space on disk and (object storage) in the bucket, and a clone of every
// live ref passes `git fsck --strict`.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// gcBlobBytes is the size of each attempt's random (incompressible) blob.
const gcBlobBytes = 2 << 20

// gcCLIResult is `lockstep gc --json`.
type gcCLIResult struct {
	DryRun      bool   `json:"dry_run"`
	Retention   string `json:"retention"`
	Networks    int    `json:"networks"`
	Objects     int    `json:"objects"`
	Packs       int    `json:"packs"`
	Loose       int    `json:"loose"`
	Bytes       int64  `json:"bytes"`
	BucketPacks int    `json:"bucket_packs_deleted"`
}

func gcCLI(t *testing.T, s *server, args ...string) gcCLIResult {
	t.Helper()
	r := s.CLI(t, s.AdminKey, "", append([]string{"gc", "--json"}, args...)...)
	if r.Code != 0 {
		t.Fatalf("lockstep gc %v: %s", args, r)
	}
	var out gcCLIResult
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("lockstep gc %v: %v: %s", args, err, r)
	}
	return out
}

// objectBytes sums the files under every objects/ directory of a data
// directory (the networks' objects, or their caches in object storage).
func objectBytes(t *testing.T, data string) int64 {
	t.Helper()
	var sum int64
	err := filepath.WalkDir(data, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, string(filepath.Separator)+"objects"+string(filepath.Separator)) {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			sum += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// gcAttempts makes base (a small tree) with a live workspace holding one
// large blob, and three attempts, each a workspace with a large random
// blob of its own, deleted at once (the CLI for the first, DELETE
// ?purge=true for the others). It returns the live workspace's name.
func gcAttempts(t *testing.T, s *server) string {
	t.Helper()
	s.CreateRepo(t, "base")
	s.Push(t, s.AdminKey, "base", "", map[string]string{"README.md": "base\n", "src/a.go": "package a\n"})
	big := func() string {
		b := make([]byte, gcBlobBytes)
		rand.Read(b)
		return string(b)
	}
	f := s.fork(t, s.AdminKey, "base", "ws-live")
	s.Push(t, s.AdminKey, "ws-live", f.BaseCommit, map[string]string{"README.md": "base\n", "src/a.go": "package a\n", "live.bin": big()})
	for i := 1; i <= 3; i++ {
		ws := fmt.Sprintf("ws-%d", i)
		f := s.fork(t, s.AdminKey, "base", ws)
		s.Push(t, s.AdminKey, ws, f.BaseCommit, map[string]string{"README.md": "base\n", "src/a.go": "package a\n", "attempt.bin": big()})
	}
	if r := s.CLI(t, s.AdminKey, "", "workspace", "delete", "ws-1"); r.Code != 0 {
		t.Fatalf("lockstep workspace delete ws-1: %s", r)
	}
	for _, ws := range []string{"ws-2", "ws-3"} {
		if r := s.Call(t, "DELETE", "/api/v1/repos/"+ws+"?purge=true", s.AdminKey, nil, ""); r.Status != http.StatusOK {
			t.Fatalf("DELETE %s?purge=true: %s", ws, r)
		}
	}
	return "ws-live"
}

// checkGCRun checks a dry run then a real one: the dry run changes
// nothing on disk and reports what the real one reclaims (at least the
// three attempts' blobs); the real one frees it on disk and leaves an
// oplog entry gc saying so. disk is the size of s's objects; cache: they
// are a cache of the bucket (object storage).
func checkGCRun(t *testing.T, s *server, cache bool, disk func() int64) gcCLIResult {
	t.Helper()
	before := disk()
	dry := gcCLI(t, s, "--prune", "now", "--dry-run")
	if !dry.DryRun || dry.Bytes < 3*gcBlobBytes || dry.Objects < 3 {
		t.Fatalf("dry run %+v: want the three attempts' blobs (%d bytes each)", dry, gcBlobBytes)
	}
	// Nothing dropped; a replica's cache (object storage) may have caught
	// up with the bucket meanwhile.
	if got := disk(); got < before || !cache && got != before {
		t.Fatalf("a dry run changed the objects on disk: %d bytes, then %d", before, got)
	} else {
		before = got
	}
	res := gcCLI(t, s, "--prune", "now")
	if res.DryRun || res.Bytes != dry.Bytes || res.Objects != dry.Objects || res.Retention != "0s" {
		t.Fatalf("gc %+v, want what the dry run %+v reported", res, dry)
	}
	after := disk()
	if freed := before - after; freed < 3*gcBlobBytes {
		t.Fatalf("objects on disk: %d bytes before the gc, %d after: want at least %d freed", before, after, 3*gcBlobBytes)
	}
	t.Logf("gc reclaimed %d objects, %d bytes; objects on disk %d → %d bytes", res.Objects, res.Bytes, before, after)
	ops := s.Oplog(t, url.Values{"op": {"gc"}})
	if len(ops) != 1 || ops[0].Objects != res.Objects || ops[0].Bytes != res.Bytes || ops[0].Details["retention"] != "0s" {
		t.Fatalf("oplog gc entries %+v: want one with %d objects, %d bytes, retention 0s", ops, res.Objects, res.Bytes)
	}
	// What is left is reclaimed already: a second run finds nothing.
	if again := gcCLI(t, s, "--prune", "now", "--dry-run"); again.Objects != 0 {
		t.Fatalf("dry run after the gc: %+v, want nothing", again)
	}
	return res
}

// fsckLiveRefs mirrors base and the live workspace (every ref) through s
// and runs git fsck --strict on them.
func fsckLiveRefs(t *testing.T, s *server, live string) {
	t.Helper()
	for _, repo := range []string{"base", live} {
		dir := filepath.Join(t.TempDir(), repo+".git")
		e2ekit.Git(t, "", "clone", "-q", "--mirror", s.GitURL(repo, s.AdminKey), dir)
		e2ekit.Git(t, dir, "fsck", "--strict", "--no-dangling")
		if repo == live {
			if out := e2ekit.Git(t, dir, "cat-file", "-s", "main:live.bin"); strings.TrimSpace(out) != fmt.Sprint(gcBlobBytes) {
				t.Fatalf("live.bin of %s after the gc: %s bytes", live, out)
			}
		}
	}
}

// TestGCReclaimsDeletedAttempts: local mode (SQLite, one process).
func TestGCReclaimsDeletedAttempts(t *testing.T) {
	s := startServer(t, serverOpts{})
	live := gcAttempts(t, s)
	checkGCRun(t, s, false, func() int64 { return objectBytes(t, s.Data) })
	fsckLiveRefs(t, s, live)
}

// TestGCReclaimsDeletedAttemptsObjectStore: object storage (Postgres,
// versitygw, two replicas). The attempts are pushed through one replica
// and the gc runs on the other; the retired packs leave the bucket once
// older than --object-grace (a second gc deletes them), and clones
// through both replicas pass fsck.
func TestGCReclaimsDeletedAttemptsObjectStore(t *testing.T) {
	const grace = 4 * time.Second
	w := newObjWorld(t, objOpts{Replicas: 2, Args: []string{"--object-grace", grace.String(), "--gc-interval", "0", "--object-gc-interval", "0"}})
	a, b := w.reps[0], w.reps[1]
	live := gcAttempts(t, a)
	c := w.s3.Client(t)
	bucketBytes := func() (n int64) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for o := range c.ListObjects(ctx, w.bucket, minio.ListObjectsOptions{Prefix: "e2e/", Recursive: true}) {
			if o.Err != nil {
				t.Fatalf("list bucket %s: %v", w.bucket, o.Err)
			}
			n += o.Size
		}
		return n
	}
	bucketBefore := bucketBytes()
	checkGCRun(t, b, true, func() int64 { return objectBytes(t, b.Data) })
	if got := bucketBytes(); got != bucketBefore {
		t.Fatalf("bucket: %d bytes before the gc, %d right after: want the retired packs kept for --object-grace", bucketBefore, got)
	}
	time.Sleep(grace + 2*time.Second) // past the grace (listings report times to the second)
	res := gcCLI(t, b, "--prune", "now")
	if res.BucketPacks == 0 {
		t.Fatalf("second gc %+v: want the retired packs deleted from the bucket", res)
	}
	bucketAfter := bucketBytes()
	if freed := bucketBefore - bucketAfter; freed < 3*gcBlobBytes {
		t.Fatalf("bucket: %d bytes before the gc, %d after: want at least %d freed", bucketBefore, bucketAfter, 3*gcBlobBytes)
	}
	t.Logf("bucket %d → %d bytes", bucketBefore, bucketAfter)
	fsckLiveRefs(t, a, live)
	fsckLiveRefs(t, b, live)
	// Replica a, which pushed the attempts, dropped the retired packs from
	// its cache at its next request (the clones above).
	if got := objectBytes(t, a.Data); got > objectBytes(t, b.Data)+gcBlobBytes {
		t.Fatalf("replica a's cache: %d bytes after the gc, replica b's %d", got, objectBytes(t, b.Data))
	}
}
