package e2e

import (
	"archive/tar"
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestConflictKinds: a preflight reports each kind of conflict the design
// names, with the path, for a base, an "ours" and a "theirs" tree.
func TestConflictKinds(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	lines := "one\ntwo\nthree\nfour\nfive\nsix\nseven\n"
	base := []e2ekit.TarEntry{{Name: "f.txt", Body: lines}, {Name: "keep.txt", Body: "keep\n"}}
	with := func(es []e2ekit.TarEntry, change ...e2ekit.TarEntry) []e2ekit.TarEntry {
		out := []e2ekit.TarEntry{}
		drop := map[string]bool{}
		for _, c := range change {
			drop[c.Name] = true
		}
		for _, e := range es {
			if !drop[e.Name] {
				out = append(out, e)
			}
		}
		for _, c := range change {
			if c.Type != 'D' {
				out = append(out, c)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return out
	}
	del := func(name string) e2ekit.TarEntry { return e2ekit.TarEntry{Name: name, Type: 'D'} }
	cases := []struct {
		name   string
		ours   []e2ekit.TarEntry
		theirs []e2ekit.TarEntry
		deep   bool
		clean  bool
		kinds  map[string]string // path → kind
	}{
		{"same line", with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "two", "TWO", 1)}),
			with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "two", "2", 1)}), true, false, map[string]string{"f.txt": "content"}},
		{"different lines, deep", with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "two", "TWO", 1)}),
			with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "six", "SIX", 1)}), true, true, nil},
		{"different lines, not deep", with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "two", "TWO", 1)}),
			with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "six", "SIX", 1)}), false, false, map[string]string{"f.txt": "content"}},
		{"add-add", with(base, e2ekit.TarEntry{Name: "new.txt", Body: "ours\n"}), with(base, e2ekit.TarEntry{Name: "new.txt", Body: "theirs\n"}), true, false,
			map[string]string{"new.txt": "add-add"}},
		{"same addition both sides", with(base, e2ekit.TarEntry{Name: "new.txt", Body: "same\n"}),
			with(base, e2ekit.TarEntry{Name: "new.txt", Body: "same\n"}, e2ekit.TarEntry{Name: "other.txt", Body: "other\n"}), true, true, nil},
		{"modify-delete", with(base, e2ekit.TarEntry{Name: "f.txt", Body: "changed\n"}), with(base, del("f.txt")), true, false,
			map[string]string{"f.txt": "modify-delete"}},
		{"delete-modify", with(base, del("f.txt")), with(base, e2ekit.TarEntry{Name: "f.txt", Body: "changed\n"}), true, false,
			map[string]string{"f.txt": "modify-delete"}},
		{"file becomes symlink vs edit", with(base, e2ekit.TarEntry{Name: "f.txt", Type: tar.TypeSymlink, Linkname: "keep.txt"}),
			with(base, e2ekit.TarEntry{Name: "f.txt", Body: "changed\n"}), true, false, map[string]string{"f.txt": "type"}},
		{"mode vs content", with(base, e2ekit.TarEntry{Name: "f.txt", Body: lines, Mode: 0o755}),
			with(base, e2ekit.TarEntry{Name: "f.txt", Body: strings.Replace(lines, "six", "SIX", 1)}), true, true, nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo := fmt.Sprintf("kinds%d", i)
			s.CreateRepo(t, repo)
			v0 := s.PushRaw(t, s.AdminKey, repo, e2ekit.PushQuery("", zeroOID), e2ekit.TarEntries(t, base...))
			var b e2ekit.PushResult
			v0.Decode(t, &b)
			// theirs lives in a workspace forked at the base commit.
			s.fork(t, s.AdminKey, repo, repo+"-ws")
			push := func(repo string, es []e2ekit.TarEntry) {
				r := s.PushRaw(t, s.AdminKey, repo, e2ekit.PushQuery("", b.Commit), e2ekit.TarEntries(t, es...))
				if r.Status != http.StatusCreated {
					t.Fatalf("push %s: %s", repo, r)
				}
			}
			push(repo, c.ours)
			push(repo+"-ws", c.theirs)
			var m struct {
				mergeResult
				Conflicts []struct {
					Path string `json:"path"`
					Kind string `json:"kind"`
				} `json:"conflicts"`
			}
			s.MustJSON(t, "POST", "/api/v1/repos/"+repo+"/merges", s.AdminKey,
				map[string]any{"ours": "main", "theirs": repo + "-ws:main", "preflight": true, "deep": c.deep}, http.StatusOK, &m)
			got := map[string]string{}
			for _, cf := range m.Conflicts {
				got[cf.Path] = cf.Kind
			}
			if m.Clean != c.clean || (len(c.kinds) > 0 || len(got) > 0) && !reflect.DeepEqual(got, c.kinds) {
				t.Errorf("preflight: clean=%v conflicts=%v, want clean=%v conflicts=%v", m.Clean, got, c.clean, c.kinds)
			}
			if m.MergeBase != b.Commit {
				t.Errorf("merge base %s, want %s", m.MergeBase, b.Commit)
			}
			// A clean preflight's tree is what materialize writes.
			if c.clean {
				var mat mergeResult
				s.MustJSON(t, "POST", "/api/v1/repos/"+repo+"/merges", s.AdminKey,
					map[string]any{"ours": "main", "theirs": repo + "-ws:main", "materialize": true, "deep": c.deep}, http.StatusOK, &mat)
				if mat.Tree != m.Tree || s.Commit(t, repo, "main").Tree != m.Tree {
					t.Errorf("materialized tree %s, preflight said %s", mat.Tree, m.Tree)
				}
			}
		})
	}
}

// TestMergeModes: squash writes one single-parent commit with the merged
// tree; fast_forward refuses diverged histories; merging twice is a no-op.
func TestMergeModes(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "modes")
	v0 := s.Push(t, s.AdminKey, "modes", zeroOID, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	s.fork(t, s.AdminKey, "modes", "ws")
	w := s.Push(t, s.AdminKey, "ws", v0.Commit, map[string]string{"a.txt": "a from ws\n", "b.txt": "b\n"})
	v1 := s.Push(t, s.AdminKey, "modes", v0.Commit, map[string]string{"a.txt": "a\n", "b.txt": "b from base\n"})

	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": "ws:main", "materialize": true, "mode": "fast_forward"}, ""), 400, "invalid_argument")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": "ws:main", "materialize": true, "mode": "rebase"}, ""), 400, "invalid_argument")
	e2ekit.WantError(t, s.Call(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": "ws:main", "materialize": true, "expect_oid": v0.Commit}, ""), 409, "ref_conflict")
	if got := s.Head(t, "modes"); got != v1.Commit {
		t.Fatalf("refused merges moved main to %s", got)
	}

	var m mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": "ws:main", "materialize": true, "mode": "squash", "expect_oid": v1.Commit}, http.StatusOK, &m)
	c := s.Commit(t, "modes", "main")
	if c.Commit != m.Commit || !reflect.DeepEqual(c.Parents, []string{v1.Commit}) {
		t.Errorf("squash commit %+v, want one parent %s", c, v1.Commit)
	}
	if s.Blob(t, "modes", "main", "a.txt") != "a from ws\n" || s.Blob(t, "modes", "main", "b.txt") != "b from base\n" {
		t.Errorf("squash tree lacks a side")
	}
	if got := s.Refs(t, s.AdminKey, "ws")["refs/heads/main"]; got != w.Commit {
		t.Errorf("merging moved the workspace to %s", got)
	}
	// The workspace's commit is not an ancestor after a squash: merging
	// again recomputes from the old base and changes nothing.
	s.MustJSON(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": "ws:main", "preflight": true}, http.StatusOK, &m)
	if !m.Clean || m.Tree != c.Tree {
		t.Errorf("preflight after squash: %+v, want clean with the same tree %s", m, c.Tree)
	}
	// A plain merge of something already contained is up to date.
	s.MustJSON(t, "POST", "/api/v1/repos/modes/merges", s.AdminKey,
		map[string]any{"theirs": v1.Commit, "materialize": true}, http.StatusOK, &m)
	if !m.UpToDate || m.Commit != c.Commit || s.Head(t, "modes") != c.Commit {
		t.Errorf("merging an ancestor: %+v", m)
	}
}
