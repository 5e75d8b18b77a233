// Package bench measures Lockstep side by side with the git CLI, on the
// same machine and filesystem: `lockstep bench` is a thin command over
// [Run]. It starts its own servers in-process (through
// [Options.StartServer], the wiring of `serve`, which stays in cmd),
// generates deterministic trees, and prints one row per scenario with
// medians, p90, the git median, the ratio and the target. Timings never
// fail a run, except with [Options.Strict].
//
// [RunLoad] (`lockstep load`, load.go) is the other half: simulated agents
// against running servers at any base URLs (one, or several replicas),
// followed by a check that no acknowledged write was lost.
//
// The end-to-end scenarios (`lockstep run`) start a lockstep binary
// ([Options.Bin]); benchmarks of single functions are `go test -bench` in
// their packages.
package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
)

// Options are the settings of one run; the zero value of a field is not
// a default (the command's flags carry the defaults: 2,000 and 20,000
// files, 20 iterations, seed 1, fsync compared).
type Options struct {
	// Dir is the parent of the bench's temporary directory; empty:
	// $TMPDIR, else /dev/shm when it is a tmpfs, else os.TempDir().
	Dir string
	// Files and BigFiles are the sizes of the small tree (push,
	// rollback, read, checkpoint, run) and the big one (fork-20k,
	// preflight, materialize); both at least 30.
	Files, BigFiles int
	// Iterations are the measured iterations of the fast scenarios
	// (slow ones use fewer); at least 1.
	Iterations int
	// JSON prints the rows as one JSON document instead of a table.
	JSON bool
	// Strict makes Run return ErrTargetMissed when a row misses its
	// target.
	Strict bool
	// Keep leaves the bench directory in place.
	Keep bool
	// Only selects scenario groups (Groups) or rows by name; empty: all.
	Only []string
	// CPUProfileDir, when set, receives a CPU profile of each scenario's
	// measured loop.
	CPUProfileDir string
	// Bin is the lockstep binary of the end-to-end scenarios; empty: this
	// executable unless it is a test binary, else one built with go build.
	Bin string
	// Seed seeds the generated trees.
	Seed uint64
	// CompareFsync also measures push-incremental and rollback on a
	// server with fsync off.
	CompareFsync bool
	// Watch runs `lockstep watch` (the --bin binary) on the worktree of
	// push-incremental while it is measured, so that its pushes take the
	// watcher's changed paths instead of walking the tree.
	Watch bool
	// BranchDatabaseURL is the Postgres server of the workspaces'
	// database branches (LOCKSTEP_BRANCH_DATABASE_URL); empty: none.
	BranchDatabaseURL string
	// Fleet are the workspace counts the fleet rows are measured at,
	// ascending (ParseFleetSizes reads the --fleet flag); empty: no
	// fleet rows.
	Fleet []int
	// Objstore configures the objstore group (object-storage mode beside
	// local-disk mode, issue #11); its zero value skips the group.
	Objstore ObjstoreOptions

	// StartServer starts an in-process server with the defaults of
	// `serve` and the given settings (required).
	StartServer func(ctx context.Context, c ServerConfig) (*Server, error)
	// Stderr receives progress lines and warnings; nil: discarded.
	Stderr io.Writer
}

// ServerConfig is what a bench server differs in from `serve`'s defaults.
type ServerConfig struct {
	Data              string // data directory (created)
	Fsync             bool
	BranchPrefix      string // prefix of the database branches' names
	BranchDatabaseURL string
	Logger            *slog.Logger

	// The objstore group's servers (empty: serve's defaults).
	//
	// DatabaseURL is the postgres:// metadata database
	// (LOCKSTEP_DATABASE_URL; empty: the embedded SQLite).
	DatabaseURL string
	// ObjectStore is LOCKSTEP_OBJECT_STORE (s3://bucket/prefix?endpoint=…),
	// with its keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY): the bench
	// passes them here, not through the process environment.
	ObjectStore           string
	S3AccessKey, S3Secret string
	// SecretKeyFile is LOCKSTEP_SECRET_KEY_FILE (object mode needs one
	// shared by the replicas).
	SecretKeyFile string
	// RedisURL is LOCKSTEP_REDIS_URL (empty: none).
	RedisURL string
}

// Server is a started in-process server: Handler serves the HTTP API,
// Close releases everything StartServer opened.
type Server struct {
	Handler http.Handler
	Close   func()
}

// pushOutput is what the bench reads of `lockstep push --json`.
type pushOutput struct {
	client.PushResult
	Files       int     `json:"files"`
	Hashed      int     `json:"hashed"`
	Watched     bool    `json:"watched"`
	ObjectsSent int     `json:"objects_sent"`
	BytesSent   int64   `json:"bytes_sent"`
	RoundTrips  int     `json:"round_trips"`
	TotalMS     float64 `json:"total_ms"`
	ScanMS      float64 `json:"scan_ms"`
	ServerMS    float64 `json:"server_ms"`
}

// ErrTargetMissed is returned by Run with Options.Strict when a row
// missed its target (the rows are printed first).
var ErrTargetMissed = errors.New("bench: a target was missed")

// Groups are the scenario groups Options.Only selects (a row name such as
// fork-20k or read-refs selects its group).
func Groups() []string { return slices.Clone(benchGroups) }

// RowNames are the rows a full run prints, in order.
func RowNames() []string { return slices.Clone(benchRowNames) }

// Run measures the selected scenarios and prints the rows to stdout.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	if o.Files < 30 || o.BigFiles < 30 || o.Iterations < 1 {
		return lockstep.Errorf(lockstep.EINVALID, "bench: --files and --big-files must be ≥ 30, --iterations ≥ 1")
	}
	if o.StartServer == nil {
		return lockstep.Errorf(lockstep.EINVALID, "bench: Options.StartServer is required")
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	bo := benchOpts{dir: o.Dir, files: o.Files, bigFiles: o.BigFiles, iters: o.Iterations, asJSON: o.JSON, strict: o.Strict,
		keep: o.Keep, only: o.Only, cpuDir: o.CPUProfileDir, bin: o.Bin, seed: o.Seed, fsyncOff: o.CompareFsync, watch: o.Watch,
		branchDBURL: o.BranchDatabaseURL, fleetSizes: o.Fleet, objstore: o.Objstore, startServer: o.StartServer}
	b, err := newBencher(ctx, &env{stdout: stdout, stderr: o.Stderr}, bo)
	if err != nil {
		return err
	}
	defer b.close()
	if err := b.runAll(); err != nil {
		return err
	}
	b.print()
	if o.Strict {
		for _, r := range b.rows {
			if r.Skipped == "" && !r.Pass {
				return ErrTargetMissed
			}
		}
	}
	return nil
}

// env is where a run writes.
type env struct {
	stdout, stderr io.Writer
}

// short is an oid's first 12 characters.
func short(oid string) string {
	if len(oid) > 12 {
		return oid[:12]
	}
	return oid
}
