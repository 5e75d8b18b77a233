package gate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// TestHookURLQuerySealedAndRedacted: a token in a hook URL's query is
// sealed in the hooks row, redacted in the hook the registration answers,
// in listings, in a rotation's answer and in the operations log (names
// kept), and delivered whole: the receiver gets ?token=h00ks3cr3t. A
// refused hook URL's error does not repeat it.
func TestHookURLQuerySealedAndRedacted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	db, err := sqlstore.Open(ctx, filepath.Join(dir, "m.db"), sqlstore.Options{Migrate: true, SecretKey: bytes.Repeat([]byte{5}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	defer repos.Close()
	var logs testenv.SyncBuffer
	allow, _ := delivery.ParseAllowList("127.0.0.1")
	svc := gate.New(gate.Config{HookAllowHosts: allow}, db, repos, slog.New(slog.NewTextHandler(&logs, nil)), m, nil)
	admin := &lockstep.Key{ID: "key_admin", Name: "admin", Role: lockstep.RoleAdmin}
	base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main", Status: lockstep.StatusActive}
	if err := db.CreateRepo(ctx, base, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		got <- r.URL.RequestURI()
	}))
	defer rcv.Close()
	const secret = "h00ks3cr3t"
	leaks := func(what, s string) {
		t.Helper()
		if strings.Contains(s, secret) {
			t.Errorf("BUG: %s shows the URL's token: %s", what, s)
		}
	}

	h, err := svc.CreateHook(ctx, admin, "base", gate.HookRequest{URL: rcv.URL + "/h?token=" + secret + "&v=2", Secret: "hook-signing-secret-0123", Events: []string{"push"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := rcv.URL + "/h?token=[redacted]&v=[redacted]"; h.URL != want {
		t.Errorf("registration answer URL %q, want %q", h.URL, want)
	}
	var raw, details string
	if err := db.SQL().QueryRowContext(ctx, `SELECT url FROM hooks WHERE id = $1`, h.ID).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	leaks("the hooks row", raw)
	if !strings.HasPrefix(raw, rcv.URL+"/h?"+sqlstore.SealPrefix) {
		t.Errorf("stored URL %q: want the path in clear and the query sealed", raw)
	}
	if err := db.SQL().QueryRowContext(ctx, `SELECT details FROM oplog WHERE op = 'hook.create'`).Scan(&details); err != nil {
		t.Fatal(err)
	}
	leaks("the operations log", details)
	if !strings.Contains(details, "token=[redacted]") {
		t.Errorf("log entry %s: want the query's names kept", details)
	}
	list, err := svc.Hooks(ctx, admin, "base")
	if err != nil || len(list) != 1 {
		t.Fatalf("hooks: %+v %v", list, err)
	}
	b, _ := json.Marshal(list)
	leaks("the listing", string(b))
	rot, err := svc.RotateHook(ctx, admin, "base", h.ID, gate.RotateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(rot)
	leaks("the rotation's answer", string(b))

	// Delivered with the whole URL.
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := db.EnqueueEvents(ctx, []lockstep.HookEvent{{Repos: []string{"base"}, Event: "push", Payload: map[string]any{"ref": "refs/heads/main"}}}); err != nil {
		t.Fatal(err)
	}
	svc.Wake()
	if r := <-got; r != "/h?token="+secret+"&v=2" {
		t.Errorf("the receiver got %q, want the whole query", r)
	}

	for _, u := range []string{"http://10.9.8.7/h?token=" + secret, "http://127.1/h?token=" + secret, "https://u:" + secret + "@h.example/h"} {
		_, err := svc.CreateHook(ctx, admin, "base", gate.HookRequest{URL: u, Secret: "hook-signing-secret-0123"})
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("%s: %v, want invalid_argument", u, err)
		}
		leaks("a refusal", err.Error())
	}
	leaks("the gate's log", logs.String())
}
