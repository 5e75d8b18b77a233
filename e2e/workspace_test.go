package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

type forkResult struct {
	Name       string `json:"name"`
	ForkOf     string `json:"fork_of"`
	BaseCommit string `json:"base_commit"`
	Owner      string `json:"owner"`
}

func (s *server) fork(t testing.TB, key, base, name string) forkResult {
	t.Helper()
	var f forkResult
	s.MustJSON(t, "POST", "/api/v1/repos/"+base+"/forks", key, map[string]string{"name": name}, http.StatusCreated, &f)
	return f
}

type workspaceInfo struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Status     string `json:"status"`
	Tip        string `json:"tip"`
	BaseCommit string `json:"base_commit"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
}

func (s *server) workspaces(t testing.TB, base string) map[string]workspaceInfo {
	t.Helper()
	var out struct {
		Workspaces []workspaceInfo `json:"workspaces"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/"+base+"/workspaces", s.AdminKey, nil, http.StatusOK, &out)
	m := map[string]workspaceInfo{}
	for _, w := range out.Workspaces {
		m[w.Name] = w
	}
	return m
}

// mergeResult is the answer of POST merges and sync.
type mergeResult struct {
	Clean       bool   `json:"clean"`
	FastForward bool   `json:"fast_forward"`
	UpToDate    bool   `json:"up_to_date"`
	MergeBase   string `json:"merge_base"`
	Ours        string `json:"ours"`
	Theirs      string `json:"theirs"`
	Tree        string `json:"tree"`
	Commit      string `json:"commit"`
	SideRef     string `json:"side_ref"`
	Conflicts   []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"conflicts"`
}

// TestForksAndPermissions: agents write only the workspaces they own; a
// base is reached only through merges; abandoned workspaces stay readable.
func TestForksAndPermissions(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	a := s.CreateKey(t, "agent-a", "agent")
	b := s.CreateKey(t, "agent-b", "agent")
	rev := s.CreateKey(t, "reviewer", "reviewer")
	s.CreateRepo(t, "base")
	base := s.Push(t, s.AdminKey, "base", zeroOID, map[string]string{"app.txt": "v1\n"})

	fa := s.fork(t, a.Secret, "base", "ws-a")
	if fa.BaseCommit != base.Commit || fa.ForkOf != "base" || fa.Owner != "agent-a" || fa.Name != "ws-a" {
		t.Errorf("fork ws-a: %+v, want base_commit %s", fa, base.Commit)
	}
	fb := s.fork(t, b.Secret, "base", "ws-b")
	if fb.BaseCommit != base.Commit {
		t.Errorf("fork ws-b base_commit %s", fb.BaseCommit)
	}
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/forks", a.Secret, map[string]string{"name": "ws-b"}, ""), 409, "already_exists")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/forks", rev.Secret, map[string]string{"name": "ws-r"}, ""), 403, "permission_denied")
	if got := s.Refs(t, a.Secret, "ws-a")["refs/heads/main"]; got != base.Commit {
		t.Errorf("ws-a main after fork %s, want %s", got, base.Commit)
	}

	p1 := s.Push(t, a.Secret, "ws-a", fa.BaseCommit, map[string]string{"app.txt": "v1\n", "a.txt": "by a\n"})
	before := s.Refs(t, s.AdminKey, "ws-b")
	e2ekit.WantError(t, s.PushRaw(t, a.Secret, "ws-b", e2ekit.PushQuery("", fb.BaseCommit), e2ekit.TarOf(t, map[string]string{"x": "x"})), 403, "permission_denied")
	e2ekit.WantError(t, s.PushRaw(t, a.Secret, "base", e2ekit.PushQuery("", base.Commit), e2ekit.TarOf(t, map[string]string{"x": "x"})), 403, "permission_denied")
	e2ekit.WantError(t, s.PushRaw(t, rev.Secret, "ws-a", e2ekit.PushQuery("", p1.Commit), e2ekit.TarOf(t, map[string]string{"x": "x"})), 403, "permission_denied")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/merges", a.Secret, map[string]any{"theirs": "ws-a:main", "materialize": true}, ""), 403, "permission_denied")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/ws-b/rollback", a.Secret, map[string]string{"to": base.Commit, "expect_oid": base.Commit}, ""), 403, "permission_denied")
	if after := s.Refs(t, s.AdminKey, "ws-b"); !reflect.DeepEqual(after, before) {
		t.Errorf("ws-b refs moved: %v → %v", before, after)
	}
	if got := s.Head(t, "base"); got != base.Commit {
		t.Errorf("base main moved to %s", got)
	}

	// The same rules over git.
	dirA := s.clone(t, "ws-a", a.Secret)
	writeFile(t, filepath.Join(dirA, "git.txt"), "via git\n")
	e2ekit.Git(t, dirA, "add", ".")
	e2ekit.Git(t, dirA, "commit", "-q", "-m", "a via git")
	p2 := e2ekit.Git(t, dirA, "rev-parse", "HEAD")
	e2ekit.Git(t, dirA, "push", "-q", "origin", "main")
	if got := s.Refs(t, a.Secret, "ws-a")["refs/heads/main"]; got != p2 {
		t.Errorf("ws-a main after git push %s, want %s", got, p2)
	}
	if out, err := e2ekit.GitCmd(t, dirA, "push", s.GitURL("base", a.Secret), "HEAD:main"); err == nil {
		t.Errorf("agent git push to the base succeeded:\n%s", out)
	}
	if out, err := e2ekit.GitCmd(t, dirA, "push", s.GitURL("ws-b", a.Secret), "HEAD:main"); err == nil {
		t.Errorf("agent git push to another agent's workspace succeeded:\n%s", out)
	}
	if got := s.Head(t, "base"); got != base.Commit {
		t.Errorf("base main moved to %s by a git push", got)
	}
	if got := s.Refs(t, s.AdminKey, "ws-b")["refs/heads/main"]; got != fb.BaseCommit {
		t.Errorf("ws-b main moved to %s by a git push", got)
	}

	// The base moves on; listings show ahead/behind against it.
	base2 := s.Push(t, s.AdminKey, "base", base.Commit, map[string]string{"app.txt": "v2\n"})
	ws := s.workspaces(t, "base")
	if len(ws) != 2 {
		t.Fatalf("workspaces: %+v", ws)
	}
	if w := ws["ws-a"]; w.Owner != "agent-a" || w.Status != "active" || w.Tip != p2 || w.BaseCommit != base.Commit || w.Ahead != 2 || w.Behind != 1 {
		t.Errorf("ws-a listing %+v: want owner agent-a, active, tip %s, ahead 2, behind 1", w, p2)
	}
	if w := ws["ws-b"]; w.Owner != "agent-b" || w.Status != "active" || w.Tip != base.Commit || w.Ahead != 0 || w.Behind != 1 {
		t.Errorf("ws-b listing %+v: want owner agent-b, tip %s, ahead 0, behind 1", w, base.Commit)
	}
	_ = base2

	var att struct {
		Attempts []struct {
			Commit string `json:"commit"`
			Op     string `json:"op"`
			Key    string `json:"key"`
		} `json:"attempts"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/ws-a/attempts", rev.Secret, nil, http.StatusOK, &att)
	if len(att.Attempts) != 2 || att.Attempts[0].Commit != p2 || att.Attempts[1].Commit != p1.Commit ||
		att.Attempts[0].Op != "git.push" || att.Attempts[1].Op != "push" || att.Attempts[0].Key != "agent-a" {
		t.Errorf("ws-a attempts (want newest first: %s git.push, %s push): %+v", p2, p1.Commit, att.Attempts)
	}

	// An agent reads only its own operations, and cannot verify the chain.
	var page struct {
		Entries []e2ekit.OpEntry `json:"entries"`
	}
	s.MustJSON(t, "GET", "/api/v1/oplog?limit=1000", a.Secret, nil, http.StatusOK, &page)
	if len(page.Entries) == 0 {
		t.Errorf("agent-a sees no operations of its own")
	}
	for _, e := range page.Entries {
		if e.KeyName != "agent-a" {
			t.Errorf("agent-a sees %s's operation %s", e.KeyName, e.Op)
		}
	}
	e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/oplog?key="+b.ID, a.Secret, nil, ""), 403, "permission_denied")
	e2ekit.WantError(t, s.Call(t, "GET", "/api/v1/oplog/verify", a.Secret, nil, ""), 403, "permission_denied")

	// Abandon: only the owner (or an admin); refs stay readable; no more writes.
	e2ekit.WantError(t, s.Call(t, "DELETE", "/api/v1/repos/ws-a", b.Secret, nil, ""), 403, "permission_denied")
	var ab struct {
		Status string `json:"status"`
	}
	s.MustJSON(t, "DELETE", "/api/v1/repos/ws-a", a.Secret, nil, http.StatusOK, &ab)
	if ab.Status != "abandoned" {
		t.Errorf("DELETE ws-a answered status %q", ab.Status)
	}
	var info struct {
		Status string `json:"status"`
		Head   string `json:"head"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/ws-a", rev.Secret, nil, http.StatusOK, &info)
	if info.Status != "abandoned" || info.Head != p2 {
		t.Errorf("ws-a after abandon: %+v", info)
	}
	if got := s.Blob(t, "ws-a", "main", "git.txt"); got != "via git\n" {
		t.Errorf("abandoned workspace no longer readable: %q", got)
	}
	if d := s.clone(t, "ws-a", rev.Secret); e2ekit.Git(t, d, "rev-parse", "HEAD") != p2 {
		t.Errorf("clone of the abandoned workspace is not at its tip")
	}
	r := s.PushRaw(t, a.Secret, "ws-a", e2ekit.PushQuery("", p2), e2ekit.TarOf(t, map[string]string{"late": "x"}))
	if r.Status < 400 || r.Status >= 500 {
		t.Errorf("push to an abandoned workspace: %s", r)
	}
	writeFile(t, filepath.Join(dirA, "late.txt"), "late\n")
	e2ekit.Git(t, dirA, "add", ".")
	e2ekit.Git(t, dirA, "commit", "-q", "-m", "late")
	if out, err := e2ekit.GitCmd(t, dirA, "push", "origin", "main"); err == nil {
		t.Errorf("git push to an abandoned workspace succeeded:\n%s", out)
	}
	if got := s.Refs(t, s.AdminKey, "ws-a")["refs/heads/main"]; got != p2 {
		t.Errorf("abandoned ws-a moved to %s", got)
	}
	if w := s.workspaces(t, "base")["ws-a"]; w.Status != "abandoned" {
		t.Errorf("listing shows ws-a %q", w.Status)
	}
}

// shop is a tiny Go project: a method Foo defined in one file and used in
// two others, with a test.
var shop = map[string]string{
	"go.mod": "module example.com/shop\n\ngo 1.22\n",
	"shop/cart.go": `package shop

// Cart holds line items.
type Cart struct {
	Items []int
}

// Foo returns the cart's total.
func (c *Cart) Foo() int {
	t := 0
	for _, v := range c.Items {
		t += v
	}
	return t
}
`,
	"shop/order.go": `package shop

// Order is a checked-out cart.
type Order struct {
	Cart *Cart
}

// Amount is what the customer pays.
func (o *Order) Amount() int {
	return o.Cart.Foo()
}
`,
	"shop/report.go": `package shop

import "fmt"

// Report describes a cart.
func Report(c *Cart) string {
	return fmt.Sprintf("total %d", c.Foo())
}
`,
	"shop/cart_test.go": `package shop

import "testing"

func TestFoo(t *testing.T) {
	c := &Cart{Items: []int{1, 2, 3}}
	if c.Foo() != 6 {
		t.Fatal(c.Foo())
	}
}
`,
}

func withFiles(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}

// hashTree hashes every file under dir (path and content).
func hashTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	return out
}

// TestMergeScenario is the product scenario over HTTP: preflight writes
// nothing, materialize fast-forwards, a workspace from the old base lands
// as a real merge commit, a conflicting one is refused or written with
// markers on a side ref.
func TestMergeScenario(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	a := s.CreateKey(t, "agent-a", "agent")
	b := s.CreateKey(t, "agent-b", "agent")
	c := s.CreateKey(t, "agent-c", "agent")
	s.CreateRepo(t, "base")
	v0 := s.Push(t, s.AdminKey, "base", zeroOID, shop)

	s.fork(t, a.Secret, "base", "ws-a")
	s.fork(t, b.Secret, "base", "ws-b")
	s.fork(t, c.Secret, "base", "ws-c")

	// ws-a adds a method (at the end of cart.go) and its test file.
	cartA := shop["shop/cart.go"] + `
// Count returns the number of items.
func (c *Cart) Count() int { return len(c.Items) }
`
	pa := s.Push(t, a.Secret, "ws-a", v0.Commit, withFiles(shop, "shop/cart.go", cartA,
		"shop/count_test.go", "package shop\n\nimport \"testing\"\n\nfunc TestCount(t *testing.T) {\n\tif (&Cart{Items: []int{1}}).Count() != 1 {\n\t\tt.Fatal()\n\t}\n}\n"))
	// ws-b renames Foo to Total in cart.go and order.go and misses report.go.
	cartB := strings.Replace(strings.Replace(shop["shop/cart.go"], "Foo returns", "Total returns", 1), "Foo() int", "Total() int", 1)
	pb := s.Push(t, b.Secret, "ws-b", v0.Commit, withFiles(shop, "shop/cart.go", cartB,
		"shop/order.go", strings.Replace(shop["shop/order.go"], "Foo()", "Total()", 1)))
	// ws-c renames the same method differently: a conflict with ws-b.
	cartC := strings.Replace(shop["shop/cart.go"], "Foo() int", "Sum() int", 1)
	pc := s.Push(t, c.Secret, "ws-c", v0.Commit, withFiles(shop, "shop/cart.go", cartC))

	objects := filepath.Join(s.networkDir("base"), "objects")
	preflight := func(theirs string) mergeResult {
		t.Helper()
		beforeObjs := hashTree(t, objects)
		beforeRefs := s.Refs(t, s.AdminKey, "base")
		var m mergeResult
		s.MustJSON(t, "POST", "/api/v1/repos/base/merges", a.Secret,
			map[string]any{"ours": "main", "theirs": theirs, "preflight": true, "deep": true}, http.StatusOK, &m)
		if after := hashTree(t, objects); !reflect.DeepEqual(after, beforeObjs) {
			t.Errorf("preflight of %s changed the object store: %d files → %d", theirs, len(beforeObjs), len(after))
		}
		if after := s.Refs(t, s.AdminKey, "base"); !reflect.DeepEqual(after, beforeRefs) {
			t.Errorf("preflight of %s moved refs", theirs)
		}
		if m.Commit != "" {
			t.Errorf("preflight returned a commit %s", m.Commit)
		}
		return m
	}

	m := preflight("ws-a:main")
	if !m.Clean || !m.FastForward || m.Theirs != pa.Commit || m.Ours != v0.Commit || len(m.Conflicts) != 0 {
		t.Errorf("preflight ws-a: %+v", m)
	}
	var mat mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-a:main", "materialize": true, "deep": true}, http.StatusOK, &mat)
	if !mat.FastForward || mat.Commit != pa.Commit || s.Head(t, "base") != pa.Commit {
		t.Fatalf("materialize ws-a: %+v; main %s, want fast-forward to %s", mat, s.Head(t, "base"), pa.Commit)
	}

	// ws-b was forked from the old base; its rename merges line by line
	// with ws-a's new method: a preflight writes nothing even though a merge
	// tree is computed, and materialize writes a two-parent merge commit.
	m = preflight("ws-b:main")
	if !m.Clean || m.FastForward || m.MergeBase != v0.Commit || m.Tree == "" {
		t.Errorf("preflight ws-b: %+v", m)
	}
	if m.Tree != "" {
		if out, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("base"), "cat-file", "-e", m.Tree); err == nil {
			t.Errorf("preflight tree %s exists in the object store: preflight wrote objects %s", m.Tree, out)
		}
	}
	s.MustJSON(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-b:main", "materialize": true, "deep": true, "message": "land ws-b"}, http.StatusOK, &mat)
	if mat.FastForward || !mat.Clean || mat.Tree != m.Tree {
		t.Errorf("materialize ws-b: %+v (preflight tree %s)", mat, m.Tree)
	}
	mc := s.Commit(t, "base", "main")
	if mc.Commit != mat.Commit || !reflect.DeepEqual(mc.Parents, []string{pa.Commit, pb.Commit}) || mc.Message != "land ws-b\n" {
		t.Errorf("merge commit %+v: want parents [%s %s]", mc, pa.Commit, pb.Commit)
	}
	merged := s.Blob(t, "base", "main", "shop/cart.go")
	if !strings.Contains(merged, "func (c *Cart) Total() int") || !strings.Contains(merged, "func (c *Cart) Count() int") || strings.Contains(merged, "Foo() int") {
		t.Errorf("merged cart.go lacks one side:\n%s", merged)
	}
	if got := s.Blob(t, "base", "main", "shop/report.go"); !strings.Contains(got, "c.Foo()") {
		t.Errorf("report.go changed: %s", got)
	}
	if got := s.Blob(t, "base", "main", "shop/count_test.go"); !strings.Contains(got, "TestCount") {
		t.Errorf("count_test.go missing after the merge")
	}
	main := s.Head(t, "base")

	// ws-c renamed the same line: refused with the conflict named, main
	// untouched.
	m = preflight("ws-c:main")
	if m.Clean || len(m.Conflicts) == 0 {
		t.Errorf("preflight ws-c: %+v", m)
	}
	r := s.Call(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-c:main", "materialize": true, "deep": true}, "")
	e := e2ekit.WantError(t, r, 409, "merge_conflict")
	confs, _ := e.Error.Details["conflicts"].([]any)
	if len(confs) != 1 {
		t.Errorf("details.conflicts: %v", e.Error.Details["conflicts"])
	} else if c0, _ := confs[0].(map[string]any); c0["path"] != "shop/cart.go" || c0["kind"] != "content" {
		t.Errorf("conflict %v, want a content conflict on shop/cart.go", c0)
	}
	if got := s.Head(t, "base"); got != main {
		t.Errorf("a conflicting materialize moved main to %s", got)
	}

	s.MustJSON(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-c:main", "materialize": true, "deep": true, "on_conflict": "markers"}, http.StatusOK, &mat)
	if mat.SideRef != "refs/heads/conflicts/main" || mat.Commit == "" {
		t.Fatalf("markers merge: %+v", mat)
	}
	if got := s.Refs(t, s.AdminKey, "base")["refs/heads/conflicts/main"]; got != mat.Commit {
		t.Errorf("conflicts/main = %s, want %s", got, mat.Commit)
	}
	if got := s.Head(t, "base"); got != main {
		t.Errorf("a markers merge moved main to %s", got)
	}
	side := s.Blob(t, "base", mat.Commit, "shop/cart.go")
	// The side branch is readable by name too (its name has a slash:
	// escaped in the path, or through ?ref=).
	if log := s.Commits(t, "base", "conflicts/main", 1); len(log) != 1 || log[0].Commit != mat.Commit {
		t.Errorf("GET commits?ref=conflicts/main: %+v", log)
	}
	if r := s.Call(t, "GET", "/api/v1/repos/base/blob/conflicts%2Fmain/shop/cart.go", s.AdminKey, nil, ""); r.Status != 200 || string(r.Body) != side {
		t.Errorf("a branch whose name has a slash cannot be named in /blob/{rev}/{path}, even escaped: %s", r)
	}
	if !strings.Contains(side, "<<<<<<<") || !strings.Contains(side, ">>>>>>>") || !strings.Contains(side, "Sum() int") || !strings.Contains(side, "Total() int") {
		t.Errorf("conflicts/main cart.go lacks markers or a side:\n%s", side)
	}
	if sc := s.Commit(t, "base", mat.Commit); !reflect.DeepEqual(sc.Parents, []string{main, pc.Commit}) {
		t.Errorf("markers commit parents %v, want [%s %s]", sc.Parents, main, pc.Commit)
	}
	// Markers are diff3 style by default; "style": "merge" writes git's
	// default style (no base section); other styles are refused.
	if !strings.Contains(side, "|||||||") {
		t.Errorf("default markers lack the diff3 base section:\n%s", side)
	}
	var mat2 mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-c:main", "materialize": true, "deep": true, "on_conflict": "markers", "style": "merge"}, http.StatusOK, &mat2)
	if side2 := s.Blob(t, "base", mat2.Commit, "shop/cart.go"); strings.Contains(side2, "|||||||") || !strings.Contains(side2, "<<<<<<<") {
		t.Errorf("style merge markers:\n%s", side2)
	}
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "ws-c:main", "materialize": true, "deep": true, "on_conflict": "markers", "style": "zdiff4"}, ""), 400, "invalid_argument")
	if out, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("base"), "fsck", "--strict", "--no-dangling", "--no-progress"); err != nil {
		t.Errorf("git fsck --strict after the merges: %v\n%s", err, out)
	}
	// theirs must be in the fork network: another base repository is not.
	s.CreateRepo(t, "other")
	s.Push(t, s.AdminKey, "other", zeroOID, map[string]string{"x": "x"})
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/merges", s.AdminKey, map[string]any{"theirs": "other:main", "preflight": true}, ""), 400, "invalid_argument")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/merges", s.AdminKey, map[string]any{"theirs": "ws-a:nope", "preflight": true}, ""), 404, "not_found")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/merges", s.AdminKey, map[string]any{"theirs": "ws-a:main", "preflight": true, "materialize": true}, ""), 400, "invalid_argument")
	ops := s.Oplog(t, url.Values{"repo": {"base"}})
	var seen []string
	for _, o := range ops {
		if strings.HasPrefix(o.Op, "merge") {
			seen = append(seen, o.Op+":"+o.Result)
		}
	}
	want := []string{"merge.preflight:ok", "merge:ok", "merge.preflight:ok", "merge:ok", "merge.preflight:ok", "merge:merge_conflict", "merge.markers:ok", "merge.markers:ok"}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("merge entries in the oplog %v, want %v", seen, want)
	}
}

// TestConcurrentMaterialize: eight merges into one branch at once all land,
// none loses another's change.
func TestConcurrentMaterialize(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const n = 8
			s := startServer(t, serverOpts{Postgres: b.postgres})
			s.CreateRepo(t, "base")
			files := map[string]string{}
			for i := range n {
				files[fmt.Sprintf("f%d.txt", i)] = fmt.Sprintf("file %d\noriginal\n", i)
			}
			v0 := s.Push(t, s.AdminKey, "base", zeroOID, files)
			tips := make([]string, n)
			for i := range n {
				ws := fmt.Sprintf("ws-%d", i)
				s.fork(t, s.AdminKey, "base", ws)
				p := s.Push(t, s.AdminKey, ws, v0.Commit, withFiles(files, fmt.Sprintf("f%d.txt", i), fmt.Sprintf("file %d\nchanged by ws-%d\n", i, i)))
				tips[i] = p.Commit
			}
			results := make([]*e2ekit.Response, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i], errs[i] = s.Try("POST", "/api/v1/repos/base/merges", s.AdminKey,
						map[string]any{"ours": "main", "theirs": fmt.Sprintf("ws-%d:main", i), "materialize": true, "deep": true}, "")
				}()
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("merge ws-%d: %v", i, errs[i])
				}
				if results[i].Status != http.StatusOK {
					t.Errorf("merge ws-%d: %s", i, results[i])
				}
			}
			for i := range n {
				if got := s.Blob(t, "base", "main", fmt.Sprintf("f%d.txt", i)); got != fmt.Sprintf("file %d\nchanged by ws-%d\n", i, i) {
					t.Errorf("f%d.txt on main = %q: ws-%d's change was lost", i, got, i)
				}
			}
			log := s.Commits(t, "base", "main", 100)
			have := map[string]bool{}
			for _, c := range log {
				have[c.Commit] = true
			}
			for i, tip := range tips {
				if !have[tip] {
					t.Errorf("ws-%d's commit %s is not in main's history", i, tip)
				}
			}
			var okMerges int
			for _, e := range s.Oplog(t, url.Values{"repo": {"base"}, "op": {"merge"}}) {
				if e.Result == "ok" {
					okMerges++
				}
			}
			if out := e2ekit.Git(t, "", "ls-remote", s.GitURL("base", s.AdminKey), "refs/heads/main"); !strings.HasPrefix(out, s.Head(t, "base")) {
				t.Errorf("git ls-remote main = %q, want the store's %s", out, s.Head(t, "base"))
			}
			if okMerges != n {
				t.Errorf("oplog shows %d successful merges, want %d", okMerges, n)
			}
			if v := s.Verify(t); !v.OK {
				t.Errorf("oplog verify: %+v", v)
			}
		})
	}
}

// TestSync: a workspace takes in its base's new commits; conflicts are
// refused and leave the workspace as it was.
func TestSync(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	a := s.CreateKey(t, "agent-a", "agent")
	b := s.CreateKey(t, "agent-b", "agent")
	s.CreateRepo(t, "base")
	files := map[string]string{"lib.txt": "lib v1\n", "app.txt": "app v1\n"}
	v0 := s.Push(t, s.AdminKey, "base", zeroOID, files)
	s.fork(t, a.Secret, "base", "ws")

	v1 := s.Push(t, s.AdminKey, "base", v0.Commit, withFiles(files, "lib.txt", "lib v2 from base\n"))
	w1 := s.Push(t, a.Secret, "ws", v0.Commit, withFiles(files, "app.txt", "app v2 from the agent\n"))
	if w := s.workspaces(t, "base")["ws"]; w.Behind != 1 || w.Ahead != 1 {
		t.Errorf("before sync ws is ahead %d behind %d, want 1/1", w.Ahead, w.Behind)
	}

	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/ws/sync", b.Secret, map[string]string{}, ""), 403, "permission_denied")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/ws/sync", a.Secret, map[string]string{"expect_oid": v0.Commit}, ""), 409, "ref_conflict")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/base/sync", s.AdminKey, nil, ""), 400, "invalid_argument")

	var m mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/ws/sync", a.Secret, map[string]string{"expect_oid": w1.Commit}, http.StatusOK, &m)
	if !m.Clean || m.Commit == "" {
		t.Fatalf("sync: %+v", m)
	}
	if got := s.Refs(t, a.Secret, "ws")["refs/heads/main"]; got != m.Commit {
		t.Errorf("ws main %s, want the sync commit %s", got, m.Commit)
	}
	if c := s.Commit(t, "ws", m.Commit); !reflect.DeepEqual(c.Parents, []string{w1.Commit, v1.Commit}) {
		t.Errorf("sync commit parents %v, want [%s %s]", c.Parents, w1.Commit, v1.Commit)
	}
	if s.Blob(t, "ws", "main", "lib.txt") != "lib v2 from base\n" || s.Blob(t, "ws", "main", "app.txt") != "app v2 from the agent\n" {
		t.Errorf("after sync ws lacks one side")
	}
	if w := s.workspaces(t, "base")["ws"]; w.Behind != 0 || w.Ahead != 2 {
		t.Errorf("after sync ws is ahead %d behind %d, want 2/0", w.Ahead, w.Behind)
	}
	// Syncing again is a no-op.
	s.MustJSON(t, "POST", "/api/v1/repos/ws/sync", a.Secret, nil, http.StatusOK, &m)
	if !m.UpToDate || s.Refs(t, a.Secret, "ws")["refs/heads/main"] != m.Commit {
		t.Errorf("second sync: %+v", m)
	}
	synced := m.Commit

	// Both sides change the same line: 409, nothing moves.
	s.Push(t, s.AdminKey, "base", v1.Commit, withFiles(files, "lib.txt", "lib v2 from base\n", "app.txt", "app v3 from base\n"))
	w2 := s.Push(t, a.Secret, "ws", synced, withFiles(files, "lib.txt", "lib v2 from base\n", "app.txt", "app v3 from the agent\n"))
	r := s.Call(t, "POST", "/api/v1/repos/ws/sync", a.Secret, map[string]string{}, "")
	e := e2ekit.WantError(t, r, 409, "merge_conflict")
	if confs, _ := e.Error.Details["conflicts"].([]any); len(confs) != 1 || confs[0].(map[string]any)["path"] != "app.txt" {
		t.Errorf("conflicts %v, want app.txt", e.Error.Details["conflicts"])
	}
	if got := s.Refs(t, a.Secret, "ws")["refs/heads/main"]; got != w2.Commit {
		t.Errorf("a conflicting sync moved ws main to %s", got)
	}
}

// TestDefaultBranchAndForkRaces: a repository's default branch is what
// pushes, clones and forks use; racing forks of one name make one
// workspace.
func TestDefaultBranchAndForkRaces(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.MustJSON(t, "POST", "/api/v1/repos", s.AdminKey, map[string]string{"name": "trunky", "default_branch": "trunk"}, http.StatusCreated, nil)
	r := s.PushRaw(t, s.AdminKey, "trunky", e2ekit.PushQuery("", zeroOID), e2ekit.TarOf(t, map[string]string{"t.txt": "trunk\n"}))
	var p e2ekit.PushResult
	r.Decode(t, &p)
	if r.Status != http.StatusCreated || p.Branch != "trunk" {
		t.Fatalf("push without a branch: %s", r)
	}
	if refs := s.Refs(t, s.AdminKey, "trunky"); refs["refs/heads/trunk"] != p.Commit || len(refs) != 1 {
		t.Errorf("refs %v, want only trunk", refs)
	}
	dir := s.clone(t, "trunky", s.AdminKey)
	if b := e2ekit.Git(t, dir, "rev-parse", "--abbrev-ref", "HEAD"); b != "trunk" {
		t.Errorf("clone checked out %q, want trunk (the mirrored HEAD)", b)
	}

	const n = 8
	keys := make([]e2ekit.Key, n)
	for i := range n {
		keys[i] = s.CreateKey(t, fmt.Sprintf("agent-%d", i), "agent")
	}
	status := make([]*e2ekit.Response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status[i], _ = s.Try("POST", "/api/v1/repos/trunky/forks", keys[i].Secret, map[string]string{"name": "contested"}, "")
		}()
	}
	wg.Wait()
	winner := -1
	for i, r := range status {
		switch {
		case r == nil:
			t.Errorf("fork %d: no response", i)
		case r.Status == http.StatusCreated:
			if winner >= 0 {
				t.Errorf("two forks named contested were created (%d and %d)", winner, i)
			}
			winner = i
		case r.Status != http.StatusConflict:
			t.Errorf("fork %d: %s", i, r)
		}
	}
	if winner < 0 {
		t.Fatalf("no fork won")
	}
	ws := s.workspaces(t, "trunky")
	if len(ws) != 1 || ws["contested"].Owner != keys[winner].Name {
		t.Errorf("workspaces %+v, want one owned by %s", ws, keys[winner].Name)
	}
	var info struct {
		DefaultBranch string `json:"default_branch"`
		Head          string `json:"head"`
	}
	s.MustJSON(t, "GET", "/api/v1/repos/contested", s.AdminKey, nil, http.StatusOK, &info)
	if info.DefaultBranch != "trunk" || info.Head != p.Commit {
		t.Errorf("workspace %+v, want default branch trunk at %s", info, p.Commit)
	}
	wdir := s.clone(t, "contested", keys[winner].Secret)
	if b := e2ekit.Git(t, wdir, "rev-parse", "--abbrev-ref", "HEAD"); b != "trunk" {
		t.Errorf("workspace clone checked out %q", b)
	}
	var forks int
	for _, e := range s.Oplog(t, url.Values{"op": {"fork"}}) {
		if e.Result == "ok" {
			forks++
		}
	}
	if forks != 1 {
		t.Errorf("%d fork entries in the oplog, want 1", forks)
	}
}
