package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// serverOnly are packages the client build (`go build ./cmd/lockstep`)
// must neither link nor initialise: the server's own packages and the
// heavy dependencies of the server build.
var serverOnly = []string{
	"github.com/lockstep-hq/lockstep/web",
	"github.com/lockstep-hq/lockstep/sqlstore",
	"github.com/lockstep-hq/lockstep/repositories",
	"github.com/lockstep-hq/lockstep/workspaces",
	"github.com/lockstep-hq/lockstep/gate",
	"github.com/lockstep-hq/lockstep/dbbranch",
	"github.com/lockstep-hq/lockstep/replica",
	"github.com/lockstep-hq/lockstep/agentmcp",
	"github.com/lockstep-hq/lockstep/bench",
	"github.com/lockstep-hq/lockstep/telemetry",
	"github.com/gin-gonic/gin",
	"github.com/jackc/pgx/v5",
	"github.com/minio/minio-go/v7",
	"github.com/prometheus/client_golang/prometheus",
	"go.opentelemetry.io/otel/sdk/trace",
	"github.com/modelcontextprotocol/go-sdk/mcp",
	"github.com/redis/go-redis/v9",
	"modernc.org/sqlite",
	"google.golang.org/grpc",
}

// startupHeavy are packages the client build must not link because their
// initialisers cost start-up time in every client command (issue #26 row
// 1; measured with GODEBUG=inittrace=1, see docs/benchmarks.md), each
// with what it came in through and whether the server build still links
// it (then the name is checked to be real there).
var startupHeavy = []struct {
	pkg, why string
	server   bool
}{
	{"encoding/gob", "go-git plumbing/object → storage → config → gcfg; worktree encodes its trees itself", true},
	{"github.com/go-git/go-git/v5/plumbing/object", "worktree's tree encoding", true},
	{"github.com/go-git/go-git/v5/config", "go-git plumbing/object", true},
	{"github.com/go-git/gcfg", "go-git config", true},
	{"github.com/ProtonMail/go-crypto/openpgp", "go-git plumbing/object (commit signatures)", true},
	{"sigs.k8s.io/yaml", "api's YAML→JSON of the OpenAPI document, done in web now", true},
	{"go.yaml.in/yaml/v2", "sigs.k8s.io/yaml", true},
	{"github.com/elazarl/goproxy", "egress, `lockstep run`'s proxy: it parses its bundled CA at init; the proxy runs as lockstep-egress (or lockstep-server __egress)", true},
	{"github.com/lockstep-hq/lockstep/egress", "the egress proxy, run as a child process (egressproc)", true},
}

func goListDeps(t *testing.T, args ...string) map[string]bool {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %v: %v\n%s", args, err, out)
	}
	deps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		deps[d] = true
	}
	return deps
}

// TestClientBuildLinksNoServer: the client build links none of the
// server's packages or heavy dependencies (every linked package's
// initialiser runs before main in every client command), nor the
// packages of startupHeavy; the server build links all of serverOnly (so
// the list names real packages).
func TestClientBuildLinksNoServer(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	const pkg = "github.com/lockstep-hq/lockstep/cmd/lockstep"
	client := goListDeps(t, pkg)
	server := goListDeps(t, "-tags", "lockstep_server", pkg)
	if !client["github.com/lockstep-hq/lockstep/client"] || !client["github.com/lockstep-hq/lockstep/worktree"] {
		t.Fatalf("the client build does not link client and worktree: %d packages", len(client))
	}
	for _, p := range serverOnly {
		if client[p] {
			t.Errorf("the client build links %s: keep it in files with //go:build lockstep_server", p)
		}
		if !server[p] {
			t.Errorf("the server build does not link %s: update serverOnly", p)
		}
	}
	for _, h := range startupHeavy {
		if client[h.pkg] {
			t.Errorf("the client build links %s (%s): its initialisers run at every client start", h.pkg, h.why)
		}
		if h.server && !server[h.pkg] {
			t.Errorf("the server build does not link %s: update startupHeavy", h.pkg)
		}
	}
	// The third build, lockstep-egress: the proxy and the client, none
	// of the server.
	egress := goListDeps(t, "github.com/lockstep-hq/lockstep/cmd/lockstep-egress")
	if !egress["github.com/elazarl/goproxy"] || !egress["github.com/lockstep-hq/lockstep/egress/egressproc"] {
		t.Errorf("lockstep-egress does not link the proxy: %d packages", len(egress))
	}
	for _, p := range serverOnly {
		if egress[p] {
			t.Errorf("lockstep-egress links %s: it is the proxy and a client, nothing of the server", p)
		}
	}
}

// TestFindServerFromEnv: LOCKSTEP_SERVER_BINARY names the server build;
// a missing file is a clear error.
func TestFindServerFromEnv(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "srv")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := func(v string) *env {
		return &env{getenv: func(k string) string {
			if k == "LOCKSTEP_SERVER_BINARY" {
				return v
			}
			return ""
		}}
	}
	if got, err := findServer(env(bin)); err != nil || got != bin {
		t.Errorf("findServer = %q, %v; want %q", got, err, bin)
	}
	_, err := findServer(env(filepath.Join(dir, "missing")))
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), "LOCKSTEP_SERVER_BINARY") {
		t.Errorf("missing server binary: %v", err)
	}
}

// TestModuleRoot: from inside this module's source it finds the root
// (the directory with go.mod), from elsewhere nothing.
func TestModuleRoot(t *testing.T) {
	wd, _ := os.Getwd()
	want, _ := filepath.Abs(filepath.Join(wd, "..", ".."))
	if got := moduleRoot(); got != want {
		t.Errorf("moduleRoot() = %q, want %q", got, want)
	}
	t.Chdir(t.TempDir())
	if got := moduleRoot(); got != "" {
		t.Errorf("moduleRoot() outside the module = %q, want \"\"", got)
	}
}

// TestClientBuildRunsServer builds the client and runs it as a user
// does: version answers in process; a server command without a server
// build says what to install (exit 6); with one (here a script standing
// for it) the command runs it with its arguments, in place of the client,
// telling it which client build started it.
func TestClientBuildRunsServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the client")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "lockstep")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lockstep: %v\n%s", err, out)
	}
	work := t.TempDir() // outside the module: no build from source
	run := func(extraEnv []string, args ...string) (string, int) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = work
		cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + work}, extraEnv...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%v: %v", args, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := run(nil, "version"); code != 0 || !strings.Contains(out, "lockstep") {
		t.Errorf("version: exit %d\n%s", code, out)
	}
	out, code := run(nil, "serve", "--addr", "127.0.0.1:0")
	if code != 6 || !strings.Contains(out, "lockstep-server") || !strings.Contains(out, "go build -tags lockstep_server") {
		t.Errorf("serve without a server build: exit %d\n%s", code, out)
	}
	fake := filepath.Join(dir, "fake-server")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"server: $* client=$LOCKSTEP_CLIENT_BINARY\"\nexit 7\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, code = run([]string{"LOCKSTEP_SERVER_BINARY=" + fake}, "serve", "--addr", "127.0.0.1:0")
	if code != 7 || strings.TrimSpace(out) != "server: serve --addr 127.0.0.1:0 client="+bin {
		t.Errorf("serve with a server build: exit %d\n%s", code, out)
	}
	// The one next to the client wins over PATH.
	if err := os.Rename(fake, filepath.Join(dir, "lockstep-server")); err != nil {
		t.Fatal(err)
	}
	out, code = run(nil, "migrate")
	if code != 7 || !strings.HasPrefix(out, "server: migrate ") {
		t.Errorf("migrate with lockstep-server beside the client: exit %d\n%s", code, out)
	}
}
