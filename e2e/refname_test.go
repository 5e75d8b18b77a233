package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
	"github.com/lockstep-hq/lockstep/sqlstore"
)

// TestBranchNamesFollowGit: issue 9 item 1. Names git refuses (or that are
// traps) are 400 with the reason; a file/directory clash is 409
// ref_conflict naming the clashing ref, over the API and as a per-ref
// "ng" over git push; and the server still restarts.
func TestBranchNamesFollowGit(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "names")
	s.Push(t, s.AdminKey, "names", "", map[string]string{"a.txt": "a\n"})

	for _, b := range []string{"foo.", "HEAD", "refs/heads/x", "-x", "a..b", "a\u202eb", "x/.y"} {
		r := s.PushRaw(t, s.AdminKey, "names", e2ekit.PushQuery(b, ""), e2ekit.TarOf(t, map[string]string{"a.txt": "x\n"}))
		e := e2ekit.WantError(t, r, http.StatusBadRequest, "invalid_argument")
		if e != nil && !strings.Contains(e.Error.Message, "invalid branch name") {
			t.Errorf("branch %q: message %q", b, e.Error.Message)
		}
	}
	// What git accepts and is no trap is accepted: upper case, non-ASCII.
	s.PushWith(t, s.AdminKey, "names", e2ekit.PushQuery("Fé/Ünï", ""), map[string]string{"a.txt": "u\n"})

	s.PushWith(t, s.AdminKey, "names", e2ekit.PushQuery("ab", ""), map[string]string{"a.txt": "ab\n"})
	r := s.PushRaw(t, s.AdminKey, "names", e2ekit.PushQuery("ab/cd", ""), e2ekit.TarOf(t, map[string]string{"a.txt": "abcd\n"}))
	if e := e2ekit.WantError(t, r, http.StatusConflict, "ref_conflict"); e != nil && e.Error.Details["conflicting_ref"] != "refs/heads/ab" {
		t.Errorf("ab/cd over ab: details %v", e.Error.Details)
	}
	s.PushWith(t, s.AdminKey, "names", e2ekit.PushQuery("x/y", ""), map[string]string{"a.txt": "xy\n"})
	r = s.PushRaw(t, s.AdminKey, "names", e2ekit.PushQuery("x", ""), e2ekit.TarOf(t, map[string]string{"a.txt": "x\n"}))
	if e := e2ekit.WantError(t, r, http.StatusConflict, "ref_conflict"); e != nil && e.Error.Details["conflicting_ref"] != "refs/heads/x/y" {
		t.Errorf("x over x/y: details %v", e.Error.Details)
	}
	// git push: the refusal reaches the client per ref, in git's words.
	dir := filepath.Join(t.TempDir(), "clone")
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("names", s.AdminKey), dir)
	out, err := e2ekit.GitCmd(t, dir, "push", "origin", "HEAD:refs/heads/ab/cd")
	if err == nil || !strings.Contains(out, "'refs/heads/ab' exists; cannot create 'refs/heads/ab/cd'") {
		t.Errorf("git push ab/cd over ab: err %v\n%s", err, out)
	}
	out, err = e2ekit.GitCmd(t, dir, "push", "origin", "HEAD:refs/heads/HEAD")
	if err == nil || !strings.Contains(out, "HEAD is not a branch") {
		t.Errorf("git push refs/heads/HEAD: err %v\n%s", err, out)
	}
	// One atomic push may replace "ab" by "ab/cd", as git allows.
	e2ekit.Git(t, dir, "push", "-q", "--atomic", "origin", ":ab", "HEAD:refs/heads/ab/cd")
	refs := s.Refs(t, s.AdminKey, "names")
	if _, ok := refs["refs/heads/ab"]; ok || refs["refs/heads/ab/cd"] == "" {
		t.Errorf("after replacing ab by ab/cd: %v", refs)
	}
	e2ekit.Git(t, dir, "fetch", "-q", "origin")
	if got := e2ekit.Git(t, dir, "rev-parse", "origin/ab/cd"); got != refs["refs/heads/ab/cd"] {
		t.Errorf("mirror of ab/cd: %s, want %s", got, refs["refs/heads/ab/cd"])
	}

	if code := s.Stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, s.Stderr)
	}
	s2 := s.restart(t)
	dir2 := filepath.Join(t.TempDir(), "clone2")
	e2ekit.Git(t, "", "clone", "-q", s2.GitURL("names", s2.AdminKey), dir2)
	e2ekit.Git(t, filepath.Join(s2.Data, "networks", "names.git"), "fsck", "--strict", "--no-dangling")
}

// TestBadRefInStoreDoesNotStopStart: refs an older server let into the
// metadata store (a trailing dot, "ab" beside "ab/cd") used to make every
// start exit in "re-sync ref mirrors". Now the bad refs are logged and
// listed by /readyz, and every other ref and repository is served.
func TestBadRefInStoreDoesNotStopStart(t *testing.T) {
	t.Parallel()
	for _, pg := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOpts{Postgres: pg})
			s.CreateRepo(t, "good")
			s.CreateRepo(t, "bad")
			good := s.Push(t, s.AdminKey, "good", "", map[string]string{"a.txt": "good\n"})
			bad := s.Push(t, s.AdminKey, "bad", "", map[string]string{"a.txt": "bad\n"})
			if code := s.Stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("stop: exit %d", code)
			}

			// As an old server would have stored them.
			dbURL := s.DBURL
			if dbURL == "" {
				dbURL = sqlstore.SQLitePath(s.Data)
			}
			db, err := sqlstore.Open(context.Background(), dbURL, sqlstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range []string{"refs/heads/foo.", "refs/heads/ab", "refs/heads/ab/cd"} {
				if _, err := db.SQL().Exec(`INSERT INTO refs (repo_id, name, oid, updated_at) SELECT id, $1, $2, 0 FROM repos WHERE name = $3`, ref, bad.Commit, "bad"); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()

			s2 := s.restart(t)
			if !strings.Contains(s2.Stderr.String(), "refs/heads/foo.") {
				t.Errorf("the bad ref is not logged:\n%s", s2.Stderr)
			}
			var ready struct {
				Ready  bool `json:"ready"`
				Checks struct {
					Problems int `json:"ref_mirror_problems"`
					Mirror   []struct {
						Repo, Ref, Error string
					} `json:"ref_mirror"`
				} `json:"checks"`
			}
			r := s2.Call(t, "GET", "/readyz", "", nil, "")
			if err := json.Unmarshal(r.Body, &ready); err != nil || r.Status != http.StatusOK || !ready.Ready {
				t.Fatalf("readyz %d %s (%v)", r.Status, r.Body, err)
			}
			var listed []string
			for _, p := range ready.Checks.Mirror {
				listed = append(listed, p.Repo+" "+p.Ref)
			}
			if strings.Join(listed, ",") != "bad refs/heads/ab/cd,bad refs/heads/foo." {
				t.Errorf("readyz lists %v, want bad's ab/cd and foo.", listed)
			}
			for repo, want := range map[string]string{"good": good.Commit, "bad": bad.Commit} {
				dir := filepath.Join(t.TempDir(), repo)
				e2ekit.Git(t, "", "clone", "-q", s2.GitURL(repo, s2.AdminKey), dir)
				if got := e2ekit.Git(t, dir, "rev-parse", "HEAD"); got != want {
					t.Errorf("clone of %s: HEAD %s, want %s", repo, got, want)
				}
			}
			// Writes go on too.
			s2.Push(t, s2.AdminKey, "good", good.Commit, map[string]string{"a.txt": "after restart\n"})
		})
	}
}
