package web_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"sigs.k8s.io/yaml"

	"github.com/lockstep-hq/lockstep/api"
)

var ginParam = regexp.MustCompile(`[:*]([A-Za-z_]+)`)

// documentedOperations returns "METHOD /path" for every operation of the
// OpenAPI document.
func documentedOperations(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.YAML)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("build the OpenAPI model: %v", err)
	}
	out := map[string]bool{}
	for p, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			out[strings.ToUpper(method)+" "+p] = true
		}
	}
	return out
}

// TestOpenAPIMatchesRouter is the drift test: every route of the gin
// router is an operation of api/openapi.yaml and every operation is a
// route. The reviewers' HTML UI under /ui/ is not part of the API and is
// left out.
func TestOpenAPIMatchesRouter(t *testing.T) {
	f := mustServer(t)
	e, ok := f.handler.(*gin.Engine)
	if !ok {
		t.Fatalf("Handler() is %T, want *gin.Engine", f.handler)
	}
	routes := map[string]bool{}
	for _, r := range e.Routes() {
		if r.Path == "/ui" || strings.HasPrefix(r.Path, "/ui/") {
			continue
		}
		routes[r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}")] = true
	}
	if len(routes) < 40 {
		t.Fatalf("only %d routes in the router: the route listing is broken", len(routes))
	}
	doc := documentedOperations(t)
	var missing, extra []string
	for r := range routes {
		if !doc[r] {
			missing = append(missing, r)
		}
	}
	for d := range doc {
		if !routes[d] {
			extra = append(extra, d)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("route %s is in the router but not in api/openapi.yaml", r)
	}
	for _, d := range extra {
		t.Errorf("operation %s is in api/openapi.yaml but not in the router", d)
	}
}

// TestOpenAPIDocumentValid checks the document against the OpenAPI 3.1
// schema, and that every path parameter is declared.
func TestOpenAPIDocumentValid(t *testing.T) {
	doc, err := libopenapi.NewDocument(api.YAML)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s (line %d)", e.Message, e.Reason, e.SpecLine)
		}
	}
}

// TestOpenAPIServed: GET /api/v1/openapi.json needs no key and answers the
// embedded document as JSON.
func TestOpenAPIServed(t *testing.T) {
	f := mustServer(t)
	resp, err := http.Get(f.srv.URL + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET openapi.json: %d %s %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	want, err := yaml.YAMLToJSON(api.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want) {
		t.Fatalf("served document differs from api.YAML converted to JSON: %.200s", body)
	}
	if !bytes.Contains(body, []byte(`"openapi":"3.1.0"`)) {
		t.Fatalf("not an OpenAPI 3.1 document: %.200s", body)
	}
}
