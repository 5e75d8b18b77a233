package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"

	"github.com/lockstep-hq/lockstep/api"
)

// Every list route (every GET of api/openapi.yaml with a `limit`
// parameter) answers 400 invalid_argument for a limit outside 1 to its
// documented maximum, and takes the maximum itself (issue 21, item 18:
// commits, attempts and checkpoints answered a limit over 1000 with 50
// entries).
func TestListLimitBounds(t *testing.T) {
	f := mustServer(t)
	if code, m, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"lim"}`); code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	if code, m, _ := f.do(t, "POST", "/api/v1/repos/lim/forks", f.agent, `{"name":"lim-ws"}`); code != http.StatusCreated {
		t.Fatalf("fork: %d %v", code, m)
	}
	doc, err := libopenapi.NewDocument(api.YAML)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	routes := 0
	for p, item := range m.Model.Paths.PathItems.FromOldest() {
		op := item.Get
		if op == nil {
			continue
		}
		max := -1.0
		for _, prm := range op.Parameters {
			if prm.Name == "limit" && prm.In == "query" {
				if s := prm.Schema.Schema(); s != nil && s.Maximum != nil {
					max = *s.Maximum
				} else {
					t.Errorf("GET %s: its limit parameter documents no maximum", p)
				}
			}
		}
		if max < 0 {
			continue
		}
		routes++
		path := strings.NewReplacer("{repo}", "lim-ws", "{id}", "hook_none").Replace(p)
		for _, bad := range []string{fmt.Sprint(int(max) + 1), "5000", "0", "-1", "x"} {
			code, body, _ := f.do(t, "GET", path+"?limit="+bad, f.admin, "")
			if code != http.StatusBadRequest || errCode(body) != "invalid_argument" {
				t.Errorf("GET %s?limit=%s: %d %v, want 400 invalid_argument", path, bad, code, body)
			}
		}
		if code, body, _ := f.do(t, "GET", fmt.Sprintf("%s?limit=%d", path, int(max)), f.admin, ""); code == http.StatusBadRequest {
			t.Errorf("GET %s?limit=%d (the documented maximum): %d %v", path, int(max), code, body)
		}
	}
	// oplog, workspaces, attempts, commits, deliveries, checkpoints.
	if routes < 6 {
		t.Fatalf("only %d list routes with a limit in api/openapi.yaml", routes)
	}
}
