package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestAcceptanceFlow is the repositories issue's acceptance scenario:
// push, push, roll back over the API, then the same history over git
// smart HTTP (clone, shallow clone, fsck, push, stale push).
func TestAcceptanceFlow(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "accept")

	v1tar := e2ekit.TarEntries(t,
		e2ekit.TarEntry{Name: "README.md", Body: "# accept\nversion 1\n"},
		e2ekit.TarEntry{Name: "bin/run.sh", Body: "#!/bin/sh\necho v1\n", Mode: 0o755},
		e2ekit.TarEntry{Name: "src/main.go", Body: "package main\n\nfunc main() {}\n"},
		e2ekit.TarEntry{Name: "latest", Type: tar.TypeSymlink, Linkname: "README.md"},
	)
	r := s.PushRaw(t, s.AdminKey, "accept", e2ekit.PushQuery("", zeroOID, "message", "v1"), v1tar)
	if r.Status != http.StatusCreated {
		t.Fatalf("push v1: %s", r)
	}
	var v1 e2ekit.PushResult
	r.Decode(t, &v1)
	if v1.Parent != "" || v1.Branch != "main" || len(v1.Tree) != 40 || v1.ObjectsWritten == 0 {
		t.Errorf("push v1 result: %+v", v1)
	}
	v2 := s.Push(t, s.AdminKey, "accept", v1.Commit, map[string]string{"README.md": "# accept\nversion 2 (broken)\n", "src/main.go": "package main\n\nfunc main() { panic(1) }\n"})
	if v2.Parent != v1.Commit {
		t.Errorf("v2 parent %s, want %s", v2.Parent, v1.Commit)
	}

	var rb e2ekit.PushResult
	s.MustJSON(t, "POST", "/api/v1/repos/accept/rollback", s.AdminKey,
		map[string]string{"branch": "main", "to": v1.Commit, "expect_oid": v2.Commit}, http.StatusCreated, &rb)
	if rb.Tree != v1.Tree {
		t.Errorf("rollback tree %s, want v1's tree %s", rb.Tree, v1.Tree)
	}
	if c := s.Commit(t, "accept", rb.Commit); c.Tree != v1.Tree || !reflect.DeepEqual(c.Parents, []string{v2.Commit}) {
		t.Errorf("rollback commit %+v: want tree %s and parent %s", c, v1.Tree, v2.Commit)
	}
	// The broken attempt stays readable.
	if got := s.Blob(t, "accept", v2.Commit, "README.md"); !strings.Contains(got, "broken") {
		t.Errorf("v2 README no longer readable: %q", got)
	}

	log := s.Commits(t, "accept", "main", 50)
	wantOIDs := []string{rb.Commit, v2.Commit, v1.Commit}
	if got := oids(log); !reflect.DeepEqual(got, wantOIDs) {
		t.Fatalf("GET commits = %v, want %v", got, wantOIDs)
	}

	// git clone sees the same three commits.
	dir := s.clone(t, "accept", s.AdminKey)
	if got := strings.Fields(e2ekit.Git(t, dir, "log", "--format=%H", "main")); !reflect.DeepEqual(got, wantOIDs) {
		t.Errorf("git log of the clone = %v, want %v", got, wantOIDs)
	}
	if got := e2ekit.Git(t, dir, "rev-parse", "HEAD^{tree}"); got != v1.Tree {
		t.Errorf("clone HEAD tree %s, want %s", got, v1.Tree)
	}
	if out, err := e2ekit.GitCmd(t, dir, "fsck", "--strict", "--no-dangling"); err != nil || strings.Contains(out, "error") || strings.Contains(out, "warning") {
		t.Errorf("git fsck --strict on the clone: %v\n%s", err, out)
	}
	if got := e2ekit.Git(t, dir, "ls-files", "-s", "bin/run.sh", "latest"); !strings.Contains(got, "100755") || !strings.Contains(got, "120000") {
		t.Errorf("modes in the clone: %s", got)
	}

	shallow := s.clone(t, "accept", s.AdminKey, "--depth", "1")
	if n := e2ekit.Git(t, shallow, "rev-list", "--count", "HEAD"); n != "1" {
		t.Errorf("shallow clone has %s commits, want 1", n)
	}
	if got := e2ekit.Git(t, shallow, "rev-parse", "HEAD"); got != rb.Commit {
		t.Errorf("shallow clone HEAD %s, want %s", got, rb.Commit)
	}

	// git push of a new commit goes through the store: the API log and the
	// operations log show it.
	writeFile(t, filepath.Join(dir, "NOTES.txt"), "pushed with git\n")
	e2ekit.Git(t, dir, "add", "NOTES.txt")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "from git")
	pushed := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")
	if got := s.Head(t, "accept"); got != pushed {
		t.Fatalf("after git push main = %s, want %s", got, pushed)
	}
	if log := s.Commits(t, "accept", "main", 1); len(log) != 1 || log[0].Commit != pushed || log[0].Message != "from git\n" {
		t.Errorf("API log after git push: %+v", log)
	}
	if got := s.Blob(t, "accept", "main", "NOTES.txt"); got != "pushed with git\n" {
		t.Errorf("NOTES.txt via API: %q", got)
	}
	ops := s.Oplog(t, url.Values{"repo": {"accept"}, "op": {"git.push"}})
	if len(ops) != 1 || len(ops[0].Refs) != 1 || ops[0].Refs[0].Old != rb.Commit || ops[0].Refs[0].New != pushed || ops[0].Result != "ok" {
		t.Errorf("oplog git.push entries: %+v", ops)
	}

	// Someone else moves main (over the API); a git push built on the old
	// tip is refused and main keeps the other commit.
	other := s.Push(t, s.AdminKey, "accept", pushed, map[string]string{"README.md": "someone else\n"})
	writeFile(t, filepath.Join(dir, "NOTES.txt"), "stale\n")
	e2ekit.Git(t, dir, "commit", "-q", "-am", "stale base")
	if out, err := e2ekit.GitCmd(t, dir, "push", "origin", "main"); err == nil {
		t.Errorf("git push on a stale base succeeded:\n%s", out)
	}
	lease := "--force-with-lease=main:" + pushed
	if out, err := e2ekit.GitCmd(t, dir, "push", lease, "origin", "main"); err == nil {
		t.Errorf("git push %s succeeded:\n%s", lease, out)
	}
	if got := s.Head(t, "accept"); got != other.Commit {
		t.Errorf("after the refused pushes main = %s, want %s", got, other.Commit)
	}
	if v := s.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

func oids(cs []e2ekit.Commit) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Commit
	}
	return out
}

// TestCompareAndSwapRules checks every rule of the branch-write contract,
// and that a refused write moves nothing.
func TestCompareAndSwapRules(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "cas")
	v1 := s.Push(t, s.AdminKey, "cas", zeroOID, map[string]string{"a.txt": "1\n"})
	v2 := s.Push(t, s.AdminKey, "cas", v1.Commit, map[string]string{"a.txt": "2\n"})
	files3 := map[string]string{"a.txt": "3\n"}

	refused := []struct {
		name   string
		query  string
		status int
		code   string
		exp    string // details.expected
		act    string // details.actual
	}{
		{"stale expect_oid", e2ekit.PushQuery("", v1.Commit), 409, "ref_conflict", v1.Commit, v2.Commit},
		{"zeros on an existing branch", e2ekit.PushQuery("", zeroOID), 409, "ref_conflict", zeroOID, v2.Commit},
		{"unknown oid", e2ekit.PushQuery("", strings.Repeat("ab", 20)), 409, "ref_conflict", strings.Repeat("ab", 20), v2.Commit},
		{"missing expect_oid", e2ekit.PushQuery("", ""), 428, "precondition_required", "", ""},
		{"force=false is not force", e2ekit.PushQuery("", "", "force", "false"), 428, "precondition_required", "", ""},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			r := s.PushRaw(t, s.AdminKey, "cas", c.query, e2ekit.TarOf(t, files3))
			e := e2ekit.WantError(t, r, c.status, c.code)
			if c.exp != "" && (e.Error.Details["expected"] != c.exp || e.Error.Details["actual"] != c.act) {
				t.Errorf("details %v, want expected=%s actual=%s", e.Error.Details, c.exp, c.act)
			}
			if got := s.Head(t, "cas"); got != v2.Commit {
				t.Errorf("a refused push moved main to %s", got)
			}
		})
	}
	// A new branch with zeros is fine, and the zeros rule applies per branch.
	r := s.PushRaw(t, s.AdminKey, "cas", e2ekit.PushQuery("feature", zeroOID), e2ekit.TarOf(t, files3))
	if r.Status != http.StatusCreated {
		t.Errorf("new branch with expect_oid=zeros: %s", r)
	}
	// Rollback follows the same rules.
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/cas/rollback", s.AdminKey, map[string]string{"to": v1.Commit}, ""), 428, "precondition_required")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/cas/rollback", s.AdminKey, map[string]string{"to": v1.Commit, "expect_oid": v1.Commit}, ""), 409, "ref_conflict")
	if got := s.Head(t, "cas"); got != v2.Commit {
		t.Fatalf("refused rollbacks moved main to %s", got)
	}
	// Refused writes are visible to reviewers in the operations log.
	var conflicts, preconds int
	for _, e := range s.Oplog(t, url.Values{"repo": {"cas"}}) {
		switch e.Result {
		case "ref_conflict":
			conflicts++
		case "precondition_required":
			preconds++
		}
	}
	if conflicts < 3 || preconds < 2 {
		t.Errorf("oplog shows %d ref_conflict and %d precondition_required entries, want ≥3 and ≥2", conflicts, preconds)
	}

	// force=true writes without expect_oid, on top of the tip.
	r = s.PushRaw(t, s.AdminKey, "cas", e2ekit.PushQuery("", "", "force", "true"), e2ekit.TarOf(t, files3))
	if r.Status != http.StatusCreated {
		t.Fatalf("force push: %s", r)
	}
	var forced e2ekit.PushResult
	r.Decode(t, &forced)
	if forced.Parent != v2.Commit || s.Head(t, "cas") != forced.Commit {
		t.Errorf("force push %+v: want parent %s and main moved", forced, v2.Commit)
	}

	// The same tree again: 200, changed:false, no commit.
	before := len(s.Commits(t, "cas", "main", 100))
	r = s.PushRaw(t, s.AdminKey, "cas", e2ekit.PushQuery("", forced.Commit), e2ekit.TarOf(t, files3))
	var same e2ekit.PushResult
	r.Decode(t, &same)
	if r.Status != http.StatusOK || same.Changed || same.Commit != forced.Commit {
		t.Errorf("same tree again: %s", r)
	}
	if after := len(s.Commits(t, "cas", "main", 100)); after != before {
		t.Errorf("an unchanged push added commits: %d → %d", before, after)
	}
	// allow_empty=true records one anyway.
	r = s.PushRaw(t, s.AdminKey, "cas", e2ekit.PushQuery("", forced.Commit, "allow_empty", "true"), e2ekit.TarOf(t, files3))
	var empty e2ekit.PushResult
	r.Decode(t, &empty)
	if r.Status != http.StatusCreated || !empty.Changed || empty.Tree != forced.Tree || empty.Parent != forced.Commit {
		t.Errorf("allow_empty push: %s", r)
	}
	if after := len(s.Commits(t, "cas", "main", 100)); after != before+1 {
		t.Errorf("allow_empty: %d commits, want %d", after, before+1)
	}

	// Provenance: a W3C traceparent sent by the agent ends up in the
	// operations-log entry of its write, and the request id is echoed.
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r, err := s.Try("PUT", "/api/v1/repos/cas/worktree"+e2ekit.PushQuery("", empty.Commit), s.AdminKey, e2ekit.TarOf(t, map[string]string{"a.txt": "traced\n"}),
		"application/x-tar", "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01", "X-Request-Id", "agent-req-42")
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("traced push: %v %v", err, r)
	}
	if got := r.Header.Get("X-Request-Id"); got != "agent-req-42" {
		t.Errorf("X-Request-Id echoed as %q", got)
	}
	var traced e2ekit.PushResult
	r.Decode(t, &traced)
	ops := s.Oplog(t, url.Values{"repo": {"cas"}, "op": {"push"}})
	last := ops[len(ops)-1]
	if len(last.Refs) != 1 || last.Refs[0].New != traced.Commit || last.TraceID != traceID || last.KeyName != "admin" {
		t.Errorf("oplog entry of the traced push: %+v, want trace_id %s", last, traceID)
	}
}

// TestConcurrentPushes: many writers with the same expectation, exactly
// one wins, over the API and over git.
func TestConcurrentPushes(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const n = 16
			s := startServer(t, serverOpts{Postgres: b.postgres})

			t.Run("api", func(t *testing.T) {
				s.CreateRepo(t, "race")
				base := s.Push(t, s.AdminKey, "race", zeroOID, map[string]string{"base.txt": "base\n"})
				type out struct {
					r   *e2ekit.Response
					err error
				}
				results := make([]out, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						body := e2ekit.TarOf(t, map[string]string{"base.txt": "base\n", fmt.Sprintf("w%02d.txt", i): "writer\n"})
						r, err := s.Try("PUT", "/api/v1/repos/race/worktree"+e2ekit.PushQuery("", base.Commit), s.AdminKey, body, "application/x-tar")
						results[i] = out{r, err}
					}()
				}
				wg.Wait()
				winner := ""
				conflicts := 0
				for i, o := range results {
					if o.err != nil {
						t.Fatalf("writer %d: %v", i, o.err)
					}
					switch o.r.Status {
					case http.StatusCreated:
						var p e2ekit.PushResult
						o.r.Decode(t, &p)
						if winner != "" {
							t.Errorf("two writers won: %s and %s", winner, p.Commit)
						}
						winner = p.Commit
					case http.StatusConflict:
						e2ekit.WantError(t, o.r, 409, "ref_conflict")
						conflicts++
					default:
						t.Errorf("writer %d: %s", i, o.r)
					}
				}
				if winner == "" || conflicts != n-1 {
					t.Fatalf("winner %q, %d conflicts; want one winner and %d conflicts", winner, conflicts, n-1)
				}
				if got := s.Head(t, "race"); got != winner {
					t.Errorf("main = %s, want the winner %s", got, winner)
				}
				if log := s.Commits(t, "race", "main", 10); len(log) != 2 {
					t.Errorf("main has %d commits, want 2", len(log))
				}
				// git clients see the winner too (the on-disk mirror).
				if out := e2ekit.Git(t, "", "ls-remote", s.GitURL("race", s.AdminKey), "refs/heads/main"); !strings.HasPrefix(out, winner) {
					t.Errorf("git ls-remote main = %q, want %s", out, winner)
				}
			})

			t.Run("git", func(t *testing.T) {
				s.CreateRepo(t, "gitrace")
				base := s.Push(t, s.AdminKey, "gitrace", zeroOID, map[string]string{"base.txt": "base\n"})
				dirs := make([]string, n)
				heads := make([]string, n)
				for i := range n {
					dirs[i] = s.clone(t, "gitrace", s.AdminKey)
					writeFile(t, filepath.Join(dirs[i], fmt.Sprintf("c%02d.txt", i)), fmt.Sprintf("client %d\n", i))
					e2ekit.Git(t, dirs[i], "add", ".")
					e2ekit.Git(t, dirs[i], "commit", "-q", "-m", fmt.Sprintf("client %d", i))
					heads[i] = e2ekit.Git(t, dirs[i], "rev-parse", "HEAD")
				}
				outs := make([]string, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						outs[i], errs[i] = e2ekit.GitCmd(t, dirs[i], "push", "origin", "main")
					}()
				}
				wg.Wait()
				var accepted []int
				for i := range n {
					if errs[i] == nil {
						accepted = append(accepted, i)
					}
				}
				if len(accepted) != 1 {
					for i := range n {
						t.Logf("client %d: err=%v\n%s", i, errs[i], outs[i])
					}
					t.Fatalf("%d pushes accepted, want exactly 1: %v", len(accepted), accepted)
				}
				w := accepted[0]
				if got := s.Head(t, "gitrace"); got != heads[w] {
					t.Fatalf("main = %s, want the accepted client's commit %s", got, heads[w])
				}
				log := s.Commits(t, "gitrace", "main", 100)
				if got := oids(log); !reflect.DeepEqual(got, []string{heads[w], base.Commit}) {
					t.Errorf("main history %v, want [%s %s]: a rejected push leaked in", got, heads[w], base.Commit)
				}
				ops := s.Oplog(t, url.Values{"repo": {"gitrace"}, "op": {"git.push"}})
				ok := 0
				for _, e := range ops {
					if e.Result == "ok" {
						ok++
					}
				}
				if ok != 1 {
					t.Errorf("oplog has %d successful git.push entries, want 1", ok)
				}
			})
		})
	}
}

// TestBadUploads: every malformed or oversized upload is refused with the
// contract's status and code, and no ref moves.
func TestBadUploads(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{Args: []string{"--max-upload-bytes", "65536", "--max-file-bytes", "4096", "--max-files", "50"}})
	s.CreateRepo(t, "bad")
	v1 := s.Push(t, s.AdminKey, "bad", zeroOID, map[string]string{"a.txt": "a\n", "dir/b.txt": "b\n"})
	q := e2ekit.PushQuery("", v1.Commit)

	good := e2ekit.TarOf(t, map[string]string{"ok.txt": "ok\n"})
	truncated := e2ekit.TarOf(t, map[string]string{"x.txt": strings.Repeat("x", 3000)})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(e2ekit.TarOf(t, map[string]string{"z.txt": strings.Repeat("z", 3000)}))
	zw.Close()
	corruptGz := append([]byte{}, gz.Bytes()...)
	for i := 20; i < len(corruptGz)-8; i++ {
		corruptGz[i] ^= 0x5a
	}
	// 40 zero-filled files of 4000 bytes: ~160 KB decompressed, tiny gzip.
	bomb := map[string]string{}
	big := map[string]string{}
	many := map[string]string{}
	for i := range 40 {
		bomb[fmt.Sprintf("f%02d", i)] = strings.Repeat("\x00", 4000)
		big[fmt.Sprintf("f%02d", i)] = randomText(i, 2000)
	}
	for i := range 60 {
		many[fmt.Sprintf("m%02d", i)] = "m"
	}
	// 4 MB in 1,000 files of 4,000 bytes: the server answers long before
	// the client is done sending.
	huge := map[string]string{}
	for i := range 1000 {
		huge[fmt.Sprintf("h%04d", i)] = randomText(i, 4000)
	}
	hugeTar := e2ekit.TarOf(t, huge)
	var bombGz bytes.Buffer
	zw = gzip.NewWriter(&bombGz)
	zw.Write(e2ekit.TarOf(t, bomb))
	zw.Close()

	cases := []struct {
		name   string
		repo   string
		query  string
		body   []byte
		ct     string
		status int
		code   string
	}{
		{"dot-dot", "bad", q, e2ekit.TarOf(t, map[string]string{"../escape.txt": "x"}), "", 400, "invalid_argument"},
		{"dot-dot inside", "bad", q, e2ekit.TarOf(t, map[string]string{"dir/../../escape.txt": "x"}), "", 400, "invalid_argument"},
		{"absolute path", "bad", q, e2ekit.TarOf(t, map[string]string{"/etc/passwd": "x"}), "", 400, "invalid_argument"},
		{".git component", "bad", q, e2ekit.TarOf(t, map[string]string{".git/config": "x"}), "", 400, "invalid_argument"},
		{"nested .git", "bad", q, e2ekit.TarOf(t, map[string]string{"sub/.git/hooks/post-checkout": "x"}), "", 400, "invalid_argument"},
		{"NUL in name", "bad", q, rawTar(t, rawMember{pax: "a\x00b.txt", body: "x"}), "", 400, "invalid_argument"},
		{"invalid UTF-8 name", "bad", q, rawTar(t, rawMember{name: "bad\xff\xfe.txt", body: "x"}), "", 400, "invalid_argument"},
		{"duplicate entries", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "d.txt", Body: "1"}, e2ekit.TarEntry{Name: "d.txt", Body: "2"}), "", 400, "invalid_argument"},
		{"fifo", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "pipe", Type: tar.TypeFifo}), "", 400, "invalid_argument"},
		{"char device", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "null", Type: tar.TypeChar}), "", 400, "invalid_argument"},
		{"block device", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "sda", Type: tar.TypeBlock}), "", 400, "invalid_argument"},
		{"hardlink", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "a.txt", Body: "a"}, e2ekit.TarEntry{Name: "h", Type: tar.TypeLink, Linkname: "a.txt"}), "", 400, "invalid_argument"},
		{"symlink escaping", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "sub/l", Type: tar.TypeSymlink, Linkname: "../../etc/passwd"}), "", 400, "invalid_argument"},
		{"absolute symlink", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "l", Type: tar.TypeSymlink, Linkname: "/etc/passwd"}), "", 400, "invalid_argument"},
		{"symlink escaping through a symlink", "bad", q, e2ekit.TarEntries(t,
			e2ekit.TarEntry{Name: "sub/up", Type: tar.TypeSymlink, Linkname: ".."},
			e2ekit.TarEntry{Name: "sub/esc", Type: tar.TypeSymlink, Linkname: "up/../x"}), "", 400, "invalid_argument"},
		{"file then directory", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "c", Body: "file"}, e2ekit.TarEntry{Name: "c/d.txt", Body: "x"}), "", 400, "invalid_argument"},
		{"directory then file", "bad", q, e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "e/f.txt", Body: "x"}, e2ekit.TarEntry{Name: "e", Body: "file"}), "", 400, "invalid_argument"},
		{"truncated tar", "bad", q, truncated[:1500], "", 400, "invalid_argument"},
		{"tar without end marker", "bad", q, truncated[:512+3072], "", 400, "invalid_argument"},
		{"corrupt gzip", "bad", q, corruptGz, "application/gzip", 400, "invalid_argument"},
		{"truncated gzip", "bad", q, gz.Bytes()[:len(gz.Bytes())/2], "application/gzip", 400, "invalid_argument"},
		{"not a tar", "bad", q, []byte("hello, this is not a tar file at all\n"), "", 400, "invalid_argument"},
		{"body over --max-upload-bytes", "bad", q, e2ekit.TarOf(t, big), "", 413, "too_large"},
		{"body far over --max-upload-bytes", "bad", q, hugeTar, "", 413, "too_large"},
		{"gzip over --max-upload-bytes decompressed", "bad", q, bombGz.Bytes(), "application/gzip", 413, "too_large"},
		{"file over --max-file-bytes", "bad", q, e2ekit.TarOf(t, map[string]string{"big.bin": strings.Repeat("b", 5000)}), "", 413, "too_large"},
		{"more than --max-files entries", "bad", q, e2ekit.TarOf(t, many), "", 413, "too_large"},
		{"unknown repository", "ghost", q, good, "", 404, "not_found"},
		{"bad branch name", "bad", e2ekit.PushQuery("bad..branch", zeroOID), good, "", 400, "invalid_argument"},
		{"branch with a space", "bad", e2ekit.PushQuery("has space", zeroOID), good, "", 400, "invalid_argument"},
		{"branch ending in .lock", "bad", e2ekit.PushQuery("x.lock", zeroOID), good, "", 400, "invalid_argument"},
		{"malformed oid", "bad", e2ekit.PushQuery("", "not-an-oid"), good, "", 400, "invalid_argument"},
		{"short oid", "bad", e2ekit.PushQuery("", v1.Commit[:12]), good, "", 400, "invalid_argument"},
		{"bad force value", "bad", e2ekit.PushQuery("", "", "force", "maybe"), good, "", 400, "invalid_argument"},
		{"wrong content type", "bad", q, good, "application/json", 400, "invalid_argument"},
	}
	before := s.Refs(t, s.AdminKey, "bad")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := c.ct
			if ct == "" {
				ct = "application/x-tar"
			}
			r := s.Call(t, "PUT", "/api/v1/repos/"+c.repo+"/worktree"+c.query, s.AdminKey, c.body, ct)
			e2ekit.WantError(t, r, c.status, c.code)
			if after := s.Refs(t, s.AdminKey, "bad"); !reflect.DeepEqual(after, before) {
				t.Errorf("refs moved: %v → %v", before, after)
			}
		})
	}
	// The limits are not off by one: exactly at them is accepted.
	atLimit := map[string]string{"limit.bin": strings.Repeat("L", 4096)}
	for i := range 49 {
		atLimit[fmt.Sprintf("n%02d", i)] = "n"
	}
	r := s.PushRaw(t, s.AdminKey, "bad", q, e2ekit.TarOf(t, atLimit))
	if r.Status != http.StatusCreated {
		t.Errorf("a tar with 50 entries and a 4096-byte file (exactly the limits): %s", r)
	}
}

// randomText is deterministic, poorly compressible text.
func randomText(seed, n int) string {
	var b strings.Builder
	x := uint32(seed*2654435761 + 1)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789\n"[x%37])
	}
	return b.String()
}

// rawMember is a tar member written byte by byte, for names archive/tar
// refuses to write: name goes in the ustar header, pax in a PAX record.
type rawMember struct {
	name string
	pax  string
	body string
}

// rawTar hand-writes a ustar archive.
func rawTar(t testing.TB, ms ...rawMember) []byte {
	t.Helper()
	var out bytes.Buffer
	block := func(name string, typ byte, body []byte) {
		h := make([]byte, 512)
		copy(h[0:100], name)
		copy(h[100:108], "0000644\x00")
		copy(h[108:116], "0000000\x00")
		copy(h[116:124], "0000000\x00")
		copy(h[124:136], fmt.Sprintf("%011o\x00", len(body)))
		copy(h[136:148], "00000000000\x00")
		copy(h[148:156], "        ")
		h[156] = typ
		copy(h[257:263], "ustar\x00")
		copy(h[263:265], "00")
		sum := 0
		for _, c := range h {
			sum += int(c)
		}
		copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
		out.Write(h)
		out.Write(body)
		if pad := len(body) % 512; pad != 0 {
			out.Write(make([]byte, 512-pad))
		}
	}
	for _, m := range ms {
		name := m.name
		if m.pax != "" {
			rec := "path=" + m.pax + "\n"
			n := len(rec) + 3
			for len(fmt.Sprintf("%d %s", n, rec)) != n {
				n++
			}
			block("PaxHeaders/x", 'x', []byte(fmt.Sprintf("%d %s", n, rec)))
			name = "placeholder"
		}
		block(name, '0', []byte(m.body))
	}
	out.Write(make([]byte, 1024))
	return out.Bytes()
}
