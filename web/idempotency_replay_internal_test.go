package web

import (
	"net/http"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// TestStoredAnswer: a replay maps a stored answer to its status. A value
// was stored with the route's success status; a refusal carried by a log
// entry was stored as its error envelope without one, and its code maps
// through the one error table; an empty record has no answer.
func TestStoredAnswer(t *testing.T) {
	claim := &lockstep.IdemClaim{Status: http.StatusCreated}
	ok1, _ := claim.Answer(map[string]string{"commit": "abc"})
	refused, _ := claim.Answer(lockstep.Errorf(lockstep.EGATEFAILED, "gate refused"))
	for _, c := range []struct {
		name   string
		rec    lockstep.IdemRecord
		status int
		ok     bool
	}{
		{"value", lockstep.IdemRecord{Status: ok1.Status, Header: ok1.Header, Body: ok1.Body}, http.StatusCreated, true},
		{"refusal", lockstep.IdemRecord{Status: refused.Status, Header: refused.Header, Body: refused.Body}, http.StatusPreconditionFailed, true},
		{"handler's final answer", lockstep.IdemRecord{Status: http.StatusConflict, Body: []byte(`{"error":{"code":"ref_conflict"}}`)}, http.StatusConflict, true},
		{"nothing stored", lockstep.IdemRecord{}, 0, false},
	} {
		st, _, body, ok := storedAnswer(&c.rec)
		if st != c.status || ok != c.ok || (ok && string(body) != string(c.rec.Body)) {
			t.Errorf("%s: status %d ok %v, want %d %v", c.name, st, ok, c.status, c.ok)
		}
	}
}
