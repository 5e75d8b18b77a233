package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/internal/lazyre"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/telemetry"
)

// OpRunReport is the oplog operation of a run report.
const OpRunReport = "run.report"

func runMetrics(m *telemetry.Metrics) *telemetry.RunMetrics {
	if m == nil {
		return nil
	}
	return m.Runs
}

var runIDRE = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

// Bounds of a run report beyond the JSON body limit.
const (
	maxRunResidue = 200
	maxRunArgs    = 200
	maxRunPath    = 4096
	maxRunMachine = 255
)

func checkRunReport(r *api.RunReport) error {
	if !runIDRE.MatchString(r.RunID) {
		return lockstep.Errorf(lockstep.EINVALID, "run_id %q: 1 to 64 letters, digits, - or _", r.RunID)
	}
	if len(r.Wrote) > api.MaxRunWrites {
		return lockstep.Errorf(lockstep.EINVALID, "wrote has %d entries: at most %d (count the rest in wrote_omitted)", len(r.Wrote), api.MaxRunWrites)
	}
	if len(r.Residue) > maxRunResidue {
		return lockstep.Errorf(lockstep.EINVALID, "residue has %d entries: at most %d", len(r.Residue), maxRunResidue)
	}
	if len(r.Command) > maxRunArgs {
		return lockstep.Errorf(lockstep.EINVALID, "command has %d arguments: at most %d", len(r.Command), maxRunArgs)
	}
	for _, v := range []float64{r.CaptureMS, r.RollbackMS, r.VerifyMS, r.TotalMS} {
		if v < 0 {
			return lockstep.Errorf(lockstep.EINVALID, "timings must not be negative")
		}
	}
	if r.SnapshotBytes < 0 || r.ManifestBytes < 0 || r.TreeBytes < 0 || r.WroteOmitted < 0 {
		return lockstep.Errorf(lockstep.EINVALID, "sizes and counts must not be negative")
	}
	if r.Contain != "" && r.Contain != "instance" && r.Contain != "dir" {
		return lockstep.Errorf(lockstep.EINVALID, "contain %q: instance or dir", r.Contain)
	}
	if r.RetryFromClean && !r.Retry {
		return lockstep.Errorf(lockstep.EINVALID, "retry_from_clean without retry")
	}
	if len(r.Machine) > maxRunMachine {
		return lockstep.Errorf(lockstep.EINVALID, "machine: at most %d bytes", maxRunMachine)
	}
	if (r.Quarantined || r.Unquarantine) && r.Machine == "" {
		return lockstep.Errorf(lockstep.EINVALID, "quarantined and unquarantine name a machine: machine is required")
	}
	if r.Quarantined && r.Unquarantine {
		return lockstep.Errorf(lockstep.EINVALID, "quarantined and unquarantine: one or the other")
	}
	for i, w := range r.Wrote {
		switch w.Kind {
		case "created", "modified", "deleted":
		default:
			return lockstep.Errorf(lockstep.EINVALID, "wrote[%d].kind %q: created, modified or deleted", i, w.Kind)
		}
		if w.Path == "" || len(w.Path) > maxRunPath {
			return lockstep.Errorf(lockstep.EINVALID, "wrote[%d].path: 1 to %d bytes", i, maxRunPath)
		}
	}
	return nil
}

// runEvents are the audited events a report says happened.
func runEvents(r *api.RunReport) []string {
	var ev []string
	if r.Unquarantine { // a machine's quarantine cleared: no run
		return nil
	}
	if r.Captured {
		ev = append(ev, "capture")
	}
	if !r.Succeeded {
		ev = append(ev, "failure")
	}
	if r.RolledBack {
		ev = append(ev, "rollback")
	}
	if r.Purity.Checked {
		ev = append(ev, "verification")
	}
	return ev
}

// handleRunReport records how one `lockstep run` of a workspace went: a
// run.report oplog entry, a span per event (capture, failure, rollback,
// verification) and the run metrics. Who may report is who may write the
// workspace, decided before the body is read; a run (not the clearing of
// a machine's quarantine) also needs the workspace's refs to move.
func (s *Server) handleRunReport() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		me := caller(c)
		ws, err := s.Repos.Repo(ctx, c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		if !ws.IsWorkspace() {
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "%s is a base repository: runs are reported on workspaces", ws.Name))
			return
		}
		if err := repositories.CanWrite(me, ws); err != nil {
			writeError(c, err)
			return
		}
		var req api.RunReport
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		if err := checkRunReport(&req); err != nil {
			writeError(c, err)
			return
		}
		// A run is reported on a workspace whose refs still move; the
		// clearing of a quarantine also on the workspace its residue
		// marked failed.
		if !req.Unquarantine {
			if err := repositories.CanMoveRefs(me, ws); err != nil {
				writeError(c, err)
				return
			}
		}
		res, err := s.recordRunReport(c, me, ws, &req)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, res)
	}
}

func (s *Server) recordRunReport(c *gin.Context, me *lockstep.Key, ws *lockstep.Repo, req *api.RunReport) (*api.RunReportResult, error) {
	ctx, span := s.tracer.Start(c.Request.Context(), OpRunReport, trace.WithAttributes(attribute.String("workspace", ws.Name),
		attribute.String("run_id", req.RunID), attribute.Bool("succeeded", req.Succeeded)))
	defer span.End()
	// One span per reported event, back-dated to the duration the run
	// measured, so that a trace shows each capture, failure, rollback and
	// verification.
	now := time.Now()
	for _, ev := range runEvents(req) {
		d := map[string]float64{"capture": req.CaptureMS, "rollback": req.RollbackMS, "verification": req.VerifyMS}[ev]
		start := now.Add(-time.Duration(d * float64(time.Millisecond)))
		_, es := s.tracer.Start(ctx, "run."+ev, trace.WithTimestamp(start), trace.WithAttributes(attribute.String("run_id", req.RunID),
			attribute.Float64("duration_ms", d)))
		es.End(trace.WithTimestamp(now))
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var details map[string]any
	if err := json.Unmarshal(raw, &details); err != nil {
		return nil, err
	}
	result := "succeeded"
	switch {
	case req.Unquarantine:
		result = "unquarantined"
	case req.Quarantined:
		result = "quarantined"
	case !req.Succeeded:
		result = "failed"
	}
	e := &lockstep.OpEntry{KeyID: me.ID, KeyName: me.Name, Op: OpRunReport, Result: result, Repo: ws.Name,
		TraceID: telemetry.TraceID(ctx), DurationUS: int64(req.TotalMS * 1000), Details: details}
	err = s.Store.AppendOp(ctx, e)
	if rm := runMetrics(s.Metrics); rm != nil {
		logged := fmt.Sprint(err == nil)
		for _, ev := range runEvents(req) {
			rm.Audit.WithLabelValues(ev, logged).Inc()
		}
		if err == nil {
			if req.Captured {
				rm.Capture.Observe(req.CaptureMS / 1000)
			}
			if req.RolledBack {
				rm.Rollback.Observe(req.RollbackMS / 1000)
			}
			if req.Purity.Checked {
				rm.Verify.Observe(req.VerifyMS / 1000)
			}
			if req.Retry {
				rm.Retry(req.RetryFromClean)
			}
			if req.TreeBytes > 0 {
				rm.Overhead.Set(float64(req.SnapshotBytes+req.ManifestBytes) / float64(req.TreeBytes))
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return &api.RunReportResult{OpID: e.ID, Seq: e.Seq}, nil
}

// --- the runs page ---------------------------------------------------------

// uiRunReports is how many recent run.report entries the runs page reads
// and computes its five metrics from.
const uiRunReports = 500

type runRow struct {
	*lockstep.OpEntry
	R api.RunReport
}

type runsData struct {
	Rows      []runRow
	OwnOnly   bool
	Window    int // the reports the figures are computed from
	Capture   latency
	Rollback  latency
	Verify    latency
	Retries   int
	FromClean int
	Purity    string // "" before any retry
	Overhead  string // mean over the reports that measured it
	Snapshots int
	Audit     string
	Events    int
	Logged    int
	// Quarantined are the machines whose newest quarantine record in the
	// window says dirty.
	Quarantined []quarantineRecord
}

// quarantineRecord is a machine marked dirty by a run's residue: the
// newest report of the machine that quarantined or unquarantined it.
type quarantineRecord struct {
	Machine   string
	Workspace string
	RunID     string
	Time      time.Time
	Residue   []string
}

// quarantines are the machines still quarantined according to entries
// (newest first): a machine's newest quarantined / unquarantine report
// decides.
func quarantines(entries []*lockstep.OpEntry) []quarantineRecord {
	var out []quarantineRecord
	seen := map[string]bool{}
	for _, e := range entries {
		r, ok := runReport(e)
		if !ok || r.Machine == "" || !(r.Quarantined || r.Unquarantine) || seen[r.Machine] {
			continue
		}
		seen[r.Machine] = true
		if r.Quarantined {
			out = append(out, quarantineRecord{Machine: r.Machine, Workspace: e.Repo, RunID: r.RunID, Time: e.Time, Residue: r.Residue})
		}
	}
	return out
}

type latency struct {
	N             int
	P50, P95, Max string
}

func newLatency(v []float64) latency {
	if len(v) == 0 {
		return latency{}
	}
	sort.Float64s(v)
	q := func(p float64) string { return fmt.Sprintf("%.1f ms", v[int(p*float64(len(v)-1))]) }
	return latency{N: len(v), P50: q(.5), P95: q(.95), Max: q(1)}
}

// runReports reads a run.report entry's report.
func runReport(e *lockstep.OpEntry) (api.RunReport, bool) {
	var r api.RunReport
	raw, err := json.Marshal(e.Details)
	if err != nil || json.Unmarshal(raw, &r) != nil {
		return r, false
	}
	return r, true
}

func pct(a, b int) string { return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b)) }

// handleRuns is /ui/runs: the five run metrics computed from the last
// uiRunReports run reports (the oplog: the same on every replica), and the
// most recent runs. An agent sees its own runs only.
func (u *uiServer) handleRuns(c *gin.Context) {
	ctx := c.Request.Context()
	me := auth.FromContext(ctx)
	f, err := u.s.visibleOps(ctx, me, lockstep.OpFilter{Op: OpRunReport, Newest: true, Limit: uiRunReports}) // visibility.go
	if err != nil {
		u.fail(c, err)
		return
	}
	entries, err := u.s.Store.ListOps(ctx, f)
	if err != nil {
		u.fail(c, err)
		return
	}
	d := runsData{OwnOnly: f.KeyID != "", Window: uiRunReports}
	var capture, rollback, verify, overhead []float64
	for _, e := range entries {
		r, ok := runReport(e)
		if !ok || r.Unquarantine {
			continue
		}
		if len(d.Rows) < 50 {
			d.Rows = append(d.Rows, runRow{OpEntry: e, R: r})
		}
		if r.Captured {
			capture = append(capture, r.CaptureMS)
		}
		if r.RolledBack {
			rollback = append(rollback, r.RollbackMS)
		}
		if r.Purity.Checked {
			verify = append(verify, r.VerifyMS)
		}
		if r.Retry {
			d.Retries++
			if r.RetryFromClean {
				d.FromClean++
			}
		}
		if r.TreeBytes > 0 {
			overhead = append(overhead, float64(r.SnapshotBytes+r.ManifestBytes)/float64(r.TreeBytes))
		}
		// Every event a report names is logged by the entry itself.
		n := len(runEvents(&r))
		d.Events += n
		d.Logged += n
	}
	d.Quarantined = quarantines(entries)
	d.Capture, d.Rollback, d.Verify = newLatency(capture), newLatency(rollback), newLatency(verify)
	if d.Retries > 0 {
		d.Purity = pct(d.FromClean, d.Retries)
	}
	if len(overhead) > 0 {
		sum := 0.0
		for _, o := range overhead {
			sum += o
		}
		d.Overhead = fmt.Sprintf("%.2f%%", 100*sum/float64(len(overhead)))
		d.Snapshots = len(overhead)
	}
	if d.Events > 0 {
		d.Audit = pct(d.Logged, d.Events)
	}
	u.render(c, http.StatusOK, "runs", view{Title: "Runs", Section: "runs", D: d})
}

// runWrites is what a failed run wrote, from its run.report entry, for the
// workspace page (the uiFailedRuns newest failed runs among the last
// 10×uiFailedRuns reports).
type runWrites struct {
	RunID   string
	Time    time.Time
	Inside  []api.RunWrite
	Outside []api.RunWrite
	Omitted int
}

func failedRunWrites(entries []*lockstep.OpEntry) []runWrites {
	var out []runWrites
	for _, e := range entries {
		r, ok := runReport(e)
		if !ok || r.Succeeded || len(r.Wrote) == 0 {
			continue
		}
		w := runWrites{RunID: r.RunID, Time: e.Time, Omitted: r.WroteOmitted}
		for _, x := range r.Wrote {
			if x.Outside {
				w.Outside = append(w.Outside, x)
			} else {
				w.Inside = append(w.Inside, x)
			}
		}
		if out = append(out, w); len(out) == uiFailedRuns {
			break
		}
	}
	return out
}
