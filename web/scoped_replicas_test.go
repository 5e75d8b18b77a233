package web_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/web"
)

// roundRobin sends each request to the next of hosts, as a load balancer
// in front of replicas does.
type roundRobin struct {
	hosts []string
	n     atomic.Int64
}

func (rr *roundRobin) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.URL.Host = rr.hosts[int(rr.n.Add(1))%len(rr.hosts)]
	return http.DefaultTransport.RoundTrip(req)
}

// TestScopedPushAcrossReplicas: `lockstep push` with a scoped key through
// a load balancer that sends each request to the other of two replicas.
// The objects upload lands on one and the PUT worktree?tree= naming the
// uploaded tree on the other, which never saw the upload: it reads the
// upload's grant from the operations log (before, it answered 404 "upload
// its objects first" every time).
func TestScopedPushAcrossReplicas(t *testing.T) {
	dsn, dir := testenv.MustPostgresDB(t), t.TempDir()
	f := mustServerOn(t, dsn, dir, web.Config{}, nil, nil, nil)
	g := mustServerOn(t, dsn, dir, web.Config{}, nil, nil, f)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	ctx := context.Background()
	agent := client.New(f.srv.URL, f.agent)
	k, err := agent.MintKey(ctx, "scoped", "agent", time.Hour, &api.KeyScope{Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	fu, _ := url.Parse(f.srv.URL)
	gu, _ := url.Parse(g.srv.URL)
	scoped := client.New(f.srv.URL, k.Secret)
	scoped.HTTP = &http.Client{Transport: &roundRobin{hosts: []string{fu.Host, gu.Host}}}
	work := t.TempDir()
	opts := client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "statcache")}
	for i, content := range []string{"one\n", "two\n", "three\n", "four\n"} {
		if err := os.WriteFile(filepath.Join(work, "f.txt"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := scoped.PushDir(ctx, "ws", work, opts)
		if err != nil {
			t.Fatalf("push %d through two replicas: %v", i+1, err)
		}
		if got, err := agent.Ref(ctx, "ws", "main"); err != nil || got != res.Commit {
			t.Fatalf("push %d: main is %s (%v), want %s", i+1, got, err, res.Commit)
		}
	}
}
