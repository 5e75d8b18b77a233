package api

// RunReport is the body of POST /repos/{workspace}/runs: how one
// `lockstep run` of the workspace went, sent by the CLI after every run
// (success or failure). The server keeps it as a run.report oplog entry
// and updates the run metrics (capture and rollback latency, purity
// index, storage overhead, audit completeness).
type RunReport struct {
	RunID      string   `json:"run_id"`
	Command    []string `json:"command,omitempty"`
	Exit       int      `json:"exit"`
	Signal     string   `json:"signal,omitempty"`
	TimedOut   bool     `json:"timed_out,omitempty"`
	Succeeded  bool     `json:"succeeded"`
	RolledBack bool     `json:"rolled_back"`
	Contain    string   `json:"contain,omitempty"` // instance or dir
	// Timings: the snapshot (and manifest) taken before the run, the
	// rollback of a failed run, its verification; the whole run.
	CaptureMS  float64 `json:"capture_ms"`
	RollbackMS float64 `json:"rollback_ms"`
	VerifyMS   float64 `json:"verify_ms"`
	TotalMS    float64 `json:"total_ms,omitempty"`
	// Events the run went through, for audit completeness: a capture
	// (snapshot taken), a failure, a rollback, a verification.
	Captured bool      `json:"captured"`
	Purity   RunPurity `json:"purity"`
	Residue  []string  `json:"residue,omitempty"` // what the rollback left behind
	// Retry is true when the previous run of this workspace's directory
	// on the reporting machine failed; RetryFromClean when that run's
	// rollback was verified clean (the retry started from a verified
	// clean instance). Together: the purity index.
	Retry          bool `json:"retry"`
	RetryFromClean bool `json:"retry_from_clean"`
	// Storage overhead of the run's snapshot: the snapshot's own data
	// (0 for copy-on-write drivers that share the tree), its stored
	// manifest, and the tree's size.
	SnapshotBytes int64 `json:"snapshot_bytes"`
	ManifestBytes int64 `json:"manifest_bytes"`
	TreeBytes     int64 `json:"tree_bytes"`
	// Wrote is what a failed run wrote (inside and outside --dir), at
	// most MaxRunWrites entries; WroteOmitted counts the rest.
	Wrote        []RunWrite `json:"wrote,omitempty"`
	WroteOmitted int        `json:"wrote_omitted,omitempty"`
	// Machine names the machine the run ran on (`lockstep run --machine`,
	// default its hostname). Quarantined says the rollback left residue
	// and `--on-residue quarantine` marked the machine dirty; a report
	// with Unquarantine set is no run but `lockstep run unquarantine`
	// clearing that mark. The server's quarantine record of a machine is
	// its newest report carrying either.
	Machine      string `json:"machine,omitempty"`
	Quarantined  bool   `json:"quarantined,omitempty"`
	Unquarantine bool   `json:"unquarantine,omitempty"`
}

// RunPurity says whether a rollback was verified clean.
type RunPurity struct {
	Checked  bool `json:"checked"`
	Clean    bool `json:"clean"`
	Instance bool `json:"instance"` // the whole instance was verified, not only --dir
}

// RunWrite is one path a run created, modified or deleted.
type RunWrite struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"` // created, modified, deleted
	Size    int64  `json:"size"`
	Outside bool   `json:"outside"` // outside --dir
}

// MaxRunWrites bounds RunReport.Wrote (the server refuses more).
const MaxRunWrites = 500

// RunReportResult is the answer of POST /repos/{workspace}/runs.
type RunReportResult struct {
	OpID string `json:"op_id"`
	Seq  int64  `json:"seq"`
}
