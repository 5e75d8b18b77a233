// Package workspaces is the domain service of workspaces: the ref-only
// forks an agent works in. It forks a base repository (copies of its
// branch refs in the same fork network, no object written), lists a
// base's workspaces with their tips and ahead/behind counts, records
// attempts, changes a workspace's status (active → promoted, failed,
// abandoned), syncs a workspace with its base, and follows a workspace's
// life with its database and Redis branches through a branches.Room
// (created on fork, dropped on abandon, promote and purge).
// Every ref move goes through the repositories service; landing a
// workspace on its base is the gate's. The package knows nothing of HTTP
// or of the drivers behind the seams.
package workspaces

import (
	"log/slog"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/branches"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Service implements workspaces.
type Service struct {
	store   lockstep.Store
	repos   *repositories.Service
	br      *branches.Room // the rules of the workspace's data branches
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time
}

// New returns the service; dbs may be nil (no database branching), now
// may be nil.
func New(store lockstep.Store, repos *repositories.Service, dbs lockstep.Brancher, log *slog.Logger, metrics *telemetry.Metrics, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Service{store: store, repos: repos, br: branches.New(dbs, nil, repos, log, now), log: log, metrics: metrics, now: now}
}

// Wait waits for the branches being created or dropped in the background
// (without cancelling them).
func (s *Service) Wait() { s.br.Wait() }

// Close cancels the branches still being created and waits for them (GET
// /database creates a missing one later).
func (s *Service) Close() error {
	s.br.Close()
	return nil
}

var (
	traceID = telemetry.TraceID
	ms      = telemetry.Millis
)

func branchRef(b string) string { return "refs/heads/" + b }
