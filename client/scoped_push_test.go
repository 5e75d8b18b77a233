package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
)

// scopedWorld is a server with a base r holding other.txt, a workspace
// of the agent (ws) and a key scoped to it.
func scopedWorld(tb testing.TB, s *testServer, ws string) (agent, scoped *client.Client) {
	ctx := context.Background()
	admin := client.New(s.URL, s.Admin)
	if _, err := admin.CreateRepo(ctx, "r", "main"); err != nil && ws == "ws" {
		tb.Fatal(err)
	}
	agent = client.New(s.URL, s.Agent)
	if _, err := agent.Fork(ctx, "r", ws); err != nil {
		tb.Fatal(err)
	}
	k, err := agent.MintKey(ctx, "sub-"+ws, "agent", time.Hour, &api.KeyScope{Workspace: ws})
	if err != nil {
		tb.Fatal(err)
	}
	return agent, client.New(s.URL, k.Secret)
}

// TestPushDirScoped: `lockstep push` with a scoped key works as with any
// key: the first push, a change on top of its tip, and a file whose
// content another workspace stored (objects/missing calls it missing to
// the scoped key, which uploads it; the upload is accepted).
func TestPushDirScoped(t *testing.T) {
	ctx := context.Background()
	s := mustServer(t)
	agent, scoped := scopedWorld(t, s, "ws")
	other := t.TempDir()
	writeFiles(t, other, map[string]string{"secret.env": "API_KEY=x\n"})
	if _, err := agent.Fork(ctx, "r", "theirs"); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.PushDir(ctx, "theirs", other, client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "c")}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.txt": "a\n", "src/b.go": "package b\n"})
	cache := filepath.Join(t.TempDir(), "statcache")
	opts := client.PushDirOptions{ExpectCurrent: true, StatCache: cache}
	if _, err := scoped.PushDir(ctx, "ws", dir, opts); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"src/b.go": "package b // changed\n"})
	if _, err := scoped.PushDir(ctx, "ws", dir, opts); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"copied.env": "API_KEY=x\n"})
	res, err := scoped.PushDir(ctx, "ws", dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The blob and the root tree are sent: the blob was stored already
	// (theirs), yet counted as written to the scoped key.
	if res.ObjectsSent != 2 || res.Uploaded.ObjectsWritten != 2 {
		t.Fatalf("push of content stored elsewhere: sent %d, written %d; want 2 and 2", res.ObjectsSent, res.Uploaded.ObjectsWritten)
	}
}

// BenchmarkPushDirScoped is push-incremental (one changed file of 2,000)
// with the workspace owner's key and with a key scoped to the workspace:
// what the scoped keys' presence rule adds to a push.
func BenchmarkPushDirScoped(b *testing.B) {
	ctx := context.Background()
	s, err := startServer(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, mode := range []string{"unscoped", "scoped"} {
		ws := "ws-" + mode
		agent, scoped := scopedWorld(b, s, ws)
		c := agent
		if mode == "scoped" {
			c = scoped
		}
		dir := b.TempDir()
		for i := 0; i < 2000; i++ {
			p := filepath.Join(dir, fmt.Sprintf("d%d/e%d/f%d.txt", i%20, i%200, i))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644)
		}
		opts := client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(b.TempDir(), "statcache")}
		if _, err := c.PushDir(ctx, ws, dir, opts); err != nil {
			b.Fatal(err)
		}
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				os.WriteFile(filepath.Join(dir, "d0/e0/f0.txt"), []byte(fmt.Sprintf("change %d\n", i)), 0o644)
				if _, err := c.PushDir(ctx, ws, dir, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
