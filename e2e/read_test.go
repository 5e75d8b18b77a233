package e2e

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestCrashSafety kills the server (SIGKILL) while several writers push,
// then checks on the restarted server that every ref names a complete
// commit in the object store and that the on-disk mirror matches the store.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serverOpts{Postgres: b.postgres})
			const writers = 4
			seeds := make([]string, writers)
			for w := range writers {
				s.CreateRepo(t, fmt.Sprintf("crash%d", w))
				seeds[w] = s.Push(t, s.AdminKey, fmt.Sprintf("crash%d", w), zeroOID, map[string]string{"seed.txt": "seed\n"}).Commit
			}
			// One more repository takes git pushes from a clone.
			s.CreateRepo(t, "crashgit")
			s.Push(t, s.AdminKey, "crashgit", zeroOID, map[string]string{"seed.txt": "seed\n"})
			gitDir := s.clone(t, "crashgit", s.AdminKey)

			var ok atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			// And workspaces are forked off crash0 meanwhile.
			var forked atomic.Int64
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					r, err := s.Try("POST", "/api/v1/repos/crash0/forks", s.AdminKey, map[string]string{"name": fmt.Sprintf("cws-%d", i)}, "")
					if err != nil || r.Status != http.StatusCreated {
						return
					}
					forked.Add(1)
				}
			}()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					name := filepath.Join(gitDir, fmt.Sprintf("g%03d.txt", i))
					if os.WriteFile(name, []byte(randomText(i, 3000)), 0o644) != nil {
						return
					}
					if _, err := e2ekit.GitRun(gitDir, "", "add", "."); err != nil {
						return
					}
					if _, err := e2ekit.GitRun(gitDir, "", "commit", "-q", "-m", fmt.Sprint("git ", i)); err != nil {
						return
					}
					if _, err := e2ekit.GitRun(gitDir, "", "push", "-q", "origin", "main"); err != nil {
						return
					}
					ok.Add(1)
				}
			}()
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					repo := fmt.Sprintf("crash%d", w)
					expect := seeds[w]
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						files := map[string]string{}
						for f := range 30 {
							files[fmt.Sprintf("d%d/f%02d.txt", f%5, f)] = randomText(w*1000+f+i*(f%3), 1500)
						}
						r, err := s.Try("PUT", "/api/v1/repos/"+repo+"/worktree"+e2ekit.PushQuery("", expect), s.AdminKey, e2ekit.TarOf(t, files), "application/x-tar")
						if err != nil || r.Status != http.StatusCreated {
							return // the server died under us
						}
						var p e2ekit.PushResult
						if json.Unmarshal(r.Body, &p) != nil || p.Commit == "" {
							return
						}
						expect = p.Commit
						ok.Add(1)
					}
				}()
			}
			// Kill once writes are flowing; no sleeps, just progress.
			for ok.Load() < 24 {
				if !s.Running() {
					t.Fatalf("server died on its own:\n%s", s.Stderr)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := s.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			<-s.Done()
			t.Logf("killed after %d successful pushes and %d forks", ok.Load(), forked.Load())

			s2 := s.restart(t)
			var repos struct {
				Repos []struct {
					Name    string `json:"name"`
					Network string `json:"network"`
				} `json:"repos"`
			}
			s2.MustJSON(t, "GET", "/api/v1/repos", s2.AdminKey, nil, http.StatusOK, &repos)
			// Every acknowledged fork survived (one more may have committed
			// without its answer reaching us).
			if n := int64(len(repos.Repos)); n < writers+1+forked.Load() || n > writers+2+forked.Load() {
				t.Fatalf("%d repositories after restart, want %d (+1)", n, writers+1+forked.Load())
			}
			total := 0
			for _, r := range repos.Repos {
				gitDir := s2.networkDir(r.Network)
				refs := s2.Refs(t, s2.AdminKey, r.Name)
				main := refs["refs/heads/main"]
				if main == "" {
					t.Errorf("%s has no main after the crash", r.Name)
					continue
				}
				for name, oid := range refs {
					if out, err := e2ekit.GitCmd(t, "", "--git-dir="+gitDir, "cat-file", "-e", oid+"^{commit}"); err != nil {
						t.Errorf("%s %s → %s: not a commit in %s: %v %s", r.Name, name, oid, gitDir, err, out)
						continue
					}
					// Every object reachable from the ref is present and parses.
					if out, err := e2ekit.GitCmd(t, "", "--git-dir="+gitDir, "rev-list", "--objects", "--missing=print", oid); err != nil || strings.Contains(out, "\n?") || strings.HasPrefix(out, "?") {
						t.Errorf("%s %s → %s is incomplete: %v\n%.2000s", r.Name, name, oid, err, out)
					}
					mirror := e2ekit.Git(t, "", "--git-dir="+gitDir, "rev-parse", "refs/namespaces/"+r.Name+"/"+name)
					if mirror != oid {
						t.Errorf("%s %s: on-disk mirror %s, store %s", r.Name, name, mirror, oid)
					}
				}
				if !strings.HasPrefix(r.Name, "cws-") {
					total += len(s2.Commits(t, r.Name, "main", 1000)) - 1 // minus the seed
				}
				if out, err := e2ekit.GitCmd(t, "", "--git-dir="+gitDir, "fsck", "--strict", "--no-dangling", "--no-progress"); err != nil {
					t.Errorf("git fsck --strict %s: %v\n%.3000s", gitDir, err, out)
				}
				// The repository still takes writes on top of what survived.
				p := s2.Push(t, s2.AdminKey, r.Name, main, map[string]string{"after.txt": "after the crash\n"})
				if c := s2.Commit(t, r.Name, p.Commit); len(c.Parents) != 1 || c.Parents[0] != main {
					t.Errorf("%s: post-crash commit parents %v, want [%s]", r.Name, c.Parents, main)
				}
			}
			// Every push that got its 201 before the kill survived it.
			if int64(total) < ok.Load() {
				t.Errorf("%d commits on the branches after restart, but %d pushes were acknowledged", total, ok.Load())
			}
			if v := s2.Verify(t); !v.OK {
				t.Errorf("oplog verify after the crash: %+v", v)
			}
		})
	}
}

// TestReadAPI: tree listings, blobs, archives and compares.
func TestReadAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "read")
	binary1 := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + strings.Repeat("\x00\x01", 40)
	v1files := []e2ekit.TarEntry{
		{Name: "README.md", Body: "# Read\nline 2\nline 3\n"},
		{Name: "notes.txt", Body: "plain text\n"},
		{Name: "page.html", Body: "<script>alert(1)</script>\n"},
		{Name: "bin/run.sh", Body: "#!/bin/sh\necho hi\n", Mode: 0o755},
		{Name: "src/a.go", Body: "package src\n\nfunc A() int { return 1 }\n"},
		{Name: "src/gone.go", Body: "package src\n"},
		{Name: "img.png", Body: binary1},
		{Name: "link", Type: tar.TypeSymlink, Linkname: "src/a.go"},
	}
	r := s.PushRaw(t, s.AdminKey, "read", e2ekit.PushQuery("", zeroOID), e2ekit.TarEntries(t, v1files...))
	if r.Status != http.StatusCreated {
		t.Fatalf("push: %s", r)
	}
	var v1 e2ekit.PushResult
	r.Decode(t, &v1)

	t.Run("tree", func(t *testing.T) {
		type te struct {
			Name string `json:"name"`
			Path string `json:"path"`
			Mode string `json:"mode"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		}
		var root struct {
			Entries []te `json:"entries"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/read/tree/main", s.AdminKey, nil, http.StatusOK, &root)
		want := map[string]string{"README.md": "100644 blob", "notes.txt": "100644 blob", "page.html": "100644 blob", "bin": "040000 tree",
			"src": "040000 tree", "img.png": "100644 blob", "link": "120000 symlink"}
		got := map[string]string{}
		for _, e := range root.Entries {
			got[e.Name] = e.Mode + " " + e.Type
		}
		for n, w := range want {
			if got[n] != w {
				t.Errorf("root entry %s = %q, want %q", n, got[n], w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("root entries %v, want %v", got, want)
		}
		var sub struct {
			Entries []te `json:"entries"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/read/tree/"+v1.Commit+"?path=bin", s.AdminKey, nil, http.StatusOK, &sub)
		if len(sub.Entries) != 1 || sub.Entries[0].Path != "bin/run.sh" || sub.Entries[0].Mode != "100755" || sub.Entries[0].Size != 18 {
			t.Errorf("tree bin: %+v", sub.Entries)
		}
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/tree/main?path=nope", s.AdminKey, nil, ""), 404, "not_found")
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/tree/nobranch", s.AdminKey, nil, ""), 404, "not_found")
	})

	t.Run("blob", func(t *testing.T) {
		r := s.Call(t, "GET", "/api/v1/repos/read/blob/main/notes.txt", s.AdminKey, nil, "")
		if r.Status != 200 || string(r.Body) != "plain text\n" {
			t.Errorf("notes.txt: %s", r)
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("notes.txt Content-Type %q", ct)
		}
		if cl := r.Header.Get("Content-Length"); cl != "11" {
			t.Errorf("notes.txt Content-Length %q, want 11", cl)
		}
		r = s.Call(t, "GET", "/api/v1/repos/read/blob/main/img.png", s.AdminKey, nil, "")
		if r.Status != 200 || string(r.Body) != binary1 || r.Header.Get("Content-Type") != "image/png" {
			t.Errorf("img.png: status %d, %d bytes, type %q", r.Status, len(r.Body), r.Header.Get("Content-Type"))
		}
		// HTML is never served as HTML from the API's origin.
		r = s.Call(t, "GET", "/api/v1/repos/read/blob/main/page.html", s.AdminKey, nil, "")
		if ct := r.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/html") || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("page.html served as %q (nosniff %q)", ct, r.Header.Get("X-Content-Type-Options"))
		}
		r = s.Call(t, "GET", "/api/v1/repos/read/blob/main/bin/run.sh", s.AdminKey, nil, "")
		if r.Status != 200 || r.Header.Get("X-Lockstep-Mode") != "100755" {
			t.Errorf("bin/run.sh: %d mode %q", r.Status, r.Header.Get("X-Lockstep-Mode"))
		}
		r = s.Call(t, "GET", "/api/v1/repos/read/blob/main/link", s.AdminKey, nil, "")
		if r.Status != 200 || string(r.Body) != "src/a.go" || r.Header.Get("X-Lockstep-Mode") != "120000" {
			t.Errorf("symlink blob: %s mode %q", r, r.Header.Get("X-Lockstep-Mode"))
		}
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/blob/main/missing.txt", s.AdminKey, nil, ""), 404, "not_found")
		// A directory is not a blob: no file at that path.
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/blob/main/src", s.AdminKey, nil, ""), 404, "not_found")
	})

	t.Run("archive", func(t *testing.T) {
		r := s.Call(t, "GET", "/api/v1/repos/read/archive/main", s.AdminKey, nil, "")
		if r.Status != 200 || r.Header.Get("Content-Type") != "application/x-tar" || r.Header.Get("X-Lockstep-Commit") != v1.Commit {
			t.Fatalf("archive: %d %q commit %q", r.Status, r.Header.Get("Content-Type"), r.Header.Get("X-Lockstep-Commit"))
		}
		got := e2ekit.Untar(t, r.Body)
		if len(got) != len(v1files) {
			t.Errorf("archive has %d members, pushed %d", len(got), len(v1files))
		}
		for _, e := range v1files {
			g, ok := got[e.Name]
			switch {
			case !ok:
				t.Errorf("archive lacks %s", e.Name)
			case e.Type == tar.TypeSymlink:
				if g.Type != tar.TypeSymlink || g.Linkname != e.Linkname {
					t.Errorf("archive %s: type %q → %q", e.Name, g.Type, g.Linkname)
				}
			default:
				wantExec := e.Mode&0o111 != 0
				if g.Body != e.Body || (g.Mode&0o111 != 0) != wantExec {
					t.Errorf("archive %s: %d bytes mode %o, pushed %d bytes mode %o", e.Name, len(g.Body), g.Mode, len(e.Body), e.Mode)
				}
			}
		}
		// The archive pushed back is the same tree.
		r2 := s.PushRaw(t, s.AdminKey, "read", e2ekit.PushQuery("", v1.Commit), r.Body)
		var again e2ekit.PushResult
		r2.Decode(t, &again)
		if r2.Status != http.StatusOK || again.Changed || again.Tree != v1.Tree {
			t.Errorf("re-pushing the archive: %s", r2)
		}
	})

	t.Run("compare", func(t *testing.T) {
		v2files := []e2ekit.TarEntry{
			{Name: "README.md", Body: "# Read\nline 2 changed\nline 3\nline 4\n"},
			{Name: "notes.txt", Body: "plain text\n"},
			{Name: "page.html", Body: "<script>alert(1)</script>\n"},
			{Name: "bin/run.sh", Body: "#!/bin/sh\necho hi\n", Mode: 0o755},
			{Name: "src/a.go", Body: "package src\n\nfunc A() int { return 1 }\n"},
			{Name: "src/new.go", Body: "package src\n\nfunc New() {}\n"},
			{Name: "img.png", Body: binary1 + "\x00more"},
			{Name: "link", Type: tar.TypeSymlink, Linkname: "src/a.go"},
		}
		r := s.PushRaw(t, s.AdminKey, "read", e2ekit.PushQuery("", v1.Commit), e2ekit.TarEntries(t, v2files...))
		if r.Status != http.StatusCreated {
			t.Fatalf("push v2: %s", r)
		}
		var v2 e2ekit.PushResult
		r.Decode(t, &v2)
		var cmp struct {
			Base, Head string
			Added      int `json:"added"`
			Removed    int `json:"removed"`
			Files      []struct {
				Path    string `json:"path"`
				Status  string `json:"status"`
				Added   int    `json:"added"`
				Removed int    `json:"removed"`
				Binary  bool   `json:"binary"`
				Patch   string `json:"patch"`
			} `json:"files"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/read/compare?base="+v1.Commit+"&head=main", s.AdminKey, nil, http.StatusOK, &cmp)
		if cmp.Base != v1.Commit || cmp.Head != v2.Commit {
			t.Errorf("compare base/head %s..%s", cmp.Base, cmp.Head)
		}
		got := map[string]string{}
		for _, f := range cmp.Files {
			got[f.Path] = f.Status
			switch f.Path {
			case "README.md":
				if f.Added != 2 || f.Removed != 1 || !strings.Contains(f.Patch, "-line 2\n") || !strings.Contains(f.Patch, "+line 2 changed\n") ||
					!strings.Contains(f.Patch, "+line 4\n") || !strings.Contains(f.Patch, "@@ ") || !strings.Contains(f.Patch, "--- a/README.md") {
					t.Errorf("README.md change: +%d -%d\n%s", f.Added, f.Removed, f.Patch)
				}
			case "img.png":
				if !f.Binary || strings.Contains(f.Patch, "@@") {
					t.Errorf("img.png: binary=%v patch %q", f.Binary, f.Patch)
				}
			case "src/new.go":
				if f.Added != 3 || !strings.Contains(f.Patch, "+func New() {}") {
					t.Errorf("src/new.go: +%d\n%s", f.Added, f.Patch)
				}
			case "src/gone.go":
				if f.Removed != 1 {
					t.Errorf("src/gone.go: -%d", f.Removed)
				}
			}
		}
		want := map[string]string{"README.md": "modified", "img.png": "modified", "src/new.go": "added", "src/gone.go": "deleted"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("changed files %v, want %v", got, want)
		}
		if cmp.Added != 2+3 || cmp.Removed != 1+1 {
			t.Errorf("totals +%d -%d, want +5 -2", cmp.Added, cmp.Removed)
		}
		// The log pages with limit and next_after.
		var page struct {
			Commits   []e2ekit.Commit `json:"commits"`
			NextAfter string          `json:"next_after"`
		}
		s.MustJSON(t, "GET", "/api/v1/repos/read/commits?limit=1", s.AdminKey, nil, http.StatusOK, &page)
		if len(page.Commits) != 1 || page.Commits[0].Commit != v2.Commit || page.NextAfter != v2.Commit {
			t.Errorf("log page 1: %+v", page)
		}
		s.MustJSON(t, "GET", "/api/v1/repos/read/commits?limit=1&after="+page.NextAfter, s.AdminKey, nil, http.StatusOK, &page)
		if len(page.Commits) != 1 || page.Commits[0].Commit != v1.Commit {
			t.Errorf("log page 2: %+v", page)
		}
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/compare?head=main", s.AdminKey, nil, ""), 400, "invalid_argument")
		e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/repos/read/compare?base="+strings.Repeat("1", 40)+"&head=main", s.AdminKey, nil, ""), 404, "not_found")
	})
}

// TestCLI drives the lockstep client commands against a server: an
// incremental push of a 2,000-file tree, log, rollback and checkout.
func TestCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	key := s.AdminKey

	if cr := s.CLI(t, key, "", "repo", "create", "clirepo"); cr.Code != 0 || !strings.Contains(cr.Stdout, "clirepo") {
		t.Fatalf("repo create: %s", cr)
	}
	if cr := s.CLI(t, key, "", "repo", "create", "clirepo"); cr.Code == 0 {
		t.Errorf("creating the same repository twice succeeded: %s", cr)
	}

	dir := filepath.Join(t.TempDir(), "work")
	want := map[string]os.FileMode{}
	for i := range 2000 {
		p := filepath.Join(fmt.Sprintf("pkg%02d", i%40), fmt.Sprintf("sub%d", i%3), fmt.Sprintf("file%04d.txt", i))
		mode := os.FileMode(0o644)
		if i%97 == 0 {
			mode = 0o755
		}
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(fmt.Sprintf("file %d\n%s", i, randomText(i, 200))), mode); err != nil {
			t.Fatal(err)
		}
		want[p] = mode
	}
	if err := os.Symlink("pkg00/sub0/file0000.txt", filepath.Join(dir, "first")); err != nil {
		t.Fatal(err)
	}

	type pushOut struct {
		Commit    string `json:"commit"`
		Tree      string `json:"tree"`
		Changed   bool   `json:"changed"`
		Files     int    `json:"files"`
		BytesSent int64  `json:"bytes_sent"`
	}
	var p1, p2 pushOut
	cr := s.CLI(t, key, "", "push", dir, "--repo", "clirepo", "--json", "--message", "initial")
	if cr.Code != 0 {
		t.Fatalf("first push: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &p1)
	if !p1.Changed || p1.Files < 2000 || s.Head(t, "clirepo") != p1.Commit {
		t.Fatalf("first push: %+v", p1)
	}

	changed := filepath.Join(dir, "pkg07", "sub1", "file0007.txt")
	if err := os.WriteFile(changed, []byte("changed by the agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cr = s.CLI(t, key, "", "push", dir, "--repo", "clirepo", "--expect-current", "--json")
	if cr.Code != 0 {
		t.Fatalf("second push: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &p2)
	if !p2.Changed || p2.Commit == p1.Commit {
		t.Errorf("second push: %+v", p2)
	}
	if p2.BytesSent >= 64<<10 {
		t.Errorf("changing one file sent %d bytes, want < 64 KiB (incremental push)", p2.BytesSent)
	}
	if got := s.Blob(t, "clirepo", "main", "pkg07/sub1/file0007.txt"); got != "changed by the agent\n" {
		t.Errorf("changed file on the server: %q", got)
	}
	// A stale explicit expectation exits 3 (ref conflict).
	if cr := s.CLI(t, key, "", "push", dir, "--repo", "clirepo", "--expect", p1.Commit, "--allow-empty"); cr.Code != 3 {
		t.Errorf("push with a stale --expect: %s", cr)
	}

	var log struct {
		Commits []struct {
			Commit  string `json:"commit"`
			Message string `json:"message"`
		} `json:"commits"`
	}
	cr = s.CLI(t, key, "", "log", "clirepo", "--json")
	if cr.Code != 0 {
		t.Fatalf("log: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &log)
	if len(log.Commits) != 2 || log.Commits[0].Commit != p2.Commit || log.Commits[1].Commit != p1.Commit || log.Commits[1].Message != "initial\n" {
		t.Errorf("log: %+v", log.Commits)
	}

	var rb struct {
		Commit string `json:"commit"`
		Tree   string `json:"tree"`
		Parent string `json:"parent"`
	}
	cr = s.CLI(t, key, "", "rollback", "--repo", "clirepo", "--to", p1.Commit, "--expect-current", "--json")
	if cr.Code != 0 {
		t.Fatalf("rollback: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &rb)
	if rb.Tree != p1.Tree || rb.Parent != p2.Commit {
		t.Errorf("rollback: %+v, want tree %s parent %s", rb, p1.Tree, p2.Commit)
	}

	out := filepath.Join(t.TempDir(), "out")
	cr = s.CLI(t, key, "", "checkout", "clirepo@"+rb.Commit, out)
	if cr.Code != 0 {
		t.Fatalf("checkout: %s", cr)
	}
	// The checkout is the first version: contents and exec bits.
	if err := os.WriteFile(changed, []byte(fmt.Sprintf("file %d\n%s", 7, randomText(7, 200))), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(out, p)
		n++
		if rel == "first" {
			if fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("first is not a symlink in the checkout")
			} else if target, _ := os.Readlink(p); target != "pkg00/sub0/file0000.txt" {
				t.Errorf("first → %q", target)
			}
			return nil
		}
		mode, ok := want[rel]
		if !ok {
			t.Errorf("checkout has an extra file %s", rel)
			return nil
		}
		got, _ := os.ReadFile(p)
		orig, _ := os.ReadFile(filepath.Join(dir, rel))
		if string(got) != string(orig) {
			t.Errorf("%s differs after checkout", rel)
		}
		if (fi.Mode().Perm()&0o111 != 0) != (mode&0o111 != 0) {
			t.Errorf("%s mode %v, pushed %v", rel, fi.Mode().Perm(), mode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want)+1 {
		t.Errorf("checkout has %d files, want %d", n, len(want)+1)
	}
	// A workspace shares its base's objects: pushing the same directory with
	// one more change to a fresh fork sends only that change.
	var fr struct {
		BaseCommit string `json:"base_commit"`
	}
	cr = s.CLI(t, key, "", "fork", "clirepo", "clirepo-ws", "--json")
	if cr.Code != 0 {
		t.Fatalf("fork: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &fr)
	if fr.BaseCommit != rb.Commit {
		t.Errorf("fork base_commit %s, want %s", fr.BaseCommit, rb.Commit)
	}
	if err := os.WriteFile(filepath.Join(dir, "pkg39", "new.txt"), []byte("new in the workspace\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var p3 pushOut
	cr = s.CLI(t, key, "", "push", dir, "--repo", "clirepo-ws", "--expect-current", "--json")
	if cr.Code != 0 {
		t.Fatalf("push to the workspace: %s", cr)
	}
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &p3)
	if p3.BytesSent >= 64<<10 {
		t.Errorf("pushing to a fork sent %d bytes: the fork network's objects were not reused", p3.BytesSent)
	}
	if got := s.Blob(t, "clirepo-ws", "main", "pkg39/new.txt"); got != "new in the workspace\n" {
		t.Errorf("workspace new.txt = %q", got)
	}
	// The same directory pushed to an unrelated repository (another object
	// store) must send everything the client's cache believes known.
	if cr := s.CLI(t, key, "", "repo", "create", "clirepo-other"); cr.Code != 0 {
		t.Fatalf("repo create: %s", cr)
	}
	cr = s.CLI(t, key, "", "push", dir, "--repo", "clirepo-other", "--expect-current", "--json")
	if cr.Code != 0 {
		t.Fatalf("push to another network: %s", cr)
	}
	var p4 pushOut
	(&e2ekit.Response{Body: []byte(cr.Stdout)}).Decode(t, &p4)
	if p4.Tree != p3.Tree {
		t.Errorf("same directory, different trees: %s vs %s", p4.Tree, p3.Tree)
	}
	other := s.Call(t, "GET", "/api/v1/repos/clirepo-other/archive/main", key, nil, "")
	if other.Status != 200 || len(e2ekit.Untar(t, other.Body)) != len(want)+2 {
		t.Errorf("archive of clirepo-other: status %d, %d files, want %d", other.Status, len(e2ekit.Untar(t, other.Body)), len(want)+2)
	}
	if out, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("clirepo-other"), "fsck", "--strict", "--no-dangling", "--no-progress"); err != nil {
		t.Errorf("git fsck of clirepo-other: %v\n%s", err, out)
	}

	// Checking out into a non-empty directory is refused.
	if cr := s.CLI(t, key, "", "checkout", "clirepo", out); cr.Code == 0 {
		t.Errorf("checkout into a non-empty directory succeeded")
	}
}

// TestCLIErrors: the CLI's exit statuses tell scripts what went wrong, and
// what a worktree holds besides its files (.git, .lockstep) stays local.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	key := s.AdminKey
	if cr := s.CLI(t, key, "", "repo", "create", "errs"); cr.Code != 0 {
		t.Fatalf("repo create: %s", cr)
	}
	dir := filepath.Join(t.TempDir(), "w")
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n")
	writeFile(t, filepath.Join(dir, ".git", "config"), "[core]\n")
	writeFile(t, filepath.Join(dir, "sub", ".git"), "gitdir: elsewhere\n")
	cr := s.CLI(t, key, "", "push", dir, "--repo", "errs", "--expect-current", "--json")
	if cr.Code != 0 {
		t.Fatalf("push: %s", cr)
	}
	a := s.Call(t, "GET", "/api/v1/repos/errs/archive/main", key, nil, "")
	files := e2ekit.Untar(t, a.Body)
	if _, ok := files["main.go"]; !ok || len(files) != 1 {
		names := []string{}
		for n := range files {
			names = append(names, n)
		}
		t.Errorf("pushed tree holds %v, want only main.go (.git and .lockstep stay local)", names)
	}
	head := s.Head(t, "errs")

	cases := []struct {
		name  string
		setup func(d string)
		args  []string
		key   string
		code  int
		want  string
	}{
		{"no expectation on an existing branch", nil, []string{"--repo", "errs"}, key, 3, "expect"},
		{"stale expectation", nil, []string{"--repo", "errs", "--expect", strings.Repeat("1", 40), "--allow-empty"}, key, 3, ""},
		{"symlink leaving the tree", func(d string) { os.Symlink("/etc/passwd", filepath.Join(d, "evil")) }, []string{"--repo", "errs", "--expect-current"}, key, 2, "evil"},
		{"unknown repository", nil, []string{"--repo", "ghost", "--expect-current"}, key, 1, "ghost"},
		{"revoked or unknown key", nil, []string{"--repo", "errs", "--expect-current"}, "lsk_deadbeef_nope", 1, "unknown or revoked"},
		{"no key", nil, []string{"--repo", "errs", "--expect-current"}, "", 1, "LOCKSTEP_KEY"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "w")
			writeFile(t, filepath.Join(d, "main.go"), "package main\n// "+c.name+"\n")
			if c.setup != nil {
				c.setup(d)
			}
			cr := s.CLI(t, c.key, "", append([]string{"push", d}, c.args...)...)
			if cr.Code != c.code || !strings.Contains(cr.Stderr, c.want) {
				t.Errorf("want exit %d mentioning %q, got %s", c.code, c.want, cr)
			}
			if strings.Contains(cr.Stderr, "panic") || strings.Contains(cr.Stderr, "goroutine ") {
				t.Errorf("the CLI crashed: %s", cr.Stderr)
			}
			if got := s.Head(t, "errs"); got != head {
				t.Errorf("main moved to %s", got)
			}
		})
	}
}
