package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RunMetrics are the five metrics of transactional runs (issue 22),
// updated from the run reports the CLI sends after each `lockstep run`.
// Each replica counts the reports it received: sum the counters across
// replicas (the gauges are per replica); the UI's runs page computes the
// same figures from the oplog instead, independent of the replica.
type RunMetrics struct {
	// Capture is the latency of the pre-run snapshot (and its manifest).
	Capture prometheus.Histogram
	// Rollback is the latency of a failed run's filesystem rollback.
	Rollback prometheus.Histogram
	// Verify is the latency of a rollback's verification.
	Verify prometheus.Histogram
	// Retries counts retries (runs after a failed run of the same
	// workspace directory on the same machine) by from_clean: whether
	// the previous rollback was verified clean. PurityIndex is
	// from_clean="true" / all, as this replica has seen them.
	Retries     *prometheus.CounterVec
	PurityIndex prometheus.Gauge
	// Overhead is the storage overhead of the latest reported snapshot:
	// (snapshot data + stored manifest) / tree size.
	Overhead prometheus.Gauge
	// Audit counts the events runs report (capture, failure, rollback,
	// verification) by logged: whether the server kept them in the oplog.
	// Audit completeness is logged="true" / all.
	Audit *prometheus.CounterVec

	mu          sync.Mutex
	retries, ok float64
}

var latencyBuckets = []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newRunMetrics(reg *prometheus.Registry) *RunMetrics {
	r := &RunMetrics{
		Capture: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lockstep_run_capture_seconds",
			Help: "Snapshot capture latency of lockstep run (snapshot and manifest before the command), from run reports.", Buckets: latencyBuckets}),
		Rollback: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lockstep_run_rollback_seconds",
			Help: "Rollback latency of failed lockstep runs (filesystem restore and layer discard), from run reports.", Buckets: latencyBuckets}),
		Verify: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lockstep_run_verify_seconds",
			Help: "Verification latency after a rollback (directory and, when on, the whole instance), from run reports.", Buckets: latencyBuckets}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockstep_run_retries_total",
			Help: "Runs that retried after a failed run, by whether they started from an instance verified clean."}, []string{"from_clean"}),
		PurityIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockstep_run_purity_index",
			Help: "Retries that started from a verified clean instance / all retries (this replica's reports; 1 before any retry)."}),
		Overhead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "lockstep_run_snapshot_overhead_ratio",
			Help: "Storage overhead of the latest reported run snapshot: (snapshot data + stored manifest) / tree bytes."}),
		Audit: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockstep_run_audit_events_total",
			Help: "Run events reported (capture, failure, rollback, verification) by whether they were kept in the oplog (audit completeness: logged=true / all)."}, []string{"event", "logged"}),
	}
	r.PurityIndex.Set(1)
	reg.MustRegister(r.Capture, r.Rollback, r.Verify, r.Retries, r.PurityIndex, r.Overhead, r.Audit)
	return r
}

// Retry counts one retry and updates the purity index.
func (r *RunMetrics) Retry(fromClean bool) {
	if r == nil {
		return
	}
	label := "false"
	r.mu.Lock()
	r.retries++
	if fromClean {
		r.ok++
		label = "true"
	}
	r.PurityIndex.Set(r.ok / r.retries)
	r.mu.Unlock()
	r.Retries.WithLabelValues(label).Inc()
}
