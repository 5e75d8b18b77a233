package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestLoad runs the load generator for 5 s with 8 agents against a real
// `lockstep serve` on Postgres, reached under two base URLs (127.0.0.1
// and localhost, so the round-robin rewriting is exercised): every
// operation must run, none may fail or answer 5xx, no update may be lost
// and the operations log must verify.
func TestLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts lockstep serve on Postgres and runs agents for 5 s")
	}
	s := e2ekit.StartServer(t, e2ekit.ServerOpts{Postgres: true})
	other := strings.Replace(s.URL, "127.0.0.1", "localhost", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard, not a timing assertion
	defer cancel()
	var out, progress bytes.Buffer
	rep, err := RunLoad(ctx, LoadOptions{URLs: []string{s.URL, other}, Key: s.AdminKey, Agents: 8, Duration: 5 * time.Second,
		Base: "loadtest", Dir: t.TempDir(), Seed: 1, Stderr: &progress}, &out)
	if err != nil {
		t.Fatalf("RunLoad: %v\n%s\nserver stderr:\n%s", err, progress.String(), s.Stderr)
	}
	t.Logf("\n%s", out.String())
	if !rep.BaseCreated || len(rep.Checks) != 1 || rep.Checks[0] != LoadCheckName {
		t.Errorf("base created %v with checks %v, want created with [%s]", rep.BaseCreated, rep.Checks, LoadCheckName)
	}
	for _, o := range rep.Ops {
		if o.Count == 0 {
			t.Errorf("operation %s never ran", o.Op)
		}
		if o.Errors != 0 {
			t.Errorf("operation %s: %d errors %v", o.Op, o.Errors, o.ErrorCodes)
		}
		if o.Status5xx != 0 {
			t.Errorf("operation %s: %d 5xx answers", o.Op, o.Status5xx)
		}
	}
	if len(rep.Ops) != len(loadOps) {
		t.Errorf("%d operation rows, want %d", len(rep.Ops), len(loadOps))
	}
	if rep.Total5xx != 0 {
		t.Errorf("5xx answers: %v", rep.Status5xx)
	}
	if rep.LostUpdates != 0 || rep.StaleReads != 0 || len(rep.VerifyErrors) != 0 {
		t.Errorf("lost %d %v, stale %d %v, unverified %v", rep.LostUpdates, rep.Lost, rep.StaleReads, rep.Stale, rep.VerifyErrors)
	}
	if rep.Promoted == 0 || rep.VerifiedPromoted != rep.Promoted || rep.VerifiedWorkspaces != rep.Iterations {
		t.Errorf("promoted %d, verified %d promoted and %d of %d workspaces", rep.Promoted, rep.VerifiedPromoted, rep.VerifiedWorkspaces, rep.Iterations)
	}
	if !rep.Oplog.OK || rep.Oplog.Entries == 0 {
		t.Errorf("oplog verify: %+v", rep.Oplog)
	}
	if !rep.OK() {
		t.Errorf("report not OK")
	}
	for _, u := range rep.URLStats {
		if u.Requests == 0 {
			t.Errorf("no request reached %s", u.URL)
		}
	}
	verifyCatchesLostUpdates(t, s, rep)
	if !strings.Contains(out.String(), "lost_updates 0") || !strings.Contains(out.String(), "oplog verify: ok") {
		t.Errorf("table lacks the verdicts:\n%s", out.String())
	}
}

// verifyCatchesLostUpdates feeds the verification beliefs the server
// contradicts: a workspace head older than its ref, and a "promoted"
// commit that never reached the base. Both must be reported; a true
// belief must not.
func verifyCatchesLostUpdates(t *testing.T, s *e2ekit.Server, done *LoadReport) {
	t.Helper()
	ctx := context.Background()
	l := newLoader(LoadOptions{URLs: []string{s.URL}, Key: s.AdminKey, Base: done.Base}, t.TempDir())
	l.branch = "main"
	fr, err := l.c.Fork(ctx, done.Base, "loadtest-probe")
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.c.EditFiles(ctx, "loadtest-probe", []client.Edit{client.WriteFile("probe.txt", "never promoted\n")},
		client.WriteOptions{Branch: "main", ExpectOID: fr.BaseCommit, Message: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	l.records = []*wsRecord{
		{name: "loadtest-probe", head: res.Commit},                     // true
		{name: "loadtest-probe", head: fr.BaseCommit},                  // the ref moved past it: lost
		{name: "loadtest-probe", head: fr.BaseCommit, uncertain: true}, // a later write may have landed: fine
		{name: "loadtest-probe", head: res.Commit, promoted: true},     // not in the base: lost
	}
	rep := &LoadReport{}
	l.verify(ctx, rep)
	if rep.LostUpdates != 2 || len(rep.VerifyErrors) != 0 || rep.VerifiedWorkspaces != 4 || rep.VerifiedPromoted != 1 {
		t.Errorf("verify of 2 false beliefs: lost %d %q, errors %v, verified %d workspaces, %d promoted", rep.LostUpdates, rep.Lost, rep.VerifyErrors, rep.VerifiedWorkspaces, rep.VerifiedPromoted)
	}
	for i, want := range []string{"is not reachable from loadtest:main", "its agent pushed " + short(fr.BaseCommit)} {
		if len(rep.Lost) <= i || !strings.Contains(strings.Join(rep.Lost, "\n"), want) {
			t.Errorf("lost updates %q lack %q", rep.Lost, want)
		}
	}
}

// TestLoadRefusesBadOptions: each bad setting is refused before any
// request, with a message naming the flag.
func TestLoadRefusesBadOptions(t *testing.T) {
	ok := LoadOptions{URLs: []string{"http://127.0.0.1:1"}, Key: "k", Agents: 1, Duration: time.Second, Base: "b"}
	for _, c := range []struct {
		mut  func(*LoadOptions)
		want string
	}{
		{func(o *LoadOptions) { o.URLs = nil }, "--urls"},
		{func(o *LoadOptions) { o.Key = "" }, "LOCKSTEP_KEY"},
		{func(o *LoadOptions) { o.Agents = 0 }, "--agents"},
		{func(o *LoadOptions) { o.Duration = time.Millisecond }, "--duration"},
		{func(o *LoadOptions) { o.Base = strings.Repeat("b", 80) }, "--base"},
		{func(o *LoadOptions) { o.Base = "Bad Name" }, "base repository name"},
	} {
		o := ok
		c.mut(&o)
		_, err := RunLoad(context.Background(), o, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RunLoad(%+v) = %v, want an error naming %s", o, err, c.want)
		}
	}
	for _, v := range []string{"", "ftp://x", "127.0.0.1:7070", "http://a:1?x=1"} {
		if _, err := ParseURLs(v); err == nil {
			t.Errorf("ParseURLs(%q) accepted", v)
		}
	}
	got, err := ParseURLs(" http://a:1/ ,http://b:2")
	if err != nil || len(got) != 2 || got[0] != "http://a:1" || got[1] != "http://b:2" {
		t.Errorf("ParseURLs = %v, %v", got, err)
	}
}
