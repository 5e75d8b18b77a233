package e2e

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// networkObjects counts the distinct objects of a network and the bytes
// of its pack files (pack and index) and loose objects (commits).
func networkObjects(t *testing.T, s *server, network string) (int, int64) {
	t.Helper()
	dir := s.networkDir(network)
	out := e2ekit.Git(t, "", "--git-dir="+dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" {
			n++
		}
	}
	var size int64
	err := filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(dir, "objects"), p)
		pack := strings.HasPrefix(rel, "pack"+string(filepath.Separator)) && (strings.HasSuffix(rel, ".pack") || strings.HasSuffix(rel, ".idx"))
		loose := len(rel) == 41 && rel[2] == filepath.Separator
		if pack || loose {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			size += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, size
}

// TestOplogCountsEveryObjectOnce: after a tar push, incremental pushes
// (client.PushDir, what `lockstep push` runs: POST objects, then PUT
// worktree?tree=) and an upload no push follows, the objects and bytes
// summed over the repository's log entries are exactly what the network
// gained (issue 24 item 6: the log used to count only the commits).
func TestOplogCountsEveryObjectOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	ctx := context.Background()
	s.CreateRepo(t, "cnt")
	objs0, bytes0 := networkObjects(t, s, "cnt")
	logged := func() (int, int64, map[string]int) {
		objs, nb, ops := 0, int64(0), map[string]int{}
		for _, e := range s.Oplog(t, url.Values{"repo": {"cnt"}}) {
			objs += e.Objects
			nb += e.Bytes
			ops[e.Op] += e.Objects
		}
		return objs, nb, ops
	}
	check := func(step string) {
		t.Helper()
		objs, size := networkObjects(t, s, "cnt")
		lo, lb, ops := logged()
		if lo != objs-objs0 || lb != size-bytes0 {
			t.Errorf("after %s: the log counts %d objects, %d bytes (%v); the network gained %d objects, %d bytes",
				step, lo, lb, ops, objs-objs0, size-bytes0)
		}
	}

	// A tar push: blobs, trees and the commit in one entry.
	p := s.Push(t, s.AdminKey, "cnt", zeroOID, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n"})
	check("a tar push")

	// Incremental pushes: the upload and the commit.
	c := client.New(s.URL, s.AdminKey)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "a\n")
	writeFile(t, filepath.Join(dir, "src/b.go"), "package b\n")
	writeFile(t, filepath.Join(dir, "src/deep/c.go"), "package c\n")
	opts := client.PushDirOptions{WriteOptions: client.WriteOptions{ExpectOID: p.Commit, Message: "one"}, StatCache: filepath.Join(t.TempDir(), "cache")}
	one, err := c.PushDir(ctx, "cnt", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if one.Uploaded.ObjectsWritten < 3 {
		t.Fatalf("first incremental push uploaded %+v, want c.go's blob and 2 trees at least", one.Uploaded)
	}
	check("an incremental push")
	writeFile(t, filepath.Join(dir, "src/deep/c.go"), "package c // two\n")
	opts.ExpectOID, opts.Message = one.Commit, "two"
	if _, err := c.PushDir(ctx, "cnt", dir, opts); err != nil {
		t.Fatal(err)
	}
	check("a second incremental push")

	// An upload no push follows is logged on its own.
	pack, _ := packOf(t, map[string]string{"orphan.txt": "never pushed\n"})
	up, err := c.UploadPack(ctx, "cnt", bytes.NewReader(pack))
	if err != nil {
		t.Fatal(err)
	}
	if up.ObjectsWritten != 2 {
		t.Fatalf("orphan upload wrote %+v, want a blob and a tree", up)
	}
	check("an upload without a push")
	_, _, ops := logged()
	if ops["objects.upload"] == 0 || ops["push"] == 0 {
		t.Errorf("objects per op %v: want objects.upload and push entries both counting", ops)
	}
}
