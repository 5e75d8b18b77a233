package e2e

import (
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestUploadThenGCThenCommitTree: the incremental push's two requests
// (POST objects, then PUT worktree?tree=) with a `gc --prune now` in
// between, which drops the upload (nothing names it yet). The commit of
// the tree must then either land with its whole closure stored or be
// refused with nothing moved; the retry (upload again, commit) lands, and
// a mirror clone of the network passes fsck. Both stores.
func TestUploadThenGCThenCommitTree(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, pg bool) {
		s := startServer(t, serverOpts{Postgres: pg})
		s.CreateRepo(t, "gcr")
		p := s.Push(t, s.AdminKey, "gcr", zeroOID, map[string]string{"a.txt": "a\n"})
		pack, tree := packOf(t, map[string]string{"a.txt": "a\n", "src/new.go": "package fresh\n"})
		upload(t, s, pack)
		var gc struct {
			Objects int64 `json:"objects"`
		}
		s.MustJSON(t, "POST", "/api/v1/gc", s.AdminKey, map[string]any{"repo": "gcr", "prune": "now"}, http.StatusOK, &gc)

		q := url.Values{"tree": {tree}, "expect_oid": {p.Commit}}
		r := s.Call(t, "PUT", "/api/v1/repos/gcr/worktree?"+q.Encode(), s.AdminKey, nil, "")
		head := s.Head(t, "gcr")
		switch {
		case r.Status == http.StatusCreated:
			var got e2ekit.PushResult
			r.Decode(t, &got)
			t.Logf("commit of the dropped upload landed: %s", got.Commit)
			if head != got.Commit {
				t.Fatalf("commit of the tree answered %s but main is at %s", got.Commit, head)
			}
		case r.Status >= 400:
			t.Logf("commit of the dropped upload refused: %s", r)
			if head != p.Commit {
				t.Fatalf("commit of the tree refused (%s) but main moved %s -> %s", r, p.Commit, head)
			}
			if !strings.Contains(string(r.Body), `"code"`) {
				t.Fatalf("refusal without an error envelope: %s", r)
			}
			upload(t, s, pack)
			if r := s.Call(t, "PUT", "/api/v1/repos/gcr/worktree?"+q.Encode(), s.AdminKey, nil, ""); r.Status != http.StatusCreated {
				t.Fatalf("retry of the commit after a new upload: %s", r)
			}
		default:
			t.Fatalf("commit of the tree after the gc: %s", r)
		}
		dir := filepath.Join(t.TempDir(), "gcr.git")
		e2ekit.Git(t, "", "clone", "-q", "--mirror", s.GitURL("gcr", s.AdminKey), dir)
		e2ekit.Git(t, dir, "fsck", "--strict", "--no-dangling")
		if out := e2ekit.Git(t, dir, "cat-file", "-p", "main:src/new.go"); strings.TrimSpace(out) != "package fresh" {
			t.Fatalf("src/new.go on main after the gc race: %q", out)
		}
	})
}

func upload(t *testing.T, s *server, pack []byte) {
	t.Helper()
	if r := s.Call(t, "POST", "/api/v1/repos/gcr/objects", s.AdminKey, pack, "application/x-git-packfile"); r.Status != http.StatusOK {
		t.Fatalf("upload: %s", r)
	}
}

// TestMissingThenGCThenCommitTree: `lockstep push`'s negotiation answered
// "stored" for a blob (an earlier upload nothing names), a `gc --prune
// now` drops that blob, the client uploads only what was missing (the
// trees) and commits the tree. The commit must not land naming the dropped
// blob: refused with nothing moved, and a full upload then lands with a
// complete closure.
func TestMissingThenGCThenCommitTree(t *testing.T) {
	t.Parallel()
	onBothBackends(t, func(t *testing.T, pg bool) {
		s := startServer(t, serverOpts{Postgres: pg})
		s.CreateRepo(t, "gcr")
		p := s.Push(t, s.AdminKey, "gcr", zeroOID, map[string]string{"a.txt": "a\n"})
		files := map[string]string{"a.txt": "a\n", "src/new.go": "package fresh\n"}
		full, tree := packOf(t, files)
		blob := gitHashObject(t, "package fresh\n")
		blobPack, _ := packOf(t, map[string]string{"x": "package fresh\n"})
		upload(t, s, blobPack)
		var missing struct {
			Missing []string `json:"missing"`
		}
		s.MustJSON(t, "POST", "/api/v1/repos/gcr/objects/missing", s.AdminKey, map[string]any{"oids": []string{blob}}, http.StatusOK, &missing)
		if len(missing.Missing) != 0 {
			t.Fatalf("the uploaded blob is reported missing: %v", missing.Missing)
		}
		s.MustJSON(t, "POST", "/api/v1/gc", s.AdminKey, map[string]any{"repo": "gcr", "prune": "now"}, http.StatusOK, nil)
		treesOnly := packOfOIDs(t, files, tree, "src")
		r := s.Call(t, "POST", "/api/v1/repos/gcr/objects", s.AdminKey, treesOnly, "application/x-git-packfile")
		t.Logf("upload of the trees only: %s", r)
		q := url.Values{"tree": {tree}, "expect_oid": {p.Commit}}
		r = s.Call(t, "PUT", "/api/v1/repos/gcr/worktree?"+q.Encode(), s.AdminKey, nil, "")
		head := s.Head(t, "gcr")
		if r.Status == http.StatusCreated {
			t.Logf("commit landed: %s", r)
		} else {
			t.Logf("commit refused: %s", r)
			if head != p.Commit {
				t.Fatalf("commit refused (%s) but main moved %s -> %s", r, p.Commit, head)
			}
			upload(t, s, full)
			if r := s.Call(t, "PUT", "/api/v1/repos/gcr/worktree?"+q.Encode(), s.AdminKey, nil, ""); r.Status != http.StatusCreated {
				t.Fatalf("retry of the commit after a full upload: %s", r)
			}
		}
		clone := filepath.Join(t.TempDir(), "gcr.git")
		e2ekit.Git(t, "", "clone", "-q", "--mirror", s.GitURL("gcr", s.AdminKey), clone)
		e2ekit.Git(t, clone, "fsck", "--strict", "--no-dangling")
		if out := e2ekit.Git(t, clone, "cat-file", "-p", "main:src/new.go"); strings.TrimSpace(out) != "package fresh" {
			t.Fatalf("src/new.go on main after the gc race: %q", out)
		}
	})
}

func gitHashObject(t *testing.T, content string) string {
	t.Helper()
	out, err := e2ekit.GitRunBytes(t.TempDir(), content, "hash-object", "--stdin")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// packOfOIDs builds files' tree like packOf and packs only the trees named
// (the root tree and the subtrees at the given paths), no blob.
func packOfOIDs(t *testing.T, files map[string]string, tree string, subtrees ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	e2ekit.Git(t, dir, "init", "-q")
	for name, body := range files {
		writeFile(t, filepath.Join(dir, name), body)
	}
	e2ekit.Git(t, dir, "add", "-A")
	if got := strings.TrimSpace(e2ekit.Git(t, dir, "write-tree")); got != tree {
		t.Fatalf("tree %s, want %s", got, tree)
	}
	oids := []string{tree}
	for _, p := range subtrees {
		oids = append(oids, strings.TrimSpace(e2ekit.Git(t, dir, "rev-parse", tree+":"+p)))
	}
	pack, err := e2ekit.GitRunBytes(dir, strings.Join(oids, "\n")+"\n", "pack-objects", "--stdout", "-q")
	if err != nil {
		t.Fatalf("git pack-objects: %v", err)
	}
	return pack
}

// TestRestartRightAfterAKillMidRefMirror: the server is SIGKILLed while it
// writes a ref to the on-disk mirror git serves (what that leaves:
// "<ref>.lock" beside a stale or missing ref file) and restarted at once.
// Its start-up re-sync must rewrite the ref from the database: before, the
// lock (younger than 10 s) made it fail ("lock ref: file exists") and git
// clients went without that ref until it moved again.
func TestRestartRightAfterAKillMidRefMirror(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "mir")
	p1 := s.Push(t, s.AdminKey, "mir", zeroOID, map[string]string{"a.txt": "one\n"})
	p2 := s.Push(t, s.AdminKey, "mir", p1.Commit, map[string]string{"a.txt": "two\n"})
	src := t.TempDir()
	e2ekit.Git(t, "", "clone", "-q", s.GitURL("mir", s.AdminKey), src)
	e2ekit.Git(t, src, "push", "-q", "origin", "HEAD:refs/heads/side")
	s.Kill()

	ns := filepath.Join(s.Data, "networks", "mir.git", "refs", "namespaces", "mir", "refs", "heads")
	// main: the old value on disk, the new one in a lock never renamed;
	// side: created in the database, its first write cut before the rename.
	writeFile(t, filepath.Join(ns, "main"), p1.Commit+"\n")
	writeFile(t, filepath.Join(ns, "main.lock"), p2.Commit+"\n")
	if err := os.Remove(filepath.Join(ns, "side")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(ns, "side.lock"), "")

	s = s.restart(t)
	net := filepath.Join(s.Data, "networks", "mir.git")
	for ref, want := range map[string]string{"main": p2.Commit, "side": p2.Commit} {
		if got, err := e2ekit.GitCmd(t, "", "--git-dir="+net, "rev-parse", "--verify", "-q", "refs/namespaces/mir/refs/heads/"+ref); err != nil || strings.TrimSpace(got) != want {
			t.Errorf("mirror of %s after the restart: %q (%v), want %s\n%s", ref, got, err, want, s.Stderr)
		}
	}
	clone := filepath.Join(t.TempDir(), "mir.git")
	e2ekit.Git(t, "", "clone", "-q", "--mirror", s.GitURL("mir", s.AdminKey), clone)
	e2ekit.Git(t, clone, "fsck", "--strict", "--no-dangling")
	if got := e2ekit.Git(t, clone, "rev-parse", "side"); got != p2.Commit {
		t.Errorf("side in a clone after the restart: %s, want %s", got, p2.Commit)
	}
}

// historyOf writes n commits on branch of a new repository in dir (each
// adds or rewrites one of 40 files with 6 KB of text; the same seed, the
// same commits) and returns the tip.
func historyOf(t *testing.T, dir, branch string, seed int64, n int) string {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	var b strings.Builder
	for i := 0; i < n; i++ {
		body := make([]byte, 6000)
		for j := range body {
			body[j] = "abcdefghijklmnopqrstuvwxyz\n"[rng.Intn(27)]
		}
		fmt.Fprintf(&b, "blob\nmark :%d\ndata %d\n%s\n", 2*i+1, len(body), body)
		msg := fmt.Sprintf("commit %d of %d", i, seed)
		fmt.Fprintf(&b, "commit refs/heads/%s\nmark :%d\ncommitter E2E <e2e@e2e.test> %d +0000\ndata %d\n%s\n", branch, 2*i+2, 1700000000+i, len(msg), msg)
		if i > 0 {
			fmt.Fprintf(&b, "from :%d\n", 2*i)
		}
		fmt.Fprintf(&b, "M 100644 :%d f%d.txt\n\n", 2*i+1, rng.Intn(40))
	}
	if _, err := os.Stat(filepath.Join(dir, ".git")); err != nil {
		e2ekit.Git(t, dir, "init", "-q")
	}
	if out, err := e2ekit.GitRun(dir, b.String(), "fast-import", "--quiet"); err != nil {
		t.Fatalf("git fast-import: %v\n%s", err, out)
	}
	return e2ekit.Git(t, dir, "rev-parse", "refs/heads/"+branch)
}

// checkCompleteAfterCrash: the oplog's chain verifies, every ref of every
// repository names an object whose whole closure is stored (rev-list in
// the network, fsck of the network and of a mirror clone of each
// repository), and the on-disk mirror agrees with the database.
func checkCompleteAfterCrash(t *testing.T, s *server, repos ...string) {
	t.Helper()
	var v struct {
		OK      bool `json:"ok"`
		Entries int  `json:"entries"`
	}
	s.MustJSON(t, "GET", "/api/v1/oplog/verify", s.AdminKey, nil, http.StatusOK, &v)
	if !v.OK {
		t.Errorf("oplog chain does not verify after the crash (%d entries)", v.Entries)
	}
	for _, repo := range repos {
		net := filepath.Join(s.Data, "networks", repo+".git")
		var oids []string
		for ref, oid := range s.Refs(t, s.AdminKey, repo) {
			oids = append(oids, oid)
			got, err := e2ekit.GitCmd(t, "", "--git-dir="+net, "rev-parse", "--verify", "-q", "refs/namespaces/"+repo+"/"+ref)
			if err != nil || strings.TrimSpace(got) != oid {
				t.Errorf("%s %s: the database says %s, the mirror %q (%v)", repo, ref, oid, got, err)
			}
		}
		if out, err := e2ekit.GitRun("", strings.Join(oids, "\n")+"\n", "--git-dir="+net, "rev-list", "--objects", "--stdin"); err != nil {
			t.Errorf("%s: a ref's closure is not stored: %v\n%.2000s", repo, err, out)
		}
		if out, err := e2ekit.GitCmd(t, "", "--git-dir="+net, "fsck", "--connectivity-only", "--no-dangling", "--no-progress"); err != nil {
			t.Errorf("%s: fsck of the network: %v\n%.2000s", repo, err, out)
		}
		clone := filepath.Join(t.TempDir(), repo+".git")
		e2ekit.Git(t, "", "clone", "-q", "--mirror", s.GitURL(repo, s.AdminKey), clone)
		e2ekit.Git(t, clone, "fsck", "--strict", "--no-dangling")
	}
}

// TestKilledDuringGitPush: `git push` of a 300-commit history, the server
// SIGKILLed while the push is being received (its quarantine exists), then
// once its pack is published (the ref may or may not have moved), then
// while a `gc --prune now` runs beside the receive. After each restart
// (no repair) the branch is absent or exactly the pushed tip, every ref's
// closure is stored, the mirror agrees, the oplog verifies, and the push
// done again lands. A kill that comes after the push answered is checked
// the same way: the points are where the test looks, the checks hold
// wherever the kill falls.
func TestKilledDuringGitPush(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "hist")
	s.Push(t, s.AdminKey, "hist", zeroOID, map[string]string{"README": "hist\n"})
	src := t.TempDir()
	objects := filepath.Join(s.Data, "networks", "hist.git", "objects")
	// The packs and the receive quarantines (a killed receive leaves its
	// quarantine until --temp-grace: only a new one counts).
	files := func() map[string]bool {
		out := map[string]bool{}
		for _, d := range []string{objects, filepath.Join(objects, "pack")} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "tmp_objdir-") || strings.HasSuffix(e.Name(), ".pack") {
					out[e.Name()] = true
				}
			}
		}
		return out
	}
	appeared := func(prefix string) func(map[string]bool) bool {
		return func(before map[string]bool) bool {
			for f := range files() {
				if !before[f] && strings.HasPrefix(f, prefix) {
					return true
				}
			}
			return false
		}
	}
	quarantined, published := appeared("tmp_objdir-"), appeared("pack-")
	for round, point := range []struct {
		name string
		at   func(map[string]bool) bool
		gc   bool
	}{{"receiving", quarantined, false}, {"published", published, false}, {"receiving beside a gc", quarantined, true}} {
		branch := fmt.Sprintf("b%d", round)
		tip := historyOf(t, src, branch, int64(round+1), 300)
		before := files()
		push := make(chan error, 1)
		go func() {
			out, err := e2ekit.GitRun(src, "", "push", "-q", s.GitURL("hist", s.AdminKey), branch)
			if err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
			push <- err
		}()
		gcDone := make(chan struct{})
		if point.gc {
			go func() {
				defer close(gcDone)
				s.Try("POST", "/api/v1/gc", s.AdminKey, map[string]any{"prune": "now"}, "application/json")
			}()
		} else {
			close(gcDone)
		}
		var answered error
		seen, done := false, false
		for !seen && !done {
			select {
			case answered = <-push:
				done = true
			default:
				seen = point.at(before)
			}
		}
		s.Kill()
		if !done {
			answered = <-push
		}
		<-gcDone
		t.Logf("%s: killed (the point seen: %v); the push answered %v", point.name, seen, answered)
		s = s.restart(t)
		got := s.Refs(t, s.AdminKey, "hist")["refs/heads/"+branch]
		if got != "" && got != tip {
			t.Fatalf("%s: %s is at %s after the crash, neither absent nor the pushed %s", point.name, branch, got, tip)
		}
		if answered == nil && got != tip {
			t.Fatalf("%s: the push answered success but %s is at %q after the restart", point.name, branch, got)
		}
		checkCompleteAfterCrash(t, s, "hist")
		if out, err := e2ekit.GitRun(src, "", "push", "-q", s.GitURL("hist", s.AdminKey), branch); err != nil {
			t.Fatalf("%s: the push again after the restart: %v\n%s", point.name, err, out)
		}
		if got := s.Refs(t, s.AdminKey, "hist")["refs/heads/"+branch]; got != tip {
			t.Fatalf("%s: after the push again %s is at %s, want %s", point.name, branch, got, tip)
		}
	}
	checkCompleteAfterCrash(t, s, "hist")
}
