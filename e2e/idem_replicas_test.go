package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestReplicasDuplicates: two `lockstep serve` replicas on one data
// directory and one Postgres. Copies of one keyed write sent to both at
// once run on both (a one-transaction route claims its key in the
// effect's commit), yet commit once: every answer is the first one's (or
// 409 in_progress), exactly one entry carries the key. The same key with
// another body on the other replica at the same time is refused.
func TestReplicasDuplicates(t *testing.T) {
	a := e2ekit.StartServer(t, e2ekit.ServerOpts{Postgres: true})
	b := e2ekit.StartServer(t, e2ekit.ServerOpts{Data: a.Data, DatabaseURL: a.Opts.DatabaseURL})
	a.CreateRepo(t, "shop")
	head := a.Push(t, a.AdminKey, "shop", e2ekit.ZeroOID, map[string]string{"README": "shop\n"}).Commit
	ci := a.CreateKey(t, "ci", "ci")

	type call struct {
		method, path, key string
		body              any
		ctype             string
		want              int
	}
	// race sends n copies, alternating replicas, all at once.
	race := func(t *testing.T, idem string, calls []call) []*e2ekit.Response {
		t.Helper()
		out := make([]*e2ekit.Response, len(calls))
		errs := make([]error, len(calls))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range calls {
			wg.Add(1)
			go func(i int, c call) {
				defer wg.Done()
				srv := []*e2ekit.Server{a, b}[i%2]
				<-start
				out[i], errs[i] = srv.Try(c.method, c.path, c.key, c.body, c.ctype, "Idempotency-Key", idem)
			}(i, c)
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s request %d: %v", idem, i, err)
			}
		}
		return out
	}
	// once requires identical answers (or in_progress) and one entry of op.
	once := func(t *testing.T, idem, op string, calls []call, out []*e2ekit.Response) *e2ekit.Response {
		t.Helper()
		var first *e2ekit.Response
		for i, r := range out {
			switch {
			case r.Status == calls[i].want:
				if first == nil {
					first = r
				} else if !bytes.Equal(r.Body, first.Body) {
					t.Errorf("%s: answers differ:\n%s\n%s", idem, first, r)
				}
			case r.Status == http.StatusConflict:
				e2ekit.WantError(t, r, http.StatusConflict, "in_progress")
			default:
				t.Errorf("%s request %d (replica %d): %s", idem, i, i%2, r)
			}
		}
		if first == nil {
			t.Fatalf("%s: no request succeeded", idem)
		}
		var n int
		for _, e := range withKey(oplog(t, a), idem) {
			if e.Op == op {
				n++
				if e.Result != "ok" {
					t.Errorf("%s: entry %+v, want only the one ok entry", idem, e)
				}
			}
		}
		if n != 1 {
			t.Fatalf("%s: %d %s entries under the key, want 1", idem, n, op)
		}
		return first
	}

	for round := 0; round < 6; round++ {
		// A push with expect_oid: the loser's compare-and-swap fails in
		// its own (rolled back) transaction.
		idem := fmt.Sprintf("rep-cas-%d", round)
		tarball := e2ekit.TarOf(t, map[string]string{"README": "shop\n", "round": idem + "\n"})
		calls := make([]call, 4)
		for i := range calls {
			calls[i] = call{"PUT", "/api/v1/repos/shop/worktree?expect_oid=" + head, a.AdminKey, tarball, "application/x-tar", http.StatusCreated}
		}
		var p e2ekit.PushResult
		once(t, idem, "push", calls, race(t, idem, calls)).Decode(t, &p)
		if h := b.Head(t, "shop"); h != p.Commit || p.Parent != head {
			t.Fatalf("%s: head %s, answer %+v (parent should be %s)", idem, h, p, head)
		}
		head = p.Commit

		// A forced push (no expect_oid): each copy makes its own commit;
		// only one commits.
		idem = fmt.Sprintf("rep-force-%d", round)
		tarball = e2ekit.TarOf(t, map[string]string{"README": "shop\n", "round": idem + "\n"})
		for i := range calls {
			calls[i] = call{"PUT", "/api/v1/repos/shop/worktree?force=true", a.AdminKey, tarball, "application/x-tar", http.StatusCreated}
		}
		once(t, idem, "push", calls, race(t, idem, calls)).Decode(t, &p)
		if h := a.Head(t, "shop"); h != p.Commit || p.Parent != head {
			t.Fatalf("%s: head %s, answer %+v (parent should be %s)", idem, h, p, head)
		}
		head = p.Commit

		// A check post.
		idem = fmt.Sprintf("rep-check-%d", round)
		for i := range calls {
			calls[i] = call{"POST", "/api/v1/repos/shop/commits/" + head + "/checks", ci.Secret,
				map[string]string{"name": "tests", "status": "success", "summary": idem}, "", http.StatusCreated}
		}
		once(t, idem, "check", calls, race(t, idem, calls))

		// One key, two different pushes, one on each replica: one runs,
		// the other is refused (or told to wait), never a second push.
		idem = fmt.Sprintf("rep-reuse-%d", round)
		two := []call{
			{"PUT", "/api/v1/repos/shop/worktree?force=true", a.AdminKey, e2ekit.TarOf(t, map[string]string{"README": "one\n"}), "application/x-tar", http.StatusCreated},
			{"PUT", "/api/v1/repos/shop/worktree?force=true", a.AdminKey, e2ekit.TarOf(t, map[string]string{"README": "two\n"}), "application/x-tar", http.StatusCreated},
		}
		out := race(t, idem, two)
		ok := 0
		for i, r := range out {
			switch r.Status {
			case http.StatusCreated:
				ok++
				json.Unmarshal(r.Body, &p)
			case http.StatusUnprocessableEntity:
				e2ekit.WantError(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
			case http.StatusConflict:
				e2ekit.WantError(t, r, http.StatusConflict, "in_progress")
			default:
				t.Errorf("%s request %d: %s", idem, i, r)
			}
		}
		if ok != 1 {
			t.Fatalf("%s: %d pushes succeeded, want 1: %s / %s", idem, ok, out[0], out[1])
		}
		var n int
		for _, e := range withKey(oplog(t, a), idem) {
			if e.Op == "push" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%s: %d push entries under the key, want 1", idem, n)
		}
		head = p.Commit
	}
	if v := a.Verify(t); !v.OK {
		t.Fatalf("oplog chain: %+v", v)
	}
}
