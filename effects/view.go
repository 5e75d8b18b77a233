package effects

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
)

// Redacted replaces a secret header's value, and the value of every query
// parameter of a target URL, in every view (lockstep.Redacted).
const Redacted = lockstep.Redacted

// PreviewBytes is how much of a body a view shows.
const PreviewBytes = 512

// Preview is the start of a body as text, or a note for binary content.
func Preview(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	p := b
	if len(p) > PreviewBytes {
		p = p[:PreviewBytes]
		for len(p) > 0 && !utf8.Valid(p) && len(b)-len(p) < 4 {
			p = p[:len(p)-1]
		}
	}
	if !utf8.Valid(p) {
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	}
	if len(p) < len(b) {
		return string(p) + "…"
	}
	return string(p)
}

func redactHeaders(h lockstep.EffectHTTP) map[string]string {
	out := make(map[string]string, len(h.Headers))
	for k, v := range h.Headers {
		out[k] = v
	}
	for _, k := range h.Secret {
		if _, ok := out[k]; ok {
			out[k] = Redacted
		}
	}
	return out
}

// View is the wire form of an effect: secret header values and the
// values of the URL's query redacted (lockstep.RedactURL), the body as a
// preview (the compensation's too).
func View(e *lockstep.Effect) api.Effect {
	v := api.Effect{ID: e.ID, Seq: e.Seq, Repo: e.Repo, Status: e.Status, Method: e.Request.Method, URL: lockstep.RedactURL(e.Request.URL),
		Headers: redactHeaders(e.Request), BodyPreview: Preview(e.Request.Body), BodyBytes: len(e.Request.Body),
		Label: e.Label, Class: e.Class, RunID: e.RunID, Consuming: e.Consuming, CompensationStatus: e.CompensationStatus,
		DiscardReason: e.DiscardReason, ReleasedInto: e.ReleasedInto, ReleasedCommit: e.ReleasedCommit, Attempts: e.Attempts,
		LastStatusCode: e.LastStatusCode, LastError: e.LastError, KeyName: e.KeyName, CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt}
	if c := e.Compensation; c != nil {
		vc := &api.EffectCompensation{Method: c.Method, URL: lockstep.RedactURL(c.URL), Headers: redactHeaders(*c)}
		if utf8.Valid(c.Body) {
			vc.Body = Preview(c.Body)
		} else {
			vc.BodyBase64 = base64.StdEncoding.EncodeToString(c.Body[:min(len(c.Body), PreviewBytes)])
		}
		if len(vc.Headers) == 0 {
			vc.Headers = nil
		}
		v.Compensation = vc
	}
	for _, a := range e.History {
		v.History = append(v.History, api.EffectAttempt{Kind: a.Kind, Attempt: a.Attempt, StatusCode: a.StatusCode, DurationMS: a.DurationMS, Error: a.Error, At: a.At})
	}
	return v
}

// Views converts a list.
func Views(list []lockstep.Effect) []api.Effect {
	out := make([]api.Effect, 0, len(list))
	for i := range list {
		out = append(out, View(&list[i]))
	}
	return out
}

// Staged is an effect rendered as its view when encoded: staged as an
// idempotent answer before the store fills in its seq, it is encoded at
// commit, with it.
type Staged lockstep.Effect

// MarshalJSON encodes the view.
func (s *Staged) MarshalJSON() ([]byte, error) { return json.Marshal(View((*lockstep.Effect)(s))) }
