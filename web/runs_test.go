package web_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

const failedRunReport = `{"run_id":"run_a1","command":["sh","-c","exit 1"],"exit":1,"succeeded":false,"rolled_back":true,"contain":"instance",
 "capture_ms":3.5,"rollback_ms":7.25,"verify_ms":12,"total_ms":40,"captured":true,"purity":{"checked":true,"clean":true,"instance":true},
 "snapshot_bytes":0,"manifest_bytes":900,"tree_bytes":100000,
 "wrote":[{"path":"/w/app/secret-output.txt","kind":"created","size":42,"outside":false},{"path":"/tmp/ghost-probe","kind":"created","size":6,"outside":true},
          {"path":"/opt/app/conf","kind":"modified","size":8,"outside":true}]}`

const retryReport = `{"run_id":"run_a2","command":["true"],"exit":0,"succeeded":true,"rolled_back":false,"capture_ms":2,"captured":true,
 "retry":true,"retry_from_clean":true,"manifest_bytes":800,"tree_bytes":100000}`

// TestRunReports: a run's report is kept as a run.report entry with one
// span per event (capture, failure, rollback, verification: audit
// completeness counted), feeds the lockstep_run_* metrics and the runs
// page, and the workspace page shows what the failed run wrote, inside
// and outside --dir, to its owner and reviewers, never to another agent.
// Who may report is decided before the body is read.
func TestRunReports(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(old) })
	w := mustUIWorld(t)
	other := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"agent-9","role":"agent"}`, 201)["secret"].(string)

	// Another agent may not report on task-1: refused before the body
	// (a malformed one here) is read.
	w.api(t, "POST", "/api/v1/repos/task-1/runs", other, `{not json`, 403)
	w.api(t, "POST", "/api/v1/repos/nope/runs", w.agent, `{not json`, 404)
	w.api(t, "POST", "/api/v1/repos/app/runs", w.admin, `{"run_id":"r"}`, 400) // a base repository
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"../x"}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"r","wrote":[{"path":"/a","kind":"renamed"}]}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"r","wrote":[`+strings.Repeat(`{"path":"/a","kind":"created"},`, 500)+`{"path":"/a","kind":"created"}]}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"r","residue":["`+strings.Repeat("x", 2<<20)+`"]}`, 413)

	res := w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, failedRunReport, 201)
	if res["op_id"] == "" {
		t.Fatalf("report answer %v", res)
	}
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, retryReport, 201)

	// Audit completeness: the failed run's capture, failure, rollback and
	// verification and the retry's capture are 5 events, each a span, all
	// carried by the 2 run.report entries.
	spans := map[string]int{}
	for _, s := range rec.Ended() {
		spans[s.Name()]++
	}
	if spans["run.capture"] != 2 || spans["run.failure"] != 1 || spans["run.rollback"] != 1 || spans["run.verification"] != 1 || spans["run.report"] != 2 {
		t.Fatalf("spans %v: want 2 captures, 1 failure, 1 rollback, 1 verification, 2 reports", spans)
	}
	entries := w.api(t, "GET", "/api/v1/oplog?op=run.report", w.admin, "", 200)["entries"].([]any)
	if len(entries) != 2 {
		t.Fatalf("%d run.report entries, want 2", len(entries))
	}
	d := entries[0].(map[string]any)["details"].(map[string]any)
	if d["run_id"] != "run_a1" || d["rollback_ms"] != 7.25 || len(d["wrote"].([]any)) != 3 {
		t.Fatalf("first entry's details %v", d)
	}
	// The other agent does not see them in the oplog.
	if es := w.api(t, "GET", "/api/v1/oplog?op=run.report", other, "", 200)["entries"].([]any); len(es) != 0 {
		t.Fatalf("another agent sees %d run reports", len(es))
	}

	// The metrics.
	resp, err := http.Get(w.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"lockstep_run_capture_seconds_count 2",
		"lockstep_run_rollback_seconds_count 1",
		"lockstep_run_verify_seconds_count 1",
		`lockstep_run_retries_total{from_clean="true"} 1`,
		"lockstep_run_purity_index 1",
		"lockstep_run_snapshot_overhead_ratio 0.008",
		`lockstep_run_audit_events_total{event="capture",logged="true"} 2`,
		`lockstep_run_audit_events_total{event="verification",logged="true"} 1`,
	} {
		if !bytes.Contains(m, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The runs page, linked in the nav.
	rev := w.login(t, w.reviewer)
	_, body, _ := w.get(t, rev, "/ui/runs")
	mustContain(t, "runs page", body, `href="/ui/runs"`, "Purity index", "100.0%", "1 / 1 retries", "0.85%", "5 / 5 events",
		"run_a1", "run_a2", "task-1", "p50 7.2 ms")
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	mustContain(t, "reviewer's workspace page", body, "What the failed runs wrote", "/w/app/secret-output.txt", "/tmp/ghost-probe", "/opt/app/conf", "outside --dir")
	owner := w.login(t, w.agent)
	_, body, _ = w.get(t, owner, "/ui/repos/task-1")
	mustContain(t, "owner's workspace page", body, "/tmp/ghost-probe", "go test ./...")
	// Another agent sees neither what the run wrote nor the failed run's
	// output, as the oplog hides them from it.
	stranger := w.login(t, other)
	_, body, _ = w.get(t, stranger, "/ui/repos/task-1")
	for _, leak := range []string{"ghost-probe", "secret-output", "go test ./..."} {
		if strings.Contains(body, leak) {
			t.Errorf("another agent's workspace page shows %q", leak)
		}
	}
	_, body, _ = w.get(t, stranger, "/ui/runs")
	mustContain(t, "another agent's runs page", body, "sees its own runs only", "No run reported yet")
	if strings.Contains(body, "run_a1") {
		t.Error("another agent's runs page lists the owner's runs")
	}
}

// TestRunQuarantineRecord: issue 22's "marked dirty with the server". A
// run report with quarantined=true is the server's quarantine record of
// its machine, shown on the runs page and the workspace page; the
// workspace its residue marked failed takes no more runs, but takes the
// unquarantine report that clears the record.
func TestRunQuarantineRecord(t *testing.T) {
	w := mustUIWorld(t)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"q1","quarantined":true}`, 400) // no machine
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"q1","machine":"box-7","quarantined":true,"unquarantine":true}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"q1","machine":"`+strings.Repeat("m", 256)+`"}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"q1","exit":1,"rolled_back":true,"contain":"dir","captured":true,
	  "purity":{"checked":true,"clean":false,"instance":true},"residue":["file /tmp/left-behind"],"machine":"box-7","quarantined":true}`, 201)
	w.api(t, "POST", "/api/v1/repos/task-1/status", w.admin, `{"status":"failed","reason":"rollback left residue"}`, 200)

	rev := w.login(t, w.reviewer)
	_, body, _ := w.get(t, rev, "/ui/runs")
	mustContain(t, "runs page", body, "Quarantined machines", "box-7", "/tmp/left-behind", "quarantined box-7")
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	mustContain(t, "workspace page", body, "Machine box-7 quarantined", "q1")

	// A failed workspace takes no run report, but takes the clearing.
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"q2","exit":1}`, 400)
	w.api(t, "POST", "/api/v1/repos/task-1/runs", w.agent, `{"run_id":"unq1","machine":"box-7","unquarantine":true}`, 201)
	_, body, _ = w.get(t, rev, "/ui/runs")
	if strings.Contains(body, "Quarantined machines") {
		t.Error("the runs page still lists box-7 as quarantined after unquarantine")
	}
	mustContain(t, "runs page after unquarantine", body, "q1") // the run itself stays listed
	if strings.Contains(body, "unq1") {
		t.Error("the clearing is listed as a run")
	}
	_, body, _ = w.get(t, rev, "/ui/repos/task-1")
	if strings.Contains(body, "Machine box-7 quarantined") {
		t.Error("the workspace page still shows the quarantine")
	}
}
