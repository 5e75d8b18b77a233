package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/worktree"
)

// PushDirOptions are the options of PushDir: the branch write's
// compare-and-swap (WriteOptions) and how the push runs.
type PushDirOptions struct {
	WriteOptions
	// ExpectCurrent reads the branch's oid first and pushes only if it is
	// still that when the branch moves (excludes ExpectOID).
	ExpectCurrent bool
	// Progress, when set, is called as the pack is written with the
	// objects and bytes sent so far.
	Progress func(objects int, bytes int64)
	// ToSend, when set, is called once before the upload with the number
	// of objects the server lacks (the total Progress counts towards).
	ToSend func(objects int)
	// StatCache is the file of the stat cache (file stat → blob oid, and
	// the trees the server is known to hold); "" means
	// DefaultStatCachePath of the directory. It is kept outside the
	// pushed directory.
	StatCache string
	// WatchTimeout bounds the query to a `lockstep watch` daemon of the
	// directory (0: worktree.DefaultWatchTimeout); on timeout the push
	// scans everything.
	WatchTimeout time.Duration
}

// PushDirResult is what PushDir did: the server's answer (with the
// objects written by the upload added in) and what the client did.
type PushDirResult struct {
	api.PushResult
	Files       int     `json:"files"`        // files scanned
	Hashed      int     `json:"hashed"`       // files hashed (not answered by the stat cache)
	Watched     bool    `json:"watched"`      // a `lockstep watch` daemon's changed paths replaced the walk
	ObjectsSent int     `json:"objects_sent"` // objects in the pack
	BytesSent   int64   `json:"bytes_sent"`
	RoundTrips  int     `json:"round_trips"`
	ScanMS      float64 `json:"scan_ms"`
	ServerMS    float64 `json:"server_ms"` // negotiation, upload and commit
	// Uploaded is the server's answer to the upload (zero without one).
	Uploaded api.UploadStats `json:"-"`
}

// DefaultStatCachePath is where PushDir keeps the stat cache of the
// directory absDir: under the user's cache directory, one file per
// directory.
func DefaultStatCachePath(absDir string) string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	sum := sha256.Sum256([]byte(absDir))
	return filepath.Join(base, "lockstep", "statcache", hex.EncodeToString(sum[:8]))
}

// PushDir pushes the directory dir to a branch of repo as one commit of
// its tree: it scans dir (files whose stat is unchanged since the last
// push are not hashed again), asks the server which objects it lacks
// (top-down, one round trip per tree level that changed; trees the last
// push sent are skipped), uploads those in one pack (built again if the
// upload is retried), then moves the branch by compare-and-swap to the
// new tree. A second push of a directory with one changed file sends that
// file's blob and the trees above it, nothing else.
//
// Errors: invalid_argument when dir is not a directory;
// precondition_required when the branch exists and neither ExpectOID,
// ExpectCurrent nor Force is given; ref_conflict when the branch moved.
func (c *Client) PushDir(ctx context.Context, repo, dir string, o PushDirOptions) (*PushDirResult, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if o.ExpectCurrent && o.ExpectOID != "" {
		return nil, lockstep.Errorf(lockstep.EINVALID, "push: ExpectOID and ExpectCurrent exclude each other")
	}
	cachePath := o.StatCache
	if cachePath == "" {
		cachePath = DefaultStatCachePath(abs)
	}
	rep := &PushDirResult{}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, lockstep.Errorf(lockstep.EINVALID, "push: %v", err)
	}
	if !st.IsDir() {
		return nil, lockstep.Errorf(lockstep.EINVALID, "push: %s is not a directory", abs)
	}
	wo := o.WriteOptions
	if o.ExpectCurrent {
		if wo.Branch == "" {
			r, err := c.Repo(ctx, repo)
			if err != nil {
				return nil, err
			}
			wo.Branch = r.DefaultBranch
		}
		cur, err := c.Ref(ctx, repo, wo.Branch)
		if err != nil {
			return nil, err
		}
		rep.RoundTrips++
		wo.ExpectOID = cur
		if cur == "" {
			wo.ExpectOID = api.ZeroOID
		}
	}
	t0 := time.Now()
	if err := os.MkdirAll(filepath.Dir(cachePath), 0o700); err != nil {
		return nil, err
	}
	cache, err := worktree.OpenStatCache(cachePath)
	if err != nil {
		return nil, err
	}
	snap, err := worktree.Scan(abs, worktree.ScanOptions{Cache: cache, Watcher: worktree.WatchSocketPath(abs), WatchTimeout: o.WatchTimeout})
	if err != nil {
		return nil, err
	}
	rep.ScanMS = msSince(t0)
	rep.Files, rep.Hashed, rep.Watched = snap.Files, snap.Hashed, snap.Watched
	t1 := time.Now()
	missing, err := worktree.Plan(ctx, snap, func(ctx context.Context, oids []plumbing.Hash) ([]plumbing.Hash, error) {
		rep.RoundTrips++
		in := make([]string, len(oids))
		for i, h := range oids {
			in[i] = h.String()
		}
		out, err := c.Missing(ctx, repo, in)
		if err != nil {
			return nil, err
		}
		hs := make([]plumbing.Hash, len(out))
		for i, s := range out {
			hs[i] = plumbing.NewHash(s)
		}
		return hs, nil
	}, &worktree.PlanOptions{Known: cache.Known()})
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 && o.ToSend != nil {
		o.ToSend(len(missing))
	}
	if len(missing) > 0 {
		// The pack is streamed, and built again if the upload is retried;
		// the counts are those of the last attempt.
		var mu sync.Mutex
		attempt := 0
		up, err := c.UploadPackFunc(ctx, repo, func() (io.Reader, error) {
			mu.Lock()
			attempt++
			me := attempt
			mu.Unlock()
			pr, pw := io.Pipe()
			go func() {
				n, b, err := worktree.WritePack(snap, missing, pw, &worktree.PackOptions{Progress: o.Progress})
				mu.Lock()
				if me == attempt {
					rep.ObjectsSent, rep.BytesSent = n, b
				}
				mu.Unlock()
				pw.CloseWithError(err)
			}()
			return pr, nil
		})
		mu.Lock() // the writer goroutine of the last attempt has recorded its counts
		mu.Unlock()
		if up != nil {
			rep.Uploaded = *up
		}
		rep.RoundTrips++
		if err != nil {
			return nil, err
		}
	}
	res, err := c.PushTree(ctx, repo, snap.Tree.String(), wo)
	rep.RoundTrips++
	if err != nil {
		return nil, err
	}
	rep.ServerMS = msSince(t1)
	rep.PushResult = *res
	rep.ObjectsWritten += rep.Uploaded.ObjectsWritten
	rep.BytesWritten += rep.Uploaded.BytesWritten
	cache.SetKnown(snap.Known())
	if err := cache.Save(); err != nil {
		return nil, fmt.Errorf("save stat cache: %w", err)
	}
	return rep, nil
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
