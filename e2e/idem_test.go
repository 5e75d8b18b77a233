package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// entry is an operations-log entry with the idempotency fields.
type entry struct {
	Seq            int64            `json:"seq"`
	ID             string           `json:"id"`
	Op             string           `json:"op"`
	Result         string           `json:"result"`
	Repo           string           `json:"repo"`
	Refs           []e2ekit.RefMove `json:"refs"`
	Details        map[string]any   `json:"details"`
	IdempotencyKey string           `json:"idempotency_key"`
	Replays        int              `json:"replays"`
}

// oplog returns every entry, oldest first.
func oplog(t testing.TB, s *e2ekit.Server) []entry {
	t.Helper()
	var all []entry
	after := int64(0)
	for {
		var page struct {
			Entries []entry `json:"entries"`
		}
		s.MustJSON(t, "GET", fmt.Sprintf("/api/v1/oplog?limit=1000&after=%d", after), s.AdminKey, nil, http.StatusOK, &page)
		all = append(all, page.Entries...)
		if len(page.Entries) < 1000 {
			return all
		}
		after = page.Entries[len(page.Entries)-1].Seq
	}
}

// withKey lists the entries committed under an Idempotency-Key.
func withKey(es []entry, key string) []entry {
	var out []entry
	for _, e := range es {
		if e.IdempotencyKey == key {
			out = append(out, e)
		}
	}
	return out
}

func send(t testing.TB, s *e2ekit.Server, method, path, key, idem string, body any, ctype string) *e2ekit.Response {
	t.Helper()
	r, err := s.Try(method, path, key, body, ctype, "Idempotency-Key", idem)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// twice sends one request twice with one Idempotency-Key and requires
// status want and two identical answers, the second marked replayed.
func twice(t *testing.T, s *e2ekit.Server, method, path, key, idem string, body any, ctype string, want int) *e2ekit.Response {
	t.Helper()
	a := send(t, s, method, path, key, idem, body, ctype)
	if a.Status != want {
		t.Fatalf("%s %s: got %s, want %d", method, path, a, want)
	}
	b := send(t, s, method, path, key, idem, body, ctype)
	if b.Status != a.Status || !bytes.Equal(a.Body, b.Body) {
		t.Errorf("%s %s with one Idempotency-Key: answers differ:\nfirst  %s\nsecond %s", method, path, a, b)
	}
	if a.Header.Get("Idempotent-Replayed") != "" || b.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("%s %s: Idempotent-Replayed first %q, second %q; want \"\" and \"true\"", method, path,
			a.Header.Get("Idempotent-Replayed"), b.Header.Get("Idempotent-Replayed"))
	}
	return a
}

// oneEffect requires exactly one successful entry of op under the key,
// with its replay counted.
func oneEffect(t *testing.T, es []entry, idem, op string) entry {
	t.Helper()
	var got []entry
	for _, e := range withKey(es, idem) {
		if e.Op == op && e.Result == "ok" {
			got = append(got, e)
		}
	}
	if len(got) != 1 {
		t.Fatalf("Idempotency-Key %s: %d %q entries in the operations log, want exactly 1: %+v", idem, len(got), op, withKey(es, idem))
	}
	if got[0].Replays != 1 {
		t.Errorf("Idempotency-Key %s: entry %s counts %d replays, want 1", idem, got[0].ID, got[0].Replays)
	}
	return got[0]
}

// packOf builds a git pack of files' tree (trees and blobs) with the git
// CLI, as `lockstep push` uploads it, and returns it with the tree oid.
func packOf(t *testing.T, files map[string]string) ([]byte, string) {
	t.Helper()
	dir := t.TempDir()
	e2ekit.Git(t, dir, "init", "-q")
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e2ekit.Git(t, dir, "add", "-A")
	tree := strings.TrimSpace(e2ekit.Git(t, dir, "write-tree"))
	var oids []string
	oids = append(oids, tree)
	for _, line := range strings.Split(strings.TrimSpace(e2ekit.Git(t, dir, "ls-tree", "-r", "-t", tree)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 {
			oids = append(oids, f[2])
		}
	}
	pack, err := e2ekit.GitRunBytes(dir, strings.Join(oids, "\n")+"\n", "pack-objects", "--stdout", "-q")
	if err != nil {
		t.Fatalf("git pack-objects: %v", err)
	}
	return pack, tree
}

type world struct {
	s          *e2ekit.Server
	agent, ci  e2ekit.Key
	base, tip0 string
}

func newWorld(t *testing.T, opts e2ekit.ServerOpts) *world {
	t.Helper()
	s := e2ekit.StartServer(t, opts)
	w := &world{s: s, agent: s.CreateKey(t, "agent", "agent"), ci: s.CreateKey(t, "ci", "ci"), base: "shop"}
	s.CreateRepo(t, "shop")
	w.tip0 = s.Push(t, s.AdminKey, "shop", e2ekit.ZeroOID, map[string]string{"README": "shop\n"}).Commit
	return w
}

// TestEveryWriteTwiceOneEffect: push (tar and incremental), fork,
// rollback, checkpoint, merge (materialize), promote and a check post,
// each sent twice with one key: one effect, two identical answers.
func TestEveryWriteTwiceOneEffect(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			w := newWorld(t, e2ekit.ServerOpts{Postgres: backend == "postgres"})
			s, agent := w.s, w.agent.Secret

			// fork
			var fork struct {
				Name       string `json:"name"`
				BaseCommit string `json:"base_commit"`
			}
			r := twice(t, s, "POST", "/api/v1/repos/shop/forks", agent, "k-fork", map[string]string{"name": "ws"}, "", 201)
			r.Decode(t, &fork)

			// push (tar)
			var p1 e2ekit.PushResult
			r = twice(t, s, "PUT", "/api/v1/repos/ws/worktree"+e2ekit.PushQuery("", fork.BaseCommit), agent, "k-push",
				e2ekit.TarOf(t, map[string]string{"README": "shop\n", "a.txt": "one\n"}), "application/x-tar", 201)
			r.Decode(t, &p1)

			// incremental push: objects, then the tree
			pack, tree := packOf(t, map[string]string{"README": "shop\n", "a.txt": "one\n", "b.txt": "two\n"})
			twice(t, s, "POST", "/api/v1/repos/ws/objects", agent, "k-objects", pack, "application/x-git-packfile", 200)
			var p2 e2ekit.PushResult
			r = twice(t, s, "PUT", "/api/v1/repos/ws/worktree"+e2ekit.PushQuery("", p1.Commit, "tree", tree), agent, "k-tree", nil, "", 201)
			r.Decode(t, &p2)

			// rollback to the first push's tree
			var rb e2ekit.PushResult
			r = twice(t, s, "POST", "/api/v1/repos/ws/rollback", agent, "k-rollback",
				map[string]string{"to": p1.Commit, "expect_oid": p2.Commit}, "", 201)
			r.Decode(t, &rb)
			if rb.Tree != p1.Tree {
				t.Fatalf("rollback tree %s, want %s", rb.Tree, p1.Tree)
			}

			// checkpoint
			var cp struct {
				ID string `json:"id"`
			}
			r = twice(t, s, "POST", "/api/v1/repos/ws/checkpoints", agent, "k-checkpoint", map[string]string{"label": "before"}, "", 201)
			r.Decode(t, &cp)
			var cps struct {
				Checkpoints []struct {
					ID string `json:"id"`
				} `json:"checkpoints"`
			}
			s.MustJSON(t, "GET", "/api/v1/repos/ws/checkpoints", agent, nil, 200, &cps)
			if len(cps.Checkpoints) != 1 || cps.Checkpoints[0].ID != cp.ID {
				t.Errorf("checkpoints after two keyed posts: %+v, want only %s", cps.Checkpoints, cp.ID)
			}

			// stage an effect (its secret header redacted in the stored answer)
			var eff struct {
				ID      string            `json:"id"`
				Headers map[string]string `json:"headers"`
			}
			r = twice(t, s, "POST", "/api/v1/repos/ws/effects", agent, "k-effect",
				map[string]any{"method": "POST", "url": "https://example.com/hook", "body": "x", "headers": map[string]string{"Authorization": "Bearer secret-in-idem"}}, "", 201)
			r.Decode(t, &eff)
			var effs struct {
				Effects []struct {
					ID string `json:"id"`
				} `json:"effects"`
			}
			s.MustJSON(t, "GET", "/api/v1/repos/ws/effects", agent, nil, 200, &effs)
			if len(effs.Effects) != 1 || effs.Effects[0].ID != eff.ID || eff.Headers["Authorization"] != "[redacted]" {
				t.Errorf("effects after two keyed posts: %+v (answer %+v), want only %s, redacted", effs.Effects, eff, eff.ID)
			}

			// check post (ci) on the workspace tip
			var ck struct {
				ID int64 `json:"id"`
			}
			r = twice(t, s, "POST", "/api/v1/repos/ws/commits/"+rb.Commit+"/checks", w.ci.Secret, "k-check",
				map[string]string{"name": "tests", "status": "success"}, "", 201)
			r.Decode(t, &ck)
			var checks struct {
				History []any `json:"history"`
			}
			s.MustJSON(t, "GET", "/api/v1/repos/ws/commits/"+rb.Commit+"/checks", agent, nil, 200, &checks)
			if len(checks.History) != 1 {
				t.Errorf("%d check results after two keyed posts, want 1", len(checks.History))
			}

			// merge (materialize) another workspace into main, by the admin
			var ws2 struct {
				BaseCommit string `json:"base_commit"`
			}
			s.MustJSON(t, "POST", "/api/v1/repos/shop/forks", agent, map[string]string{"name": "ws2"}, 201, &ws2)
			s.Push(t, agent, "ws2", ws2.BaseCommit, map[string]string{"README": "shop\n", "c.txt": "three\n"})
			var mg struct {
				Commit string `json:"commit"`
			}
			r = twice(t, s, "POST", "/api/v1/repos/shop/merges", s.AdminKey, "k-merge",
				map[string]any{"theirs": "ws2:main", "materialize": true, "deep": true}, "", 200)
			r.Decode(t, &mg)
			if got := s.Head(t, "shop"); got != mg.Commit {
				t.Fatalf("shop main at %s after the merge, want %s", got, mg.Commit)
			}

			// promote ws into main
			var pr struct {
				Commit string `json:"commit"`
			}
			r = twice(t, s, "POST", "/api/v1/repos/ws/promote", agent, "k-promote", map[string]any{}, "", 200)
			r.Decode(t, &pr)
			if got := s.Head(t, "shop"); got != pr.Commit {
				t.Fatalf("shop main at %s after the promote, want %s", got, pr.Commit)
			}

			es := oplog(t, s)
			oneEffect(t, es, "k-fork", "fork")
			oneEffect(t, es, "k-push", "push")
			oneEffect(t, es, "k-objects", "objects.upload")
			oneEffect(t, es, "k-tree", "push")
			oneEffect(t, es, "k-rollback", "rollback")
			oneEffect(t, es, "k-checkpoint", "checkpoint")
			oneEffect(t, es, "k-effect", "effect.stage")
			oneEffect(t, es, "k-check", "check")
			oneEffect(t, es, "k-merge", "merge")
			oneEffect(t, es, "k-promote", "promote")
			oneEffect(t, es, "k-promote", "workspace.promoted")
			if n := len(s.Commits(t, "ws", "", 100)); n != 4 {
				t.Errorf("ws has %d commits, want 4 (base, push, tree push, rollback)", n)
			}
			if v := s.Verify(t); !v.OK {
				t.Fatalf("oplog chain broken after replays: %+v", v)
			}

			// The same key with another request is refused, and runs nothing.
			before := len(oplog(t, s))
			bad := send(t, s, "POST", "/api/v1/repos/ws/rollback", agent, "k-rollback",
				map[string]string{"to": p2.Commit, "expect_oid": rb.Commit}, "")
			e := e2ekit.WantError(t, bad, 422, "idempotency_key_reused")
			if e.Error.Details["path"] != "/api/v1/repos/ws/rollback" {
				t.Errorf("422 details do not name the first use: %+v", e.Error.Details)
			}
			bad = send(t, s, "POST", "/api/v1/repos/shop/forks", agent, "k-fork", map[string]string{"name": "ws9"}, "")
			e2ekit.WantError(t, bad, 422, "idempotency_key_reused")
			if after := len(oplog(t, s)); after != before {
				t.Errorf("refused reuse wrote %d log entries", after-before)
			}
			// Another caller's key space is its own.
			other := s.CreateKey(t, "agent-2", "agent")
			r = send(t, s, "POST", "/api/v1/repos/shop/forks", other.Secret, "k-fork", map[string]string{"name": "ws3"}, "")
			if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" {
				t.Errorf("another key's k-fork: %s (replayed %q), want a fresh 201", r, r.Header.Get("Idempotent-Replayed"))
			}
		})
	}
}

// TestBadKeysAndValidationErrors: malformed keys are 400; a request the
// server refuses before doing anything leaves the key free.
func TestBadKeysAndValidationErrors(t *testing.T) {
	t.Parallel()
	w := newWorld(t, e2ekit.ServerOpts{})
	s := w.s
	for _, k := range []string{"has space", strings.Repeat("x", 256), "tab\there", "ünï"} {
		r := send(t, s, "POST", "/api/v1/repos/shop/forks", w.agent.Secret, k, map[string]string{"name": "wsx"}, "")
		e2ekit.WantError(t, r, 400, "invalid_argument")
	}
	r, err := s.Try("POST", "/api/v1/repos/shop/forks", w.agent.Secret, map[string]string{"name": "BAD NAME"}, "", "Idempotency-Key", "k1")
	if err != nil {
		t.Fatal(err)
	}
	e2ekit.WantError(t, r, 400, "invalid_argument")
	// Corrected body, same key: runs (the 400 was not remembered).
	r = send(t, s, "POST", "/api/v1/repos/shop/forks", w.agent.Secret, "k1", map[string]string{"name": "good"}, "")
	if r.Status != 201 {
		t.Fatalf("corrected request with the key of a refused one: %s", r)
	}
}

// TestConcurrentDuplicates: eight copies of one push at once execute once.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			w := newWorld(t, e2ekit.ServerOpts{Postgres: backend == "postgres"})
			s := w.s
			tarball := e2ekit.TarOf(t, map[string]string{"README": "shop\n", "x": strings.Repeat("x", 1<<20)})
			const n = 8
			var wg sync.WaitGroup
			out := make([]*e2ekit.Response, n)
			errs := make([]error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					out[i], errs[i] = s.Try("PUT", "/api/v1/repos/shop/worktree?expect_oid="+w.tip0, s.AdminKey, tarball, "application/x-tar", "Idempotency-Key", "dup-1")
				}(i)
			}
			wg.Wait()
			replayed := 0
			for i := 0; i < n; i++ {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				switch {
				case out[i].Status == 201:
					if !bytes.Equal(out[i].Body, out[0].Body) {
						t.Errorf("answer %d differs: %s vs %s", i, out[i], out[0])
					}
					if out[i].Header.Get("Idempotent-Replayed") == "true" {
						replayed++
					}
				case out[i].Status == 409:
					e2ekit.WantError(t, out[i], 409, "in_progress")
				default:
					t.Errorf("request %d: %s", i, out[i])
				}
			}
			if replayed == 0 {
				t.Errorf("no answer was a replay")
			}
			var pushes []entry
			for _, e := range oplog(t, s) {
				if e.Op == "push" && e.Repo == "shop" && e.IdempotencyKey == "dup-1" {
					pushes = append(pushes, e)
				}
			}
			if len(pushes) != 1 || pushes[0].Result != "ok" {
				t.Fatalf("%d push entries under dup-1, want exactly one ok: %+v", len(pushes), pushes)
			}
			var res e2ekit.PushResult
			json.Unmarshal(out[0].Body, &res)
			if h := s.Head(t, "shop"); h != res.Commit {
				t.Errorf("head %s, answer %s", h, res.Commit)
			}
		})
	}
}

var _ = url.Values{}
