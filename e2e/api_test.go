package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

const zeroOID = e2ekit.ZeroOID

// forkTip creates workspace name of base with key; returns its base commit.
func (s *server) forkTip(t testing.TB, key, base, name string) string {
	t.Helper()
	var out struct {
		Name       string `json:"name"`
		ForkOf     string `json:"fork_of"`
		BaseCommit string `json:"base_commit"`
	}
	s.MustJSON(t, "POST", "/api/v1/repos/"+base+"/forks", key, map[string]string{"name": name}, http.StatusCreated, &out)
	if out.Name != name || out.ForkOf != base {
		t.Fatalf("fork %s of %s: %+v", name, base, out)
	}
	return out.BaseCommit
}

// gateQuery is the worktree query of this suite's pushes: always a
// compare-and-swap on expect, with the message "agent push".
func gateQuery(expect string) string {
	return "?" + url.Values{"expect_oid": {expect}, "message": {"agent push"}}.Encode()
}

// push uploads files (the whole tree) to main of repo with
// compare-and-swap on expect and requires a new commit.
func (s *server) push(t testing.TB, key, repo, expect string, files map[string]string) e2ekit.PushResult {
	t.Helper()
	return s.PushWith(t, key, repo, gateQuery(expect), files)
}

// setGate puts a policy on base's default branch with the admin key.
func (s *server) setGate(t testing.TB, repo string, policy map[string]any) {
	t.Helper()
	s.MustJSON(t, "PUT", "/api/v1/repos/"+repo+"/gate", s.AdminKey, policy, http.StatusOK, nil)
}

type check struct {
	Commit  string `json:"commit"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Summary string `json:"summary"`
	Key     string `json:"key"`
}

type checkSet struct {
	Commit  string  `json:"commit"`
	Checks  []check `json:"checks"`
	History []check `json:"history"`
}

func (s *server) checks(t testing.TB, repo, oid string) checkSet {
	t.Helper()
	var cs checkSet
	s.MustJSON(t, "GET", "/api/v1/repos/"+repo+"/commits/"+oid+"/checks", s.AdminKey, nil, http.StatusOK, &cs)
	return cs
}

func (s *server) postCheck(t testing.TB, key, repo, oid, name, status string) {
	t.Helper()
	s.MustJSON(t, "POST", "/api/v1/repos/"+repo+"/commits/"+oid+"/checks", key,
		map[string]string{"name": name, "status": status, "summary": "posted by the test"}, http.StatusCreated, nil)
}

// waitCheck polls until check name of oid has a final status (not
// pending) and returns it.
func (s *server) waitCheck(t testing.TB, repo, oid, name string, timeout time.Duration) check {
	t.Helper()
	var last checkSet
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		last = s.checks(t, repo, oid)
		for _, c := range last.Checks {
			if c.Name == name && c.Status != "pending" {
				return c
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("check %q of %s@%s has no final result after %s: %+v", name, repo, oid, timeout, last)
	return check{}
}

type reason struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	Path    string `json:"path"`
}

// promoteRefused requires a 412 gate_failed and returns its reasons.
func (s *server) promoteRefused(t testing.TB, key, ws string, body any) []reason {
	t.Helper()
	r := s.Call(t, "POST", "/api/v1/repos/"+ws+"/promote", key, body, "")
	e2ekit.RequireError(t, "promote "+ws, r, http.StatusPreconditionFailed, "gate_failed")
	var e struct {
		Error struct {
			Details struct {
				Reasons []reason `json:"reasons"`
				Commit  string   `json:"commit"`
			} `json:"details"`
		} `json:"error"`
	}
	r.Decode(t, &e)
	if len(e.Error.Details.Reasons) == 0 {
		t.Fatalf("promote %s: gate_failed without details.reasons: %s", ws, r)
	}
	return e.Error.Details.Reasons
}

type promoteResult struct {
	Commit      string `json:"commit"`
	FastForward bool   `json:"fast_forward"`
	Clean       bool   `json:"clean"`
	Into        string `json:"into"`
	Workspace   string `json:"workspace"`
}

func (s *server) promote(t testing.TB, key, ws string) promoteResult {
	t.Helper()
	var res promoteResult
	s.MustJSON(t, "POST", "/api/v1/repos/"+ws+"/promote", key, map[string]any{}, http.StatusOK, &res)
	if len(res.Commit) != 40 {
		t.Fatalf("promote %s: no landed commit: %+v", ws, res)
	}
	return res
}

// rules returns the sorted rule names of reasons.
func rules(rs []reason) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule)
	}
	sort.Strings(out)
	return out
}

// with returns a copy of files with changes applied ("" deletes a path).
func with(files map[string]string, changes map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	for k, v := range changes {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

// cliJSON runs a CLI command that must succeed and decodes its stdout.
func (s *server) cliJSON(t testing.TB, key string, out any, args ...string) {
	t.Helper()
	r := s.CLI(t, key, "", args...)
	if r.Code != 0 {
		t.Fatalf("lockstep %s: %s", strings.Join(args, " "), r)
	}
	if err := json.Unmarshal([]byte(r.Stdout), out); err != nil {
		t.Fatalf("lockstep %s: stdout is not JSON %T: %v\n%s", strings.Join(args, " "), out, err, r)
	}
}

// eventually polls f until it returns true or the deadline passes.
func eventually(t testing.TB, timeout time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
