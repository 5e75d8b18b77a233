package effects_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
)

type fixture struct {
	svc   *effects.Service
	store lockstep.Store
	ws    *lockstep.Repo
	owner *lockstep.Key
}

// mustFixture is a real SQLite store with a base and a workspace owned
// by an agent key, and the effects service on it.
func mustFixture(tb testing.TB, cfg effects.Config) *fixture {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true, SecretKey: make([]byte, 32)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	tb.Cleanup(func() { repos.Close() })
	owner := &lockstep.Key{ID: "key_agent", Name: "agent", Role: lockstep.RoleAgent}
	base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main", Status: lockstep.StatusActive}
	if err := db.CreateRepo(ctx, base, nil, nil); err != nil {
		tb.Fatal(err)
	}
	ws := &lockstep.Repo{Name: "ws", Network: "base", ForkOf: "base", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: owner.ID, OwnerName: owner.Name}
	if err := db.CreateRepo(ctx, ws, nil, nil); err != nil {
		tb.Fatal(err)
	}
	return &fixture{svc: effects.New(cfg, db, repos, nil, m, nil), store: db, ws: ws, owner: owner}
}

// TestStageRules: every rule of a staged request, each refused with its
// code and nothing stored; secret headers are sealed and redacted.
func TestStageRules(t *testing.T) {
	f := mustFixture(t, effects.Config{MaxBodyBytes: 16, MaxStaged: 2})
	ctx := context.Background()
	other := &lockstep.Key{ID: "key_other", Name: "other", Role: lockstep.RoleAgent}
	if _, err := f.svc.Stage(ctx, other, f.ws, api.EffectRequest{Method: "POST", URL: "https://example.com/"}); lockstep.ErrorCode(err) != lockstep.EFORBIDDEN {
		t.Errorf("another agent staged: %v", err)
	}
	for _, tc := range []struct {
		name string
		req  api.EffectRequest
		code string
	}{
		{"read", api.EffectRequest{Method: "GET", URL: "https://example.com/"}, lockstep.EINVALID},
		{"scheme", api.EffectRequest{Method: "POST", URL: "ftp://example.com/"}, lockstep.EINVALID},
		{"loopback", api.EffectRequest{Method: "POST", URL: "http://127.0.0.1:8080/"}, lockstep.EINVALID},
		{"metadata", api.EffectRequest{Method: "POST", URL: "http://169.254.169.254/latest/meta-data"}, lockstep.EINVALID},
		{"userinfo", api.EffectRequest{Method: "POST", URL: "https://u:p@example.com/"}, lockstep.EINVALID},
		{"host header", api.EffectRequest{Method: "POST", URL: "https://example.com/", Headers: map[string]string{"Host": "x"}}, lockstep.EINVALID},
		{"webhook header", api.EffectRequest{Method: "POST", URL: "https://example.com/", Headers: map[string]string{"webhook-id": "x"}}, lockstep.EINVALID},
		{"header CRLF", api.EffectRequest{Method: "POST", URL: "https://example.com/", Headers: map[string]string{"X-A": "a\r\nB: c"}}, lockstep.EINVALID},
		{"header name", api.EffectRequest{Method: "POST", URL: "https://example.com/", Headers: map[string]string{"X A": "a"}}, lockstep.EINVALID},
		{"two bodies", api.EffectRequest{Method: "POST", URL: "https://example.com/", Body: "a", BodyBase64: "YQ=="}, lockstep.EINVALID},
		{"bad base64", api.EffectRequest{Method: "POST", URL: "https://example.com/", BodyBase64: "!!"}, lockstep.EINVALID},
		{"big body", api.EffectRequest{Method: "POST", URL: "https://example.com/", Body: strings.Repeat("x", 17)}, lockstep.ETOOLARGE},
		{"class", api.EffectRequest{Method: "POST", URL: "https://example.com/", Class: "Pay Ment"}, lockstep.EINVALID},
		{"label", api.EffectRequest{Method: "POST", URL: "https://example.com/", Label: "a\nb"}, lockstep.EINVALID},
		{"compensation", api.EffectRequest{Method: "POST", URL: "https://example.com/", Compensation: &api.EffectCompensation{Method: "GET", URL: "https://example.com/"}}, lockstep.EINVALID},
	} {
		if _, err := f.svc.Stage(ctx, f.owner, f.ws, tc.req); lockstep.ErrorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
	}
	if list, _ := f.store.Effects(ctx, f.ws.ID, 0, 100); len(list) != 0 {
		t.Fatalf("refused requests stored %d effects", len(list))
	}
	e, err := f.svc.Stage(ctx, f.owner, f.ws, api.EffectRequest{Method: "post", URL: "https://example.com/hook?token=t",
		Headers: map[string]string{"authorization": "Bearer a", "X-Signature-Key": "k", "Content-Type": "text/plain"}, SecretHeaders: []string{"x-signature-key"}, Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	v := effects.View(e)
	if v.Method != "POST" || v.Headers["Authorization"] != effects.Redacted || v.Headers["X-Signature-Key"] != effects.Redacted || v.Headers["Content-Type"] != "text/plain" || v.BodyPreview != "hello" {
		t.Fatalf("view %+v", v)
	}
	ops, _ := f.store.ListOps(ctx, lockstep.OpFilter{Op: "effect.stage"})
	if len(ops) != 1 || strings.Contains(fmt.Sprint(ops[0].Details), "token=t") || ops[0].Seq != e.Seq {
		t.Fatalf("log entry %+v", ops)
	}
	// The cap.
	if _, err := f.svc.Stage(ctx, f.owner, f.ws, api.EffectRequest{Method: "PUT", URL: "https://example.com/"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Stage(ctx, f.owner, f.ws, api.EffectRequest{Method: "PUT", URL: "https://example.com/"}); lockstep.ErrorCode(err) != lockstep.ETOOLARGE {
		t.Fatalf("over the cap: %v", err)
	}
	// An allowed internal host.
	allow, _ := delivery.ParseAllowList("127.0.0.1")
	f2 := mustFixture(t, effects.Config{AllowHosts: allow})
	if _, err := f2.svc.Stage(ctx, f2.owner, f2.ws, api.EffectRequest{Method: "POST", URL: "http://127.0.0.1:9/x"}); err != nil {
		t.Fatalf("an allowed host: %v", err)
	}
}

func TestPreview(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{nil, ""},
		{[]byte("short"), "short"},
		{[]byte{0xff, 0xfe, 0}, "(3 bytes, binary)"},
		{[]byte(strings.Repeat("a", effects.PreviewBytes+10)), strings.Repeat("a", effects.PreviewBytes) + "…"},
		// A rune cut by the limit is not split.
		{[]byte(strings.Repeat("a", effects.PreviewBytes-1) + "é"), strings.Repeat("a", effects.PreviewBytes-1) + "…"},
	} {
		if got := effects.Preview(tc.in); got != tc.want {
			t.Errorf("Preview(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// BenchmarkStage is the staging overhead per effect: validation, sealing
// the Authorization header, the row and its operations-log entry in one
// SQLite transaction.
func BenchmarkStage(b *testing.B) {
	f := mustFixture(b, effects.Config{MaxStaged: 1 << 30})
	ctx := context.Background()
	req := api.EffectRequest{Method: "POST", URL: "https://203.0.114.7/hook", Headers: map[string]string{"Authorization": "Bearer t", "Content-Type": "application/json"},
		Body: `{"order":42,"items":[1,2,3]}`, Class: "webhook"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.svc.Stage(ctx, f.owner, f.ws, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSecretHeadersSealed: a secret header's value is not in the store's
// file in clear, and comes back opened for delivery.
func TestSecretHeadersSealed(t *testing.T) {
	f := mustFixture(t, effects.Config{})
	ctx := context.Background()
	e, err := f.svc.Stage(ctx, f.owner, f.ws, api.EffectRequest{Method: "POST", URL: "https://example.com/",
		Headers: map[string]string{"Cookie": "session=sup3rs3cret", "X-Trace": "visible"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.store.Effect(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Request.Headers["Cookie"] != "session=sup3rs3cret" {
		t.Fatalf("opened %q", got.Request.Headers["Cookie"])
	}
	var raw string
	db := f.store.(interface{ SQL() *sql.DB })
	if err := db.SQL().QueryRowContext(ctx, `SELECT request FROM effects WHERE id = $1`, e.ID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw, "sup3rs3cret") || !strings.Contains(raw, "lsenc1:") || !strings.Contains(raw, "visible") {
		t.Fatalf("stored request %s", raw)
	}
}

// BenchmarkReleaseLatency is the time from a promote's commit (the
// outbox rows written with the base ref move) to the receiver getting the
// effect, with the worker running and woken as the server wakes it;
// reported as p50 and p99 (ms).
func BenchmarkReleaseLatency(b *testing.B) {
	allow, _ := delivery.ParseAllowList("127.0.0.1")
	f := mustFixture(b, effects.Config{AllowHosts: allow, PollInterval: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{}, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		got <- struct{}{}
	}))
	defer rcv.Close()
	done := make(chan struct{})
	go func() { f.svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	base, err := f.store.RepoByName(ctx, "base")
	if err != nil {
		b.Fatal(err)
	}
	oid := func(i int) string { return fmt.Sprintf("%040x", i+1) }
	if err := f.store.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: "base", Name: "refs/heads/main", Old: lockstep.ZeroOID, New: oid(0)}}, nil, nil, nil); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ws := &lockstep.Repo{Name: fmt.Sprintf("ws-%d", i), Network: "base", ForkOf: "base", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: f.owner.ID}
		if err := f.store.CreateRepo(ctx, ws, nil, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := f.svc.Stage(ctx, f.owner, ws, api.EffectRequest{Method: "POST", URL: rcv.URL + "/e", Body: "x"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := f.store.UpdateRefsAndStatus(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: "base", Name: "refs/heads/main", Old: oid(i), New: oid(i + 1)}}, nil, nil, nil,
			lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted,
				Effects: &lockstep.EffectRelease{Into: "base", IntoID: base.ID}}); err != nil {
			b.Fatal(err)
		}
		f.svc.Wake()
		<-got
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
