package client_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/client"
)

// TestPushDirStaleCache: the stat cache's record of what the server holds
// (the trees of the last accepted push) is only a hint. Pushed to a
// repository of another network (which holds none of it), the same
// directory and cache still push: the trees the cache calls known are
// asked about again when the server refuses for want of them.
func TestPushDirStaleCache(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	admin := client.New(s.URL, s.Admin)
	for _, r := range []string{"one", "two"} {
		if _, err := admin.CreateRepo(ctx, r, "main"); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n", "src/deep/c.txt": "c\n"})
	opts := client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "statcache")}
	if _, err := admin.PushDir(ctx, "one", dir, opts); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"a.txt": "a, changed\n"})
	res, err := admin.PushDir(ctx, "two", dir, opts)
	if err != nil {
		t.Fatalf("push of the same directory to another network: %v", err)
	}
	for path, want := range map[string]string{"a.txt": "a, changed\n", "src/b.go": "package b\n", "src/deep/c.txt": "c\n"} {
		if got := blob(t, admin, "two", res.Commit, path); got != want {
			t.Fatalf("two:%s = %q, want %q", path, got, want)
		}
	}
}

// blob reads path at rev of repo.
func blob(t *testing.T, c *client.Client, repo, rev, path string) string {
	t.Helper()
	var b strings.Builder
	if _, err := c.Blob(context.Background(), repo, rev, path, &b); err != nil {
		t.Fatalf("%s:%s at %s: %v", repo, path, rev, err)
	}
	return b.String()
}
