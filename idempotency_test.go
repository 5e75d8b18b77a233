package lockstep_test

import (
	"encoding/json"
	"testing"

	"github.com/lockstep-hq/lockstep"
)

// TestIdemClaimAnswer: what the store writes on a key's record for the
// answer a log entry carries: a value with the route's status and its
// secrets redacted, a refusal as its error envelope without a status (the
// web layer maps the code), nothing for no value except on a 204 route.
func TestIdemClaimAnswer(t *testing.T) {
	created := &lockstep.IdemClaim{Status: 201}
	type key struct {
		ID     string            `json:"id"`
		Secret string            `json:"secret"`
		Nested map[string]string `json:"nested"`
	}
	ic, ok := created.Answer(&key{ID: "k1", Secret: "s3cret", Nested: map[string]string{"secret": "x", "name": "n"}})
	if !ok || ic.Status != 201 || ic.Refusal() || ic.Header["Content-Type"] != "application/json; charset=utf-8" {
		t.Fatalf("value: %+v %v", ic, ok)
	}
	var got map[string]any
	if err := json.Unmarshal(ic.Body, &got); err != nil {
		t.Fatal(err)
	}
	nested, _ := got["nested"].(map[string]any)
	if got["id"] != "k1" || got["secret"] != nil || got["secret_withheld"] != true || nested["secret"] != nil || nested["secret_withheld"] != true || nested["name"] != "n" {
		t.Fatalf("stored answer keeps a secret or loses a field: %s", ic.Body)
	}

	ic, ok = created.Answer(lockstep.Errorf(lockstep.EREFCONFLICT, "main moved").WithDetails(map[string]any{"ref": "refs/heads/main"}))
	if !ok || ic.Status != 0 || !ic.Refusal() || lockstep.ErrorEnvelopeCode(ic.Body) != lockstep.EREFCONFLICT {
		t.Fatalf("refusal: %+v %s", ic, ic.Body)
	}
	var env struct {
		Error struct {
			Code, Message string
			Details       map[string]any
		}
	}
	if err := json.Unmarshal(ic.Body, &env); err != nil || env.Error.Message != "main moved" || env.Error.Details["ref"] != "refs/heads/main" {
		t.Fatalf("refusal envelope: %s (%v)", ic.Body, err)
	}

	if _, ok := created.Answer(nil); ok {
		t.Fatal("no value on a 201 route stored something")
	}
	noContent := &lockstep.IdemClaim{Status: 204}
	if ic, ok := noContent.Answer(nil); !ok || ic.Status != 204 || len(ic.Body) != 0 {
		t.Fatalf("204 without a value: %+v %v", ic, ok)
	}
	if ic, ok := noContent.Answer(struct{ A int }{1}); !ok || ic.Status != 204 || len(ic.Body) != 0 {
		t.Fatalf("204 with a value: %+v %v", ic, ok)
	}
	if ic, ok := (&lockstep.IdemClaim{}).Answer(json.RawMessage(`{"a":1}`)); !ok || ic.Status != 200 || string(ic.Body) != `{"a":1}` {
		t.Fatalf("no status: %+v %v", ic, ok)
	}
	if lockstep.ErrorEnvelopeCode([]byte(`{"commit":"x"}`)) != "" || lockstep.ErrorEnvelopeCode([]byte(`not json`)) != "" {
		t.Fatal("a non-envelope has a code")
	}
}
