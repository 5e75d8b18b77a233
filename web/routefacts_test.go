package web_test

import (
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/pb33f/libopenapi"

	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/web"
)

// TestRouteFacts: the route facts table (web/routefacts.go) is the whole
// API. Every route of the gin router (but the HTML UI) is a row, every row
// is a route, every row is an operation of api/openapi.yaml and back; a
// write's success status (the one an answer its log entry carries is
// stored and replayed with) is a 2xx answer the document gives it; and
// the facts agree with each other.
func TestRouteFacts(t *testing.T) {
	facts, distinct := web.RouteFacts()
	if len(facts) < 60 {
		t.Fatalf("only %d rows in the route table", len(facts))
	}
	if distinct != len(facts) {
		t.Errorf("the route table has %d rows but %d distinct routes: a route is listed twice", len(facts), distinct)
	}
	table := map[string]web.RouteFact{}
	for _, f := range facts {
		table[f.Key] = f
	}

	f := mustServer(t)
	e := f.handler.(*gin.Engine)
	routes := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Path == "/ui" || strings.HasPrefix(r.Path, "/ui/") {
			continue
		}
		k := r.Method + " " + r.Path
		routes[k] = true
		if _, ok := table[k]; !ok {
			t.Errorf("route %s is in the router but not in the route table", k)
		}
	}
	for k := range table {
		if !routes[k] {
			t.Errorf("route table row %s is not a route of the router", k)
		}
	}

	// The OpenAPI document: the same operations, and each write's success
	// status.
	doc, err := libopenapi.NewDocument(api.YAML)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]map[int]bool{} // key (gin form) → its 2xx answers
	for p, item := range m.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			ok := map[int]bool{}
			if op.Responses != nil && op.Responses.Codes != nil {
				for code := range op.Responses.Codes.KeysFromOldest() {
					if n, err := strconv.Atoi(code); err == nil && n >= 200 && n < 300 {
						ok[n] = true
					}
				}
			}
			documented[strings.ToUpper(method)+" "+openAPIToGin(p)] = ok
		}
	}
	var keys []string
	for k := range table {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := table[k]
		codes, ok := documented[k]
		if !ok {
			t.Errorf("route table row %s is not an operation of api/openapi.yaml", k)
			continue
		}
		if r.Group == "api" && r.Write && r.Idempotency != "none" && len(codes) > 0 && !codes[r.SuccessStatus] {
			t.Errorf("%s: the route table's success status is %d, not a 2xx answer of api/openapi.yaml (%v): a replayed answer would carry the wrong status", k, r.SuccessStatus, codes)
		}
		if !r.HasHandler && r.Group != "mcp" {
			t.Errorf("%s: no handler", k)
		}
		if r.Idempotency == "one_tx" && (!r.Write || r.Group != "api") {
			t.Errorf("%s: one-transaction idempotency on a route that is not an /api/v1 write", k)
		}
		if r.UploadSlot && !r.UploadBody {
			t.Errorf("%s: holds an upload slot but has the JSON body limit", k)
		}
		if r.Group == "public" && (r.PreAuth || r.UploadSlot || r.Write) {
			t.Errorf("%s: a public route with a write, a slot or an authorization rule", k)
		}
	}
	for k := range documented {
		if _, ok := table[k]; !ok {
			t.Errorf("operation %s of api/openapi.yaml is not in the route table", k)
		}
	}
}

// openAPIToGin turns /repos/{repo}/blob/{rev}/{path} into gin's pattern.
func openAPIToGin(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			name := s[1 : len(s)-1]
			if name == "path" && i == len(parts)-1 {
				parts[i] = "*" + name
			} else {
				parts[i] = ":" + name
			}
		}
	}
	return strings.Join(parts, "/")
}
