package web_test

import (
	"testing"

	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/web"
)

// TestPromoteIntoWorkspaceReleasesNoEffects: effects are released when the
// work reaches a base through its gate. An agent that forks its own
// workspace and promotes the fork into it (a fork of a fork) must not
// release the fork's staged effects that way, past the base's gate and its
// hold_effect_classes: that promote is refused while effects are staged
// (it released them at once), and the effect stays staged.
func TestPromoteIntoWorkspaceReleasesNoEffects(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) {
		s.Effects = effects.New(effects.Config{}, s.Store, s.Repos, s.Logger, s.Metrics, nil)
	})
	w.api(t, "PUT", "/api/v1/repos/app/gate", w.admin, `{"branch":"main","hold_effect_classes":["payment"]}`, 200)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"w1"}`, 201)
	w.api(t, "POST", "/api/v1/repos/w1/forks", w.agent, `{"name":"w2"}`, 201)
	w.push(t, "w2", w.agent, w.baseHead, "pay", map[string]string{"README.md": "# app\npaid\n"}, 201)
	id := w.api(t, "POST", "/api/v1/repos/w2/effects", w.agent,
		`{"method":"POST","url":"https://payments.example.com/charges","body":"{}","class":"payment"}`, 201)["id"].(string)
	m := w.api(t, "POST", "/api/v1/repos/w2/promote", w.agent, `{}`, 400)
	if errCode(m) != "invalid_argument" {
		t.Fatalf("promote into a workspace with staged effects: %v", m)
	}
	if e := w.api(t, "GET", "/api/v1/repos/w2/effects/"+id, w.agent, "", 200); e["status"] != "staged" {
		t.Fatalf("the effect after the refused promote: %v, want staged", e["status"])
	}
	// Without staged effects the fork of a fork still lands into w1.
	w.api(t, "POST", "/api/v1/repos/w2/effects/discard", w.agent, `{}`, 200)
	w.api(t, "POST", "/api/v1/repos/w2/promote", w.agent, `{}`, 200)
}
