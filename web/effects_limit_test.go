package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/sqlstore"
	"github.com/lockstep-hq/lockstep/web"
)

// TestEffectBodyWithinItsOwnLimit: an effect whose body is within
// --effect-max-body-bytes is staged although its JSON (the body in
// base64) is over --max-json-bytes, with and without an Idempotency-Key;
// the route's limit was --max-json-bytes, so it was refused 413 naming a
// limit the effect did not break. One over its own limit is still 413.
func TestEffectBodyWithinItsOwnLimit(t *testing.T) {
	f := mustServerTweak(t, web.Config{MaxJSONBytes: 64 << 10}, nil, func(s *web.Server, db *sqlstore.DB) {
		s.Effects = effects.New(effects.Config{MaxBodyBytes: 100 << 10}, s.Store, s.Repos, s.Logger, s.Metrics, nil)
	})
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	stage := func(body, idem string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", f.srv.URL+"/api/v1/repos/ws1/effects", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.agent)
		req.Header.Set("Content-Type", "application/json")
		if idem != "" {
			req.Header.Set("Idempotency-Key", idem)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	// 90 KiB of body, 120 KiB in base64: within the effect's limit,
	// over the JSON limit.
	within, _ := json.Marshal(map[string]any{"method": "POST", "url": "https://payments.example.com/x", "body_base64": strings.Repeat("QUFB", 30<<10)})
	for _, idem := range []string{"", "stage-1"} {
		if st, m := stage(string(within), idem); st != http.StatusCreated {
			t.Fatalf("an effect within --effect-max-body-bytes (Idempotency-Key %q): %d %v, want 201", idem, st, m)
		}
	}
	over, _ := json.Marshal(map[string]any{"method": "POST", "url": "https://payments.example.com/x", "body_base64": strings.Repeat("QUFB", 40<<10)})
	if st, m := stage(string(over), ""); st != http.StatusRequestEntityTooLarge || !strings.Contains(errMessage(m), "effect-max-body-bytes") {
		t.Fatalf("an effect over --effect-max-body-bytes: %d %v, want 413 naming it", st, m)
	}
}
