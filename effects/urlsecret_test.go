package effects_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/delivery"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// TestTargetQuerySealedAndRedacted: a token carried in an effect's URL
// query (and its compensation's) is sealed in the database, redacted in
// the view and the operations log (query names kept), and sent in full:
// the receiver gets ?token=s3cr3t. A refused target's error does not
// repeat it, nor does anything the service logs.
func TestTargetQuerySealedAndRedacted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "m.db")
	db, err := sqlstore.Open(ctx, path, sqlstore.Options{Migrate: true, SecretKey: bytes.Repeat([]byte{3}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := telemetry.NewMetrics()
	repos := repositories.New(repositories.Config{Objects: gitstore.Local{}, DataDir: dir}, db, nil, m, nil)
	defer repos.Close()
	var logs testenv.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	allow, _ := delivery.ParseAllowList("127.0.0.1")
	svc := effects.New(effects.Config{AllowHosts: allow}, db, repos, logger, m, nil)

	owner := &lockstep.Key{ID: "key_agent", Name: "agent", Role: lockstep.RoleAgent}
	admin := &lockstep.Key{ID: "key_admin", Name: "admin", Role: lockstep.RoleAdmin}
	base := &lockstep.Repo{Name: "base", Network: "base", DefaultBranch: "main", Status: lockstep.StatusActive}
	if err := db.CreateRepo(ctx, base, nil, nil); err != nil {
		t.Fatal(err)
	}
	ws := &lockstep.Repo{Name: "ws", Network: "base", ForkOf: "base", DefaultBranch: "main", Status: lockstep.StatusActive, OwnerKeyID: owner.ID, OwnerName: owner.Name}
	if err := db.CreateRepo(ctx, ws, nil, nil); err != nil {
		t.Fatal(err)
	}

	got := make(chan string, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		got <- r.Method + " " + r.URL.RequestURI()
	}))
	defer rcv.Close()

	e, err := svc.Stage(ctx, owner, ws, api.EffectRequest{Method: "POST", URL: rcv.URL + "/hook?token=s3cr3t&x=1#frag", Body: "hi",
		Compensation: &api.EffectCompensation{Method: "DELETE", URL: rcv.URL + "/undo?key=c0mpk3y"}})
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{"s3cr3t", "c0mpk3y"}
	leaks := func(what, s string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Errorf("BUG: %s shows %q: %s", what, sec, s)
			}
		}
	}

	// At rest: neither column holds the query; the rest of the URL is
	// readable.
	var req, comp string
	if err := db.SQL().QueryRowContext(ctx, `SELECT request, compensation FROM effects WHERE id = $1`, e.ID).Scan(&req, &comp); err != nil {
		t.Fatal(err)
	}
	leaks("the stored request", req)
	leaks("the stored compensation", comp)
	if !strings.Contains(req, "/hook") || !strings.Contains(req, sqlstore.SealPrefix) || !strings.Contains(comp, sqlstore.SealPrefix) {
		t.Errorf("stored %s / %s: want the path in clear and the query sealed", req, comp)
	}
	var details string
	if err := db.SQL().QueryRowContext(ctx, `SELECT details FROM oplog WHERE op = 'effect.stage'`).Scan(&details); err != nil {
		t.Fatal(err)
	}
	leaks("the operations log", details)
	if !strings.Contains(details, "token=[redacted]") {
		t.Errorf("log entry %s: want the query's names kept", details)
	}

	// Shown: the view (API, MCP, CLI and UI all encode it).
	read, err := svc.Get(ctx, owner, "ws", e.ID)
	if err != nil {
		t.Fatal(err)
	}
	v := effects.View(read)
	if want := rcv.URL + "/hook?token=[redacted]&x=[redacted]"; v.URL != want {
		t.Errorf("view URL %q, want %q", v.URL, want)
	}
	if want := rcv.URL + "/undo?key=[redacted]"; v.Compensation == nil || v.Compensation.URL != want {
		t.Errorf("view compensation %+v, want URL %q", v.Compensation, want)
	}
	b, _ := json.Marshal(effects.Views([]lockstep.Effect{*read}))
	leaks("the view", string(b))
	// The store still has the whole URL for delivery.
	if read.Request.URL != rcv.URL+"/hook?token=s3cr3t&x=1#frag" || read.Compensation.URL != rcv.URL+"/undo?key=c0mpk3y" {
		t.Errorf("read back %q / %q", read.Request.URL, read.Compensation.URL)
	}

	// Sent: promote, deliver, compensate.
	done := make(chan struct{})
	go func() { svc.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	oid := fmt.Sprintf("%040x", 1)
	if err := db.UpdateRefsAndStatus(ctx, []lockstep.RefUpdate{{RepoID: base.ID, Repo: "base", Name: "refs/heads/main", Old: lockstep.ZeroOID, New: oid}}, nil, nil, nil,
		lockstep.StatusChange{RepoID: ws.ID, Repo: ws.Name, From: lockstep.StatusActive, To: lockstep.StatusPromoted,
			Effects: &lockstep.EffectRelease{Into: "base", IntoID: base.ID}}); err != nil {
		t.Fatal(err)
	}
	svc.Wake()
	if r := <-got; r != "POST /hook?token=s3cr3t&x=1" {
		t.Errorf("the receiver got %q, want the whole query", r)
	}
	waitStatus(t, db, e.ID, lockstep.EffectReleased)
	if _, err := svc.Compensate(ctx, admin, "base", e.ID); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != "DELETE /undo?key=c0mpk3y" {
		t.Errorf("the receiver got %q for the compensation, want the whole query", r)
	}

	// Refused: the error (shown to the agent, written to the request
	// log) names the URL redacted.
	for _, u := range []string{"http://10.1.2.3/x?token=s3cr3t", "http://localhost/x?token=s3cr3t", "ftp://h.example/?token=s3cr3t", "https://u:s3cr3t@h.example/"} {
		_, err := svc.Stage(ctx, owner, ws, api.EffectRequest{Method: "POST", URL: "https://h.example/", Compensation: &api.EffectCompensation{Method: "POST", URL: u}})
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Fatalf("%s: %v, want invalid_argument", u, err)
		}
		leaks("a refusal", err.Error())
	}
	leaks("the service's log", logs.String())
}

// waitStatus waits (without a deadline of its own: the test's) until the
// effect reaches status.
func waitStatus(t *testing.T, db *sqlstore.DB, id, status string) {
	t.Helper()
	for {
		var cur string
		if err := db.SQL().QueryRow(`SELECT status FROM effects WHERE id = $1`, id).Scan(&cur); err != nil && err != sql.ErrNoRows {
			t.Fatal(err)
		}
		if cur == status {
			return
		}
		if cur == lockstep.EffectFailed {
			t.Fatalf("effect %s failed", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
