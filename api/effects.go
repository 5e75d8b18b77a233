package api

import "time"

// ---- effects: POST/GET /repos/{workspace}/effects, GET /repos/{workspace}/effects/{id},
// POST /repos/{workspace}/effects/discard, POST /repos/{repo}/effects/{id}/approve|reject|compensate,
// POST /repos/{repo}/effects/compensate

// EffectCompensation is the request that undoes an effect after it was
// released (e.g. the DELETE closing what a POST opened). Header values
// that are secrets, and the values of the URL's query, come back
// redacted.
type EffectCompensation struct {
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       string            `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
}

// EffectRequest is the body of POST /repos/{workspace}/effects: an HTTP
// request to send when (and only if) the workspace is promoted. Body and
// BodyBase64 are exclusive. Authorization, Cookie, X-Api-Key and every
// header named in SecretHeaders are stored encrypted and shown redacted;
// so is the URL's query (shown with its names kept, every value
// redacted).
type EffectRequest struct {
	Method        string              `json:"method"`
	URL           string              `json:"url"`
	Headers       map[string]string   `json:"headers,omitempty"`
	SecretHeaders []string            `json:"secret_headers,omitempty"`
	Body          string              `json:"body,omitempty"`
	BodyBase64    string              `json:"body_base64,omitempty"`
	Label         string              `json:"label,omitempty"`
	Class         string              `json:"class,omitempty"`
	RunID         string              `json:"run_id,omitempty"`
	Compensation  *EffectCompensation `json:"compensation,omitempty"`
	Consuming     bool                `json:"consuming,omitempty"`
}

// EffectAttempt is one try of an effect's (or its compensation's)
// delivery.
type EffectAttempt struct {
	Kind       string    `json:"kind"`
	Attempt    int       `json:"attempt"`
	StatusCode int       `json:"status_code"`
	DurationMS float64   `json:"duration_ms"`
	Error      string    `json:"error,omitempty"`
	At         time.Time `json:"at"`
}

// Effect is a staged outward effect and what became of it. Status is
// staged, held (released by a promote, waiting for a reviewer), releasing
// (in the outbox), released (delivered, 2xx), failed (delivery gave up)
// or discarded. CompensationStatus is "", pending, compensated or failed.
type Effect struct {
	ID                 string              `json:"id"`
	Seq                int64               `json:"seq"`
	Repo               string              `json:"repo"`
	Status             string              `json:"status"`
	Method             string              `json:"method"`
	URL                string              `json:"url"`
	Headers            map[string]string   `json:"headers"`
	BodyPreview        string              `json:"body_preview"`
	BodyBytes          int                 `json:"body_bytes"`
	Label              string              `json:"label,omitempty"`
	Class              string              `json:"class,omitempty"`
	RunID              string              `json:"run_id,omitempty"`
	Consuming          bool                `json:"consuming"`
	Compensation       *EffectCompensation `json:"compensation,omitempty"`
	CompensationStatus string              `json:"compensation_status,omitempty"`
	DiscardReason      string              `json:"discard_reason,omitempty"`
	ReleasedInto       string              `json:"released_into,omitempty"`
	ReleasedCommit     string              `json:"released_commit,omitempty"`
	Attempts           int                 `json:"attempts"`
	LastStatusCode     int                 `json:"last_status_code,omitempty"`
	LastError          string              `json:"last_error,omitempty"`
	KeyName            string              `json:"key"`
	CreatedAt          time.Time           `json:"created_at"`
	UpdatedAt          time.Time           `json:"updated_at"`
	History            []EffectAttempt     `json:"history,omitempty"`
}

// EffectList is the answer of GET /repos/{workspace}/effects, oldest
// first; NextAfter is the after= (a seq) of the next page, 0 on the last.
type EffectList struct {
	Effects   []Effect `json:"effects"`
	NextAfter int64    `json:"next_after"`
}

// EffectDiscard is the body of POST /repos/{workspace}/effects/discard:
// discard the workspace's pending effects staged after AfterSeq (0: all)
// and, when RunID is set, only those of that run.
type EffectDiscard struct {
	AfterSeq int64  `json:"after_seq,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// EffectDiscardResult is its answer: the ids discarded.
type EffectDiscardResult struct {
	Discarded []string `json:"discarded"`
}

// EffectDecision is the (optional) body of approve and reject.
type EffectDecision struct {
	Reason string `json:"reason,omitempty"`
}

// CompensateRequest is the body of POST /repos/{repo}/effects/compensate:
// run the compensations of the effects the commit released, newest first.
type CompensateRequest struct {
	Commit string `json:"commit"`
}

// CompensateResult lists the effects whose compensation was queued.
type CompensateResult struct {
	Effects []Effect `json:"effects"`
}
