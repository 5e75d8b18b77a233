package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/web"
)

// TestTaskScopedKeySeesOnlyItsTasksDeliveries: a hook of base app receives
// the events of every workspace forked from it, whose payloads name them.
// A key scoped to task t1 (reviewer or ci) reads the hook's deliveries
// about t1's workspaces and the base itself, never those about t2's (it saw
// them all), on the API and on the base's UI page; and it may not create,
// rotate or delete the base's hooks (a rotation answered it the secret
// that signs every task's deliveries), while an unscoped ci key still may.
func TestTaskScopedKeySeesOnlyItsTasksDeliveries(t *testing.T) {
	w := mustUIWorld(t)
	hook := w.api(t, "POST", "/api/v1/repos/app/hooks", w.admin, `{"url":"https://8.8.8.8/hook","secret":"hooksecret-0123456789","events":["*"]}`, 201)["id"].(string)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"mine-1","task":"t1"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.admin, `{"name":"hidden-2","task":"t2"}`, 201)
	w.push(t, "mine-1", w.agent, w.baseHead, "t1 work", map[string]string{"a.txt": "1\n"}, 201)
	w.push(t, "hidden-2", w.admin, w.baseHead, "t2 work", map[string]string{"b.txt": "2\n"}, 201)
	all := fmt.Sprint(w.api(t, "GET", "/api/v1/repos/app/hooks/"+hook+"/deliveries", w.admin, "", 200)["deliveries"])
	if !strings.Contains(all, "hidden-2") || !strings.Contains(all, "mine-1") {
		t.Fatalf("the admin's deliveries: %s, want both workspaces", all)
	}
	for _, role := range []string{lockstep.RoleReviewer, lockstep.RoleCI} {
		key := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"s-`+role+`","role":"`+role+`","ttl":"1h","scope":{"base":"app","task":"t1"}}`, 201)["secret"].(string)
		got := fmt.Sprint(w.api(t, "GET", "/api/v1/repos/app/hooks/"+hook+"/deliveries", key, "", 200)["deliveries"])
		if strings.Contains(got, "hidden-2") || !strings.Contains(got, "mine-1") {
			t.Errorf("%s: deliveries %s, want mine-1's and not hidden-2's", role, got)
		}
		// The base page's latest delivery is hidden-2's push: not shown.
		_, body, _ := w.get(t, w.login(t, key), "/ui/repos/app")
		if !strings.Contains(body, "no deliveries yet") {
			t.Errorf("%s /ui/repos/app shows the latest delivery (another task's)", role)
		}
		if role != lockstep.RoleCI {
			continue
		}
		w.api(t, "POST", "/api/v1/repos/app/hooks/"+hook+"/rotate", key, `{}`, 403)
		w.api(t, "DELETE", "/api/v1/repos/app/hooks/"+hook, key, "", 403)
		w.api(t, "POST", "/api/v1/repos/app/hooks", key, `{"url":"https://8.8.4.4/hook","secret":"hooksecret-0123456789"}`, 403)
		// Its own workspace's hooks are its to manage.
		w.api(t, "POST", "/api/v1/repos/mine-1/hooks", key, `{"url":"https://8.8.4.4/hook","secret":"hooksecret-0123456789"}`, 201)
	}
	w.api(t, "POST", "/api/v1/repos/app/hooks/"+hook+"/rotate", w.ci, `{}`, 200)
}

// TestTaskScopedKeyReachesOnlyItsTasksReleasedEffects: an effect staged
// on task t2's workspace and held at promote is released into base app;
// a reviewer key scoped to task t1 names app (in its scope) but may
// neither read that effect (its target, headers and body) nor approve it
// through app (it did both); an unscoped reviewer still does.
func TestTaskScopedKeyReachesOnlyItsTasksReleasedEffects(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) {
		s.Effects = effects.New(effects.Config{}, s.Store, s.Repos, s.Logger, s.Metrics, nil)
	})
	w.api(t, "PUT", "/api/v1/repos/app/gate", w.admin, `{"branch":"main","hold_effect_classes":["payment"]}`, 200)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"mine-1","task":"t1"}`, 201)
	w.api(t, "POST", "/api/v1/repos/app/forks", w.agent, `{"name":"hidden-2","task":"t2"}`, 201)
	w.push(t, "hidden-2", w.agent, w.baseHead, "pay", map[string]string{"README.md": "# app\npaid\n"}, 201)
	id := w.api(t, "POST", "/api/v1/repos/hidden-2/effects", w.agent,
		`{"method":"POST","url":"https://payments.example.com/charges","body":"{\"customer\":\"alice\"}","class":"payment"}`, 201)["id"].(string)
	w.api(t, "POST", "/api/v1/repos/hidden-2/promote", w.agent, `{}`, 200)
	key := w.api(t, "POST", "/api/v1/keys", w.admin, `{"name":"s-rev","role":"reviewer","ttl":"1h","scope":{"base":"app","task":"t1"}}`, 201)["secret"].(string)
	w.api(t, "GET", "/api/v1/repos/hidden-2/effects/"+id, key, "", 403)
	w.api(t, "GET", "/api/v1/repos/app/effects/"+id, key, "", 404)
	w.api(t, "POST", "/api/v1/repos/app/effects/"+id+"/approve", key, `{}`, 404)
	w.api(t, "POST", "/api/v1/repos/app/effects/"+id+"/reject", key, `{}`, 404)
	if m := w.api(t, "GET", "/api/v1/repos/app/effects/"+id, w.reviewer, "", 200); m["status"] != "held" {
		t.Fatalf("after the scoped key's tries the effect is %v, want held", m["status"])
	}
	w.api(t, "POST", "/api/v1/repos/app/effects/"+id+"/approve", w.reviewer, `{}`, 200)
}
