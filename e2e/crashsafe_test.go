package e2e

import (
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
	for _, pg := range []bool{false, true} {
		name := "sqlite"
		if pg {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
	for _, pg := range []bool{false, true} {
		name := "sqlite"
		if pg {
			name = "postgres"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
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
