package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/web"
)

// TestUIEffects: the workspace page lists a workspace's effects (status,
// target, class, consuming, body preview) and says a compensation is not
// an erasure; a reviewer approves a held effect through the page's form
// (CSRF checked), an agent is offered no button and is refused; the task
// page shows which attempts touch the outside world.
func TestUIEffects(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) {
		s.Effects = effects.New(effects.Config{}, s.Store, s.Repos, s.Logger, s.Metrics, nil)
	})
	w.api(t, "PUT", "/api/v1/repos/app/gate", w.admin, `{"branch":"main","required_checks":["ci/test"],"protected_paths":["deploy/**"],"hold_effect_classes":["payment"]}`, 200)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-2","task":"pay"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"task-3","task":"pay"}`, 201)
	tip := w.push(t, "task-2", w.agent, w.baseHead, "pay the invoice", map[string]string{"README.md": "# app\npaid\n"}, 201)
	w.api(t, "POST", "/api/v1/repos/task-2/commits/"+tip+"/checks", w.ci, `{"name":"ci/test","status":"success"}`, 201)
	pay := w.api(t, "POST", "/api/v1/repos/task-2/effects", w.agent,
		`{"method":"POST","url":"https://payments.example.com/charges","body":"{\"amount\":4200}","class":"payment","consuming":true,"label":"charge the customer",
		  "headers":{"Authorization":"Bearer sk_live_secret"},"compensation":{"method":"POST","url":"https://payments.example.com/refunds"}}`, 201)
	id := pay["id"].(string)
	w.api(t, "POST", "/api/v1/repos/task-2/promote", w.agent, `{}`, 200)

	agent := w.login(t, w.agent)
	_, body, _ := w.get(t, agent, "/ui/repos/task-2")
	mustContain(t, "workspace effects", body, "Effects", "held", "payments.example.com/charges", "payment", "consuming",
		"{&#34;amount&#34;:4200}", "charge the customer", "not an erasure")
	if strings.Contains(body, "sk_live_secret") {
		t.Error("BUG: the page shows a secret header")
	}
	if strings.Contains(body, "/effects/"+id+"/approve") {
		t.Error("an agent is offered the approve button")
	}
	tok := csrfRE.FindStringSubmatch(body)[1]
	if r, _ := agent.PostForm(w.srv.URL+"/ui/repos/task-2/effects/"+id+"/approve", url.Values{"csrf": {tok}}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("agent approving: %d, want 403", r.StatusCode)
	}

	rev := w.login(t, w.reviewer)
	_, body, _ = w.get(t, rev, "/ui/repos/task-2")
	mustContain(t, "reviewer's page", body, "/effects/"+id+"/approve", "/effects/"+id+"/reject")
	if r, _ := rev.PostForm(w.srv.URL+"/ui/repos/task-2/effects/"+id+"/approve", url.Values{}); r.StatusCode != http.StatusForbidden {
		t.Fatalf("approve without CSRF token: %d, want 403", r.StatusCode)
	}
	tok = csrfRE.FindStringSubmatch(body)[1]
	r, _ := rev.PostForm(w.srv.URL+"/ui/repos/task-2/effects/"+id+"/approve", url.Values{"csrf": {tok}})
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve: %d", r.StatusCode)
	}
	if m := w.api(t, "GET", "/api/v1/repos/task-2/effects/"+id, w.reviewer, "", 200); m["status"] != "releasing" {
		t.Fatalf("after approve: %v", m["status"])
	}
	_, body, _ = w.get(t, rev, "/ui/repos/app/tasks/pay")
	mustContain(t, "task page", body, "Outside world", "1 releasing", "1 consuming", "touches nothing outside")
}
