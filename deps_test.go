package lockstep_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDomainImportsNoDriver keeps the domain packages free of adapters:
// they reach storage, databases, locks and HTTP through the root seams
// (Store, Brancher, Locker, …), so none of them may depend, even
// indirectly, on a driver or on the packages that adapt one.
func TestDomainImportsNoDriver(t *testing.T) {
	domain := []string{".", "./repositories", "./workspaces", "./branches", "./branches", "./gate", "./checkpoints", "./merge", "./effects", "./delivery"}
	forbidden := []string{
		"github.com/lockstep-hq/lockstep/sqlstore",
		"github.com/lockstep-hq/lockstep/dbbranch",
		"github.com/lockstep-hq/lockstep/redislock",
		"github.com/lockstep-hq/lockstep/redisbranch",
		"github.com/lockstep-hq/lockstep/web",
		"github.com/lockstep-hq/lockstep/s3packs",
		"github.com/lockstep-hq/lockstep/filebucket",
		"github.com/lockstep-hq/lockstep/replica",
		"database/sql",
		"github.com/jackc/pgx",
		"github.com/redis/go-redis",
		"github.com/gin-gonic/gin",
		"modernc.org/sqlite",
		"github.com/mattn/go-sqlite3",
		"github.com/minio/minio-go",
	}
	for _, pkg := range domain {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 {
			t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(lines), out)
		}
		for _, line := range lines {
			f := strings.Fields(line)
			dep, imports := f[0], f[1:]
			// Anywhere in the graph: an adapter of ours or a driver.
			if bad := match(dep, forbidden); bad != "" && !strings.HasPrefix(bad, "database/sql") {
				t.Errorf("%s depends on %s (a driver or adapter): reach it through a root interface", pkg, dep)
			}
			// database/sql is imported by libraries we use for other
			// things (prometheus' collectors, uuid's Scan): only our own
			// packages may not import it.
			if strings.HasPrefix(dep, "github.com/lockstep-hq/lockstep") {
				for _, imp := range imports {
					if bad := match(imp, forbidden); strings.HasPrefix(bad, "database/sql") {
						t.Errorf("%s depends on %s, which imports %s: reach the database through a root interface", pkg, dep, imp)
					}
				}
			}
		}
	}
}

// TestServicesNameNoGitAdapter keeps the object-store seam: the
// services (and web) reach objects through gitobj's interfaces
// (repositories.ObjectStore = gitobj.Store), opened by the
// repositories.Config.Objects that cmd chose, so none of them depends,
// even indirectly, on an implementation (gitstore, replica), and none
// imports go-git itself: gitobj names its hash and object types. The
// merge engine too reads and writes objects in gitobj's types only (its
// Store is what gitobj.Reader.Objects returns; it encodes trees itself
// and commits with gitobj), so it is held to the same rule. gitobj is
// types and interfaces: of our packages it uses only the root package.
func TestServicesNameNoGitAdapter(t *testing.T) {
	const mod = "github.com/lockstep-hq/lockstep"
	services := []string{".", "./repositories", "./workspaces", "./branches", "./branches", "./gate", "./checkpoints", "./merge", "./effects", "./delivery", "./web"}
	adapters := []string{mod + "/gitstore", mod + "/replica"}
	for _, pkg := range services {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 {
			t.Fatalf("go list -deps %s listed %d packages: %q", pkg, len(lines), out)
		}
		for _, line := range lines {
			f := strings.Fields(line)
			dep, imports := f[0], f[1:]
			if match(dep, adapters) != "" {
				t.Errorf("%s depends on %s (an object-store implementation): reach objects through gitobj", pkg, dep)
			}
			// go-git directly: only gitobj (the aliases) among our
			// packages.
			if !strings.HasPrefix(dep, mod) || dep == mod+"/gitobj" || match(dep, adapters) != "" {
				continue
			}
			for _, imp := range imports {
				if strings.HasPrefix(imp, "github.com/go-git/") {
					t.Errorf("%s depends on %s, which imports %s: use gitobj's types", pkg, dep, imp)
				}
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", "./gitobj").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./gitobj: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps ./gitobj listed %q", out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, mod+"/") && dep != mod+"/gitobj" && !strings.HasPrefix(dep, mod+"/internal/") {
			t.Errorf("gitobj depends on %s: it holds types and interfaces, using only the root package", dep)
		}
	}
}

// TestReplicaNamesNoBackend keeps the bucket seam: the object-storage
// mode reaches its packs through bucket.Bucket, whichever backend cmd
// chose by URL scheme, so it depends on none of them (nor on an S3
// client).
func TestReplicaNamesNoBackend(t *testing.T) {
	forbidden := []string{
		"github.com/lockstep-hq/lockstep/s3packs",
		"github.com/lockstep-hq/lockstep/filebucket",
		"github.com/minio/minio-go",
	}
	out, err := exec.Command("go", "list", "-deps", "./replica", "./bucket").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if bad := match(dep, forbidden); bad != "" {
			t.Errorf("replica or bucket depends on %s: reach packs through bucket.Bucket", dep)
		}
	}
}

// TestDeliveryImportsNoService keeps the outbox machinery (package
// delivery: the drain loop, the single-attempt send, the target rules,
// the signatures, the hook worker) below the services that fill the
// outboxes: of our packages it may use only the root types and
// telemetry, so gate and effects both build on it and it on neither.
func TestDeliveryImportsNoService(t *testing.T) {
	allowed := map[string]bool{
		"github.com/lockstep-hq/lockstep":           true,
		"github.com/lockstep-hq/lockstep/telemetry": true,
		"github.com/lockstep-hq/lockstep/delivery":  true,
	}
	out, err := exec.Command("go", "list", "-deps", "./delivery").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./delivery: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps ./delivery listed %q", out)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/lockstep-hq/lockstep/internal/") {
			continue
		}
		if (dep == "github.com/lockstep-hq/lockstep" || strings.HasPrefix(dep, "github.com/lockstep-hq/lockstep/")) && !allowed[dep] {
			t.Errorf("delivery depends on %s: it may use only the root package and telemetry", dep)
		}
	}
}

// TestBenchOutsideTheServer keeps the benchmarks out of the server's
// graph: `lockstep bench` and `lockstep load` are subcommands, so
// cmd/lockstep links bench, but no other package may depend on it; and
// bench drives a server the way a user does (the Go client, the binary
// it execs), so of our packages it may use only the shared types, the
// client, and the two adapters it measures directly (dbbranch: the
// branch-burst benchmark; s3packs, with bucket: the raw bucket baseline
// of the object-store benchmark).
func TestBenchOutsideTheServer(t *testing.T) {
	const mod, bench = "github.com/lockstep-hq/lockstep", "github.com/lockstep-hq/lockstep/bench"
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 10 {
		t.Fatalf("go list ./... listed %d packages: %q", len(lines), out)
	}
	allowed := map[string]bool{mod: true, mod + "/api": true, mod + "/client": true, mod + "/worktree": true,
		mod + "/dbbranch": true, mod + "/s3packs": true, mod + "/bucket": true}
	sawBench := false
	for _, line := range lines {
		f := strings.Fields(line)
		pkg, deps := f[0], f[1:]
		if pkg == bench {
			sawBench = true
			for _, d := range deps {
				if strings.HasPrefix(d, mod+"/") && !allowed[d] && !strings.HasPrefix(d, mod+"/internal/") {
					t.Errorf("bench depends on %s: drive the server through the client or the binary", d)
				}
			}
			continue
		}
		if pkg == mod+"/cmd/lockstep" {
			continue // the bench and load subcommands
		}
		for _, d := range deps {
			if d == bench {
				t.Errorf("%s depends on bench: only cmd/lockstep (its subcommands) may", pkg)
			}
		}
	}
	if !sawBench {
		t.Fatal("go list ./... did not list the bench package")
	}
}

// match returns the entry of list that path is or lies under, or "".
func match(path string, list []string) string {
	for _, f := range list {
		if path == f || strings.HasPrefix(path, f+"/") {
			return f
		}
	}
	return ""
}
