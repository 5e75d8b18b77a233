package lockstep_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/lockstep-hq/lockstep"
)

// TestStatusTransitions: the lifecycle table says who may make which
// change; promoted and abandoned are final; only a landing promotes.
func TestStatusTransitions(t *testing.T) {
	owner := &lockstep.Key{ID: "k-owner", Role: lockstep.RoleAgent}
	other := &lockstep.Key{ID: "k-other", Role: lockstep.RoleAgent}
	admin := &lockstep.Key{ID: "k-admin", Role: lockstep.RoleAdmin}
	reviewer := &lockstep.Key{ID: "k-rev", Role: lockstep.RoleReviewer}
	ci := &lockstep.Key{ID: "k-ci", Role: lockstep.RoleCI}
	ws := func(st lockstep.Status) *lockstep.Repo {
		return &lockstep.Repo{Name: "ws", ForkOf: "base", Status: st, OwnerKeyID: owner.ID}
	}
	for _, c := range []struct {
		actor    *lockstep.Key
		from, to lockstep.Status
		want     string // error code, "" for allowed
	}{
		{reviewer, lockstep.StatusActive, lockstep.StatusFailed, ""},
		{ci, lockstep.StatusActive, lockstep.StatusFailed, ""},
		{admin, lockstep.StatusActive, lockstep.StatusFailed, ""},
		{owner, lockstep.StatusActive, lockstep.StatusFailed, lockstep.EFORBIDDEN},
		{owner, lockstep.StatusActive, lockstep.StatusAbandoned, ""},
		{admin, lockstep.StatusActive, lockstep.StatusAbandoned, ""},
		{other, lockstep.StatusActive, lockstep.StatusAbandoned, lockstep.EFORBIDDEN},
		{reviewer, lockstep.StatusActive, lockstep.StatusAbandoned, lockstep.EFORBIDDEN},
		{admin, lockstep.StatusFailed, lockstep.StatusActive, ""},
		{owner, lockstep.StatusFailed, lockstep.StatusActive, lockstep.EFORBIDDEN},
		{other, lockstep.StatusActive, lockstep.StatusActive, lockstep.EFORBIDDEN},
		{owner, lockstep.StatusFailed, lockstep.StatusAbandoned, ""},
		{admin, lockstep.StatusPromoted, lockstep.StatusActive, lockstep.EINVALID},
		{admin, lockstep.StatusAbandoned, lockstep.StatusActive, lockstep.EINVALID},
		{admin, lockstep.StatusAbandoned, lockstep.StatusFailed, lockstep.EINVALID},
		{admin, lockstep.StatusPromoted, lockstep.StatusFailed, lockstep.EINVALID},
		{admin, lockstep.StatusActive, lockstep.StatusPromoted, lockstep.EINVALID}, // only by landing
		{admin, lockstep.StatusActive, "sleepy", lockstep.EINVALID},
	} {
		if got := lockstep.ErrorCode(lockstep.CheckTransition(c.actor, ws(c.from), c.to)); got != c.want {
			t.Errorf("%s (%s): %s → %s: %q, want %q", c.actor.ID, c.actor.Role, c.from, c.to, got, c.want)
		}
	}
	base := &lockstep.Repo{Name: "base", Status: lockstep.StatusActive}
	if base.IsWorkspace() || lockstep.ErrorCode(lockstep.CheckTransition(admin, base, lockstep.StatusFailed)) != lockstep.EINVALID {
		t.Error("a base repository's status changed")
	}
	for _, st := range lockstep.Statuses {
		final := st == lockstep.StatusPromoted || st == lockstep.StatusAbandoned
		if st.Final() != final || st.Movable() != (st == lockstep.StatusActive) {
			t.Errorf("%s: Final %v, Movable %v", st, st.Final(), st.Movable())
		}
	}
	for _, tr := range lockstep.StatusTransitions {
		if !tr.From.Valid() || !tr.To.Valid() {
			t.Errorf("transition %s → %s names an unknown status", tr.From, tr.To)
		}
	}
}

// TestStatusesInStep: the statuses the OpenAPI document and the Python
// client's types list are the lifecycle table's, in its order.
func TestStatusesInStep(t *testing.T) {
	var want []string
	for _, s := range lockstep.Statuses {
		want = append(want, string(s))
	}
	b, err := os.ReadFile("api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Enum []string `json:"enum"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Components.Schemas["RepoStatus"].Enum; !slices.Equal(got, want) {
		t.Errorf("api/openapi.yaml RepoStatus enum %v, want %v (lockstep.Statuses)", got, want)
	}
	// The workspace listing's status filter.
	get, _ := doc.Paths["/api/v1/repos/{repo}/workspaces"]["get"].(map[string]any)
	params, _ := get["parameters"].([]any)
	found := false
	for _, p := range params {
		m, _ := p.(map[string]any)
		if m["name"] != "status" {
			continue
		}
		found = true
		schema, _ := m["schema"].(map[string]any)
		var got []string
		if ref, _ := schema["$ref"].(string); ref == "#/components/schemas/RepoStatus" {
			continue
		}
		enum, _ := schema["enum"].([]any)
		for _, e := range enum {
			s, _ := e.(string)
			got = append(got, s)
		}
		if !slices.Equal(got, want) {
			t.Errorf("listWorkspaces status filter enum %v, want %v", got, want)
		}
	}
	if !found {
		t.Error("listWorkspaces has no status filter in api/openapi.yaml")
	}

	py, err := os.ReadFile("clients/python/lockstep/types.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*RepoStatus = Literal\[([^\]]*)\]`).FindSubmatch(py)
	if m == nil {
		t.Fatal(`clients/python/lockstep/types.py has no RepoStatus = Literal[...]`)
	}
	var got []string
	for _, f := range strings.Split(string(m[1]), ",") {
		got = append(got, strings.Trim(strings.TrimSpace(f), `"'`))
	}
	if !slices.Equal(got, want) {
		t.Errorf("Python RepoStatus %v, want %v (lockstep.Statuses)", got, want)
	}
	for _, class := range []string{"Repo", "WorkspaceInfo"} {
		body := regexp.MustCompile(`(?s)class ` + class + `\(TypedDict[^)]*\):\n(.*?)\n\n`).FindSubmatch(py)
		if body == nil || !strings.Contains(string(body[1]), "status: RepoStatus") {
			t.Errorf("Python %s.status is not typed RepoStatus", class)
		}
	}
}
