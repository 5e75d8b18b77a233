package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestMergeRenames: a file renamed on one side and edited on the other
// merges cleanly at its new path (renames on by default); with "renames":
// false it is a modify-delete as before; a rename against a delete is a
// rename/delete conflict naming both paths, also when materialized with
// markers.
func TestMergeRenames(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	var lines strings.Builder
	for i := 0; i < 20; i++ {
		lines.WriteString("line " + string(rune('a'+i)) + "\n")
	}
	body := lines.String()
	setup := func(repo string, ours, theirs []e2ekit.TarEntry) {
		s.CreateRepo(t, repo)
		v0 := s.PushRaw(t, s.AdminKey, repo, e2ekit.PushQuery("", zeroOID), e2ekit.TarEntries(t, e2ekit.TarEntry{Name: "f.txt", Body: body}, e2ekit.TarEntry{Name: "keep.txt", Body: "keep\n"}))
		var b e2ekit.PushResult
		v0.Decode(t, &b)
		s.fork(t, s.AdminKey, repo, repo+"-ws")
		for r, es := range map[string][]e2ekit.TarEntry{repo: ours, repo + "-ws": theirs} {
			if res := s.PushRaw(t, s.AdminKey, r, e2ekit.PushQuery("", b.Commit), e2ekit.TarEntries(t, es...)); res.Status != http.StatusCreated {
				t.Fatalf("push %s: %s", r, res)
			}
		}
	}
	keep := e2ekit.TarEntry{Name: "keep.txt", Body: "keep\n"}
	type conflict struct {
		Path    string   `json:"path"`
		Kind    string   `json:"kind"`
		OldPath string   `json:"old_path"`
		Paths   []string `json:"paths"`
	}
	var m struct {
		mergeResult
		Conflicts []conflict `json:"conflicts"`
	}
	preflight := func(repo string, extra map[string]any) {
		req := map[string]any{"ours": "main", "theirs": repo + "-ws:main", "preflight": true, "deep": true}
		for k, v := range extra {
			req[k] = v
		}
		m.Conflicts = nil
		s.MustJSON(t, "POST", "/api/v1/repos/"+repo+"/merges", s.AdminKey, req, http.StatusOK, &m)
	}

	// rename/modify
	setup("rnmod", []e2ekit.TarEntry{{Name: "g.txt", Body: body}, keep},
		[]e2ekit.TarEntry{{Name: "f.txt", Body: strings.Replace(body, "line c", "line C", 1)}, keep})
	preflight("rnmod", nil)
	if !m.Clean {
		t.Fatalf("rename/modify: want clean, got %+v", m.Conflicts)
	}
	tree := m.Tree
	preflight("rnmod", map[string]any{"renames": false})
	if m.Clean || len(m.Conflicts) != 1 || m.Conflicts[0].Path != "f.txt" || m.Conflicts[0].Kind != "modify-delete" {
		t.Errorf("renames false: want a modify-delete at f.txt, got clean=%v %+v", m.Clean, m.Conflicts)
	}
	var mat mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/rnmod/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "rnmod-ws:main", "materialize": true, "deep": true}, http.StatusOK, &mat)
	if got := s.Commit(t, "rnmod", "main").Tree; got != tree {
		t.Errorf("materialized tree %s, preflight %s", got, tree)
	}

	// rename/delete
	setup("rndel", []e2ekit.TarEntry{{Name: "g.txt", Body: body}, keep}, []e2ekit.TarEntry{keep})
	preflight("rndel", nil)
	if m.Clean || len(m.Conflicts) != 1 {
		t.Fatalf("rename/delete: got clean=%v %+v", m.Clean, m.Conflicts)
	}
	if c := m.Conflicts[0]; c.Kind != "rename/delete" || c.Path != "g.txt" || c.OldPath != "f.txt" || strings.Join(c.Paths, ",") != "f.txt,g.txt" {
		t.Errorf("rename/delete conflict: %+v", c)
	}
	var mk mergeResult
	s.MustJSON(t, "POST", "/api/v1/repos/rndel/merges", s.AdminKey,
		map[string]any{"ours": "main", "theirs": "rndel-ws:main", "materialize": true, "deep": true, "on_conflict": "markers"}, http.StatusOK, &mk)
	if mk.Clean || mk.SideRef == "" || len(mk.Conflicts) != 1 || mk.Conflicts[0].Path != "g.txt" {
		t.Errorf("materialize with markers: %+v", mk)
	}
}
