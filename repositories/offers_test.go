package repositories_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// effectReads counts the effect-listing queries the service makes; every
// call goes to the real SQLite store underneath.
type effectReads struct {
	lockstep.Store
	n atomic.Int64
}

func (c *effectReads) EffectsReleasedBy(ctx context.Context, baseID int64, commit string) ([]lockstep.Effect, error) {
	c.n.Add(1)
	return c.Store.EffectsReleasedBy(ctx, baseID, commit)
}

func (c *effectReads) CompensableEffects(ctx context.Context, baseID int64, commits []string, limit int) ([]lockstep.Effect, error) {
	c.n.Add(1)
	return c.Store.CompensableEffects(ctx, baseID, commits, limit)
}

type offersWorld struct {
	db    *sqlstore.DB
	reads *effectReads
	repos *repositories.Service
	admin *lockstep.Key
}

func newOffersWorld(t *testing.T) *offersWorld { return newOffersWorldTB(t) }

func newOffersWorldTB(t testing.TB) *offersWorld {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true, SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	admin, _, err := auth.New(db, nil).Create(ctx, auth.System, "admin", lockstep.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	reads := &effectReads{Store: db}
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, reads, nil, telemetry.NewMetrics(), nil)
	t.Cleanup(func() { repos.Close() })
	return &offersWorld{db: db, reads: reads, repos: repos, admin: admin}
}

// push commits one more version of a.txt on name's main and returns it.
func (w *offersWorld) push(t testing.TB, name, expect string, i int) string {
	t.Helper()
	res, err := w.repos.PushTar(context.Background(), w.admin, name, servicetest.Tar(t, map[string]string{"a.txt": fmt.Sprintf("v%d\n", i)}),
		repositories.WriteOptions{Branch: "main", ExpectOID: expect})
	if err != nil {
		t.Fatal(err)
	}
	return res.Commit
}

// release stages effects on a new workspace of base (withComp[i]: the
// i-th has a compensation) and promotes it with commit as the release
// commit; it returns the effects, oldest first.
func (w *offersWorld) release(t testing.TB, base *lockstep.Repo, ws, commit string, withComp ...bool) []*lockstep.Effect {
	t.Helper()
	ctx := context.Background()
	r := &lockstep.Repo{Name: ws, Network: base.Network, ForkOf: base.Name, DefaultBranch: "main", Status: lockstep.StatusActive}
	if err := w.db.CreateRepo(ctx, r, nil, nil); err != nil {
		t.Fatal(err)
	}
	var out []*lockstep.Effect
	for i, c := range withComp {
		e := &lockstep.Effect{ID: fmt.Sprintf("eff_%s_%d", ws, i), RepoID: r.ID, Repo: ws, KeyName: "agent", Label: fmt.Sprintf("%s #%d", ws, i), Consuming: i%2 == 0,
			Request: lockstep.EffectHTTP{Method: "POST", URL: fmt.Sprintf("https://example.com/%s/%d", ws, i), Body: []byte("{}")}}
		if c {
			e.Compensation = &lockstep.EffectHTTP{Method: "DELETE", URL: fmt.Sprintf("https://example.com/%s/%d", ws, i)}
		}
		if err := w.db.StageEffect(ctx, e, 0, &lockstep.OpEntry{KeyName: "agent", Op: "effect.stage", Repo: ws}); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	err := w.db.UpdateRefsAndStatus(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: base.Name, Name: "refs/heads/promoted-" + ws, Old: lockstep.ZeroOID, New: commit}},
		nil, nil, &lockstep.OpEntry{KeyName: "agent", Op: "merge", Repo: base.Name},
		lockstep.StatusChange{RepoID: r.ID, Repo: ws, From: lockstep.StatusActive, To: lockstep.StatusPromoted,
			Entry: &lockstep.OpEntry{KeyName: "agent", Op: "workspace.promoted", Repo: ws}, Effects: &lockstep.EffectRelease{Into: base.Name, IntoID: base.ID}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deliverAll delivers every due outbox row (status released).
func (w *offersWorld) deliverAll(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	for {
		now := time.Now()
		ds, err := w.db.ClaimEffectDeliveries(ctx, now, time.Minute, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return
		}
		for _, d := range ds {
			if err := w.db.RecordEffectAttempt(ctx, d, lockstep.EffectAttempt{Kind: d.Kind, Attempt: d.Attempts + 1, StatusCode: 200, At: now}, "succeeded", now); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// walkOffers is the per-commit walk compensationOffers used to make (one
// EffectsReleasedBy per first-parent commit from tip down to stop): the
// reference its answer must equal.
func walkOffers(t *testing.T, w *offersWorld, base *lockstep.Repo, tip, stop string) []lockstep.CompensationOffer {
	t.Helper()
	ctx := context.Background()
	var out []lockstep.CompensationOffer
	for h := tip; h != stop; {
		list, err := w.db.EffectsReleasedBy(ctx, base.ID, h)
		if err != nil {
			t.Fatal(err)
		}
		for j := len(list) - 1; j >= 0; j-- {
			e := list[j]
			if e.Compensation == nil || e.Status != lockstep.EffectReleased || e.CompensationStatus != "" {
				continue
			}
			out = append(out, lockstep.CompensationOffer{Effect: e.ID, Workspace: e.Repo, Commit: h, Request: e.Request.Method + " " + lockstep.RedactURL(e.Request.URL),
				Compensation: e.Compensation.Method + " " + lockstep.RedactURL(e.Compensation.URL), Label: e.Label, Consuming: e.Consuming})
		}
		ci, err := w.repos.Commit(ctx, base.Name, h)
		if err != nil {
			t.Fatal(err)
		}
		h = ci.Parents[0].String()
	}
	return out
}

func offerIDs(offers []lockstep.CompensationOffer) []string {
	var ids []string
	for _, o := range offers {
		ids = append(ids, o.Effect)
	}
	return ids
}

// TestRollbackCompensationOffersQueries: a rollback's compensation offers
// are the released, delivered, never-compensated effects with a
// compensation of the undone commits, newest first — the same list as the
// per-commit walk — read with at most two effect queries however long the
// undone chain (it used to be one query per commit), and one when the
// base has no compensable effect.
func TestRollbackCompensationOffersQueries(t *testing.T) {
	ctx := context.Background()
	w := newOffersWorld(t)
	if _, err := w.repos.CreateRepo(ctx, w.admin, "base", "main"); err != nil {
		t.Fatal(err)
	}
	c0 := w.push(t, "base", lockstep.ZeroOID, 0)
	base, err := w.repos.Repo(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	// Released by the rollback's target: not undone, not offered.
	w.release(t, base, "ws0", c0, true)
	c1 := w.push(t, "base", c0, 1)
	e1 := w.release(t, base, "ws1", c1, true, false, true)
	c2 := w.push(t, "base", c1, 2)
	c3 := w.push(t, "base", c2, 3)
	e3 := w.release(t, base, "ws3", c3, true, true)
	w.deliverAll(t)
	// A compensation already queued is not offered again.
	if _, err := w.db.QueueCompensations(ctx, []string{e3[1].ID}, &lockstep.OpEntry{KeyName: "admin", Op: "effect.compensate", Repo: "base"}); err != nil {
		t.Fatal(err)
	}
	c4 := w.push(t, "base", c3, 4)
	w.release(t, base, "ws4", c4, true) // not delivered yet (releasing): not offered
	tip := c4
	for i := 5; i < 45; i++ {
		tip = w.push(t, "base", tip, i)
	}

	want := walkOffers(t, w, base, tip, c0)
	if got, wantIDs := offerIDs(want), []string{e3[0].ID, e1[2].ID, e1[0].ID}; !reflect.DeepEqual(got, wantIDs) {
		t.Fatalf("reference walk offers %v, want %v", got, wantIDs)
	}
	w.reads.n.Store(0)
	rb, err := w.repos.Rollback(ctx, w.admin, "base", c0, repositories.WriteOptions{Branch: "main", ExpectOID: tip})
	if err != nil {
		t.Fatal(err)
	}
	if n := w.reads.n.Load(); n > 2 {
		t.Errorf("a rollback undoing %d commits made %d effect queries, want at most 2", 44, n)
	}
	if !reflect.DeepEqual(rb.Compensations, want) {
		t.Fatalf("rollback offers\n%+v\nwant (the per-commit walk)\n%+v", rb.Compensations, want)
	}
	if want[0].Commit != c3 || want[1].Commit != c1 || want[1].Request != "POST https://example.com/ws1/2" || want[1].Compensation != "DELETE https://example.com/ws1/2" ||
		want[1].Workspace != "ws1" || want[1].Label != "ws1 #2" || !want[1].Consuming {
		t.Fatalf("offers %+v", want)
	}

	// Rolling the rollback back to c3 undoes it and c4..c44 (nothing
	// compensable there): no offer, still at most two queries.
	w.reads.n.Store(0)
	rb2, err := w.repos.Rollback(ctx, w.admin, "base", c3, repositories.WriteOptions{Branch: "main", ExpectOID: rb.Commit})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb2.Compensations) != 0 {
		t.Fatalf("offers %+v, want none", rb2.Compensations)
	}
	if n := w.reads.n.Load(); n > 2 {
		t.Errorf("%d effect queries, want at most 2", n)
	}

	// A repository without any compensable effect: one query, no walk.
	if _, err := w.repos.CreateRepo(ctx, w.admin, "quiet", "main"); err != nil {
		t.Fatal(err)
	}
	q0 := w.push(t, "quiet", lockstep.ZeroOID, 0)
	qtip := q0
	for i := 1; i < 30; i++ {
		qtip = w.push(t, "quiet", qtip, i)
	}
	w.reads.n.Store(0)
	rb3, err := w.repos.Rollback(ctx, w.admin, "quiet", q0, repositories.WriteOptions{Branch: "main", ExpectOID: qtip})
	if err != nil {
		t.Fatal(err)
	}
	if len(rb3.Compensations) != 0 {
		t.Fatalf("offers %+v, want none", rb3.Compensations)
	}
	if n := w.reads.n.Load(); n != 1 {
		t.Errorf("a rollback of a repository without compensable effects made %d effect queries, want 1", n)
	}
}

// TestRollbackOffersRedactURLs: a rollback offers the compensation of an
// effect whose URLs carry a token in their query: the offer (the
// rollback's answer, stored for an Idempotency-Key too) shows the URLs
// with the query values redacted.
func TestRollbackOffersRedactURLs(t *testing.T) {
	ctx := context.Background()
	w := newOffersWorld(t)
	if _, err := w.repos.CreateRepo(ctx, w.admin, "base", "main"); err != nil {
		t.Fatal(err)
	}
	c0 := w.push(t, "base", lockstep.ZeroOID, 0)
	base, err := w.repos.Repo(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	c1 := w.push(t, "base", c0, 1)
	ws := &lockstep.Repo{Name: "ws", Network: base.Network, ForkOf: base.Name, DefaultBranch: "main", Status: lockstep.StatusActive}
	if err := w.db.CreateRepo(ctx, ws, nil, nil); err != nil {
		t.Fatal(err)
	}
	e := &lockstep.Effect{ID: "eff_tok", RepoID: ws.ID, Repo: ws.Name, KeyName: "agent",
		Request:      lockstep.EffectHTTP{Method: "POST", URL: "https://example.com/orders?token=s3cr3t-order"},
		Compensation: &lockstep.EffectHTTP{Method: "DELETE", URL: "https://example.com/orders/1?key=s3cr3t-undo"}}
	if err := w.db.StageEffect(ctx, e, 0, &lockstep.OpEntry{KeyName: "agent", Op: "effect.stage", Repo: ws.Name}); err != nil {
		t.Fatal(err)
	}
	if err := w.db.UpdateRefsAndStatus(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: base.Name, Name: "refs/heads/promoted-ws", Old: lockstep.ZeroOID, New: c1}},
		nil, nil, &lockstep.OpEntry{KeyName: "agent", Op: "merge", Repo: base.Name},
		lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted,
			Entry: &lockstep.OpEntry{KeyName: "agent", Op: "workspace.promoted", Repo: ws.Name}, Effects: &lockstep.EffectRelease{Into: base.Name, IntoID: base.ID}}); err != nil {
		t.Fatal(err)
	}
	w.deliverAll(t)
	rb, err := w.repos.Rollback(ctx, w.admin, "base", c0, repositories.WriteOptions{Branch: "main", ExpectOID: c1})
	if err != nil {
		t.Fatal(err)
	}
	want := []lockstep.CompensationOffer{{Effect: e.ID, Workspace: "ws", Commit: c1, Request: "POST https://example.com/orders?token=[redacted]",
		Compensation: "DELETE https://example.com/orders/1?key=[redacted]"}}
	if !reflect.DeepEqual(rb.Compensations, want) {
		t.Fatalf("offers %+v, want %+v", rb.Compensations, want)
	}
}
