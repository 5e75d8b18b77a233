// Package workspaces is the domain service of workspaces: the ref-only
// forks an agent works in. It forks a base repository (copies of its
// branch refs in the same fork network, no object written), lists a
// base's workspaces with their tips and ahead/behind counts, records
// attempts, changes a workspace's status (active → promoted, failed,
// abandoned), syncs a workspace with its base, and follows a workspace's
// life with its database branch through the lockstep.Brancher seam
// (created on fork when the base has a template, dropped on abandon).
// Every ref move goes through the repositories service; landing a
// workspace on its base is the gate's. The package knows nothing of HTTP
// or of the drivers behind the seams.
package workspaces

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// Service implements workspaces.
type Service struct {
	store   lockstep.Store
	repos   *repositories.Service
	dbs     lockstep.Brancher      // nil: database branching is off
	rds     lockstep.RedisBrancher // nil: Redis branching is off
	log     *slog.Logger
	metrics *telemetry.Metrics
	now     func() time.Time

	bgCtx    context.Context // cancelled by Close
	bgCancel context.CancelFunc
	bg       sync.WaitGroup // database branches being created
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
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{store: store, repos: repos, dbs: dbs, log: log, metrics: metrics, now: now, bgCtx: ctx, bgCancel: cancel}
}

// Wait waits for the database branches being created in the background
// (without cancelling them).
func (s *Service) Wait() { s.bg.Wait() }

// Close cancels the database branches still being created and waits for
// them (GET /database creates a missing one later).
func (s *Service) Close() error {
	s.bgCancel()
	s.bg.Wait()
	return nil
}

var (
	traceID = telemetry.TraceID
	ms      = telemetry.Millis
)

func branchRef(b string) string { return "refs/heads/" + b }
