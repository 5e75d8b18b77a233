// Package typescript runs the TypeScript client's tests (test/*.test.ts:
// the seed scenario against a real `lockstep serve` started by the
// end-to-end harness, and the retry rules against a stand-in) and checks
// that its types, generated from the current api/openapi.yaml with
// openapi-typescript's default flags, compile with `tsc --strict`, and
// that `npm pack` works offline. The tests skip only when node or npm is
// missing.
package typescript

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

func TestMain(m *testing.M) {
	os.Exit(e2ekit.Main(m, e2ekit.Suite{Name: "typescript", Tools: []string{"git"}}))
}

var (
	buildOnce sync.Once
	buildErr  error
)

// built installs (npm ci) and builds (openapi-typescript + tsc --strict) a
// copy of the package, once.
func built(t *testing.T) string {
	t.Helper()
	dir := e2ekit.NPMPackage(t, ".")
	buildOnce.Do(func() {
		if out, err := e2ekit.RunNPM(dir, []string{"LOCKSTEP_OPENAPI=" + openapiPath(t)}, "run", "build"); err != nil {
			buildErr = fmt.Errorf("npm run build (openapi-typescript, then tsc --strict): %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return dir
}

// openapiPath is the repository's api/openapi.yaml: the types are generated
// from the current document.
func openapiPath(t *testing.T) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTypeScriptClient builds the client and runs its tests against a real
// server: every test must pass and none may be skipped.
func TestTypeScriptClient(t *testing.T) {
	dir := built(t)
	srv := e2ekit.StartServer(t, e2ekit.ServerOpts{})
	out := e2ekit.NPM(t, dir, []string{"LOCKSTEP_URL=" + srv.URL, "LOCKSTEP_KEY=" + srv.AdminKey}, "test")
	t.Logf("%s", out)
	for _, want := range []string{"# fail 0", "# skipped 0", "# cancelled 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("npm test output lacks %q", want)
		}
	}
	if m := regexp.MustCompile(`# pass (\d+)`).FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("npm test ran no passing test")
	}
}

// TestNPMPackOffline packs the built package with the registry
// unreachable and checks the tarball holds the compiled client and its
// generated types.
func TestNPMPackOffline(t *testing.T) {
	dir := built(t)
	dest := t.TempDir()
	e2ekit.NPM(t, dir, []string{"LOCKSTEP_OPENAPI=" + openapiPath(t), "npm_config_registry=http://127.0.0.1:9/"},
		"pack", "--offline", "--pack-destination", dest)
	tgz, _ := filepath.Glob(filepath.Join(dest, "*.tgz"))
	if len(tgz) != 1 {
		t.Fatalf("npm pack made %d tarballs, want 1", len(tgz))
	}
	f, err := os.Open(tgz[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	have := map[string]bool{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		have[h.Name] = true
	}
	for _, want := range []string{"package/package.json", "package/dist/src/index.js", "package/dist/src/index.d.ts",
		"package/dist/src/push.js", "package/src/schema.d.ts"} {
		if !have[want] {
			t.Errorf("the tarball lacks %s (has %v)", want, have)
		}
	}
}
