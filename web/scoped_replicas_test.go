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

	"github.com/go-git/go-git/v5/plumbing"

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

// scopedReplicas is two replicas on one Postgres database, a base app,
// the agent's workspace ws, the agent's client and a key scoped to ws.
func scopedReplicas(t *testing.T) (f, g *fixture, agent *client.Client, scoped string) {
	t.Helper()
	dsn, dir := testenv.MustPostgresDB(t), t.TempDir()
	f = mustServerOn(t, dsn, dir, web.Config{}, nil, nil, nil)
	g = mustServerOn(t, dsn, dir, web.Config{}, nil, nil, f)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws"}`, 201)
	agent = client.New(f.srv.URL, f.agent)
	k, err := agent.MintKey(context.Background(), "scoped", "agent", time.Hour, &api.KeyScope{Workspace: "ws"})
	if err != nil {
		t.Fatal(err)
	}
	return f, g, agent, k.Secret
}

// TestScopedPushAcrossReplicas: `lockstep push` with a scoped key through
// a load balancer that sends each request to the other of two replicas.
// The objects upload lands on one and the PUT worktree?tree= naming the
// uploaded tree on the other, which never saw the upload: it reads the
// upload's grant from the operations log (before, it answered 404 "upload
// its objects first" every time).
func TestScopedPushAcrossReplicas(t *testing.T) {
	f, g, agent, secret := scopedReplicas(t)
	ctx := context.Background()
	fu, _ := url.Parse(f.srv.URL)
	gu, _ := url.Parse(g.srv.URL)
	scoped := client.New(f.srv.URL, secret)
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

// TestScopedPresenceSameOnEveryReplica: what a scoped key may name
// without sending it does not depend on which replica answers, nor on
// which requests it served before. The tree and blob of a tip before a
// rollback stay present (the workspace's own history) on every replica:
// each reads the tips from the operations log. Before, only a tip some
// request of that process had seen as current counted, so the answer
// depended on the replica and the order of requests, and a client that
// asked one replica and uploaded to another could be refused.
func TestScopedPresenceSameOnEveryReplica(t *testing.T) {
	f, g, _, secret := scopedReplicas(t)
	ctx := context.Background()
	onF, onG := client.New(f.srv.URL, secret), client.New(g.srv.URL, secret)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "f.txt"), []byte("first version\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := onF.PushDir(ctx, "ws", work, client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "c")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "f.txt"), []byte("second version\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	second, err := onF.PushDir(ctx, "ws", work, client.PushDirOptions{ExpectCurrent: true, StatCache: filepath.Join(t.TempDir(), "c")})
	if err != nil {
		t.Fatal(err)
	}
	// Back to the first version's tree: the second version's blob is
	// now only in history.
	if _, err := onF.Rollback(ctx, "ws", first.Commit, client.WriteOptions{ExpectOID: second.Commit}); err != nil {
		t.Fatal(err)
	}
	old := plumbing.ComputeHash(plumbing.BlobObject, []byte("second version\n")).String()
	for name, c := range map[string]*client.Client{"the replica that served the push": onF, "the other replica": onG} {
		missing, err := c.Missing(ctx, "ws", []string{old, second.Tree})
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) != 0 {
			t.Errorf("%s answers %v missing: the earlier tip's tree and blob, want both present", name, missing)
		}
	}
}
