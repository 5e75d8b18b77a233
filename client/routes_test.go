package client_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/client"
)

// routeMethods maps every route of web/routes.go to the client method
// that calls it. Routes served to other clients are listed with why.
var routeMethods = map[string]string{
	"GET /healthz":                                     "Health",
	"GET /readyz":                                      "Ready",
	"GET /metrics":                                     "Metrics",
	"GET /api/v1/openapi.json":                         "OpenAPI",
	"POST /api/v1/keys":                                "CreateKey",
	"POST /api/v1/gc":                                  "GC",
	"GET /api/v1/keys":                                 "Keys",
	"DELETE /api/v1/keys/:id":                          "RevokeKey",
	"PUT /api/v1/keys/:id/quota":                       "SetKeyQuota",
	"GET /api/v1/whoami":                               "Whoami",
	"GET /api/v1/oplog":                                "Oplog",
	"GET /api/v1/oplog/verify":                         "VerifyOplog",
	"POST /api/v1/repos":                               "CreateRepo",
	"GET /api/v1/repos":                                "RepoList",
	"GET /api/v1/repos/:repo":                          "Repo",
	"DELETE /api/v1/repos/:repo":                       "Abandon",
	"POST /api/v1/repos/:repo/status":                  "SetStatus",
	"POST /api/v1/repos/:repo/forks":                   "ForkTask",
	"GET /api/v1/repos/:repo/workspaces":               "WorkspacePage",
	"GET /api/v1/repos/:repo/attempts":                 "Attempts",
	"GET /api/v1/repos/:repo/usage":                    "Usage",
	"GET /api/v1/repos/:repo/retention":                "Retention",
	"PUT /api/v1/repos/:repo/retention":                "SetRetention",
	"GET /api/v1/repos/:repo/refs":                     "Refs",
	"PUT /api/v1/repos/:repo/worktree":                 "PushTar", // and PushTree, PushDir
	"POST /api/v1/repos/:repo/edits":                   "EditFiles",
	"POST /api/v1/repos/:repo/objects/missing":         "Missing",
	"POST /api/v1/repos/:repo/objects":                 "UploadPackFunc",
	"POST /api/v1/repos/:repo/rollback":                "Rollback",
	"GET /api/v1/repos/:repo/commits":                  "Log",
	"GET /api/v1/repos/:repo/commits/:rev":             "Commit",
	"GET /api/v1/repos/:repo/tree/:rev":                "Tree",
	"GET /api/v1/repos/:repo/blob/:rev/*path":          "Blob",
	"GET /api/v1/repos/:repo/archive/:rev":             "Archive",
	"GET /api/v1/repos/:repo/compare":                  "Compare",
	"POST /api/v1/repos/:repo/merges":                  "MergeBranches",
	"POST /api/v1/repos/:repo/merges/preflight":        "PreflightBatch",
	"POST /api/v1/repos/:repo/sync":                    "Sync",
	"PUT /api/v1/repos/:repo/gate":                     "SetGate",
	"GET /api/v1/repos/:repo/gate":                     "Gate",
	"GET /api/v1/repos/:repo/gate/evaluate":            "EvaluateGate",
	"POST /api/v1/repos/:repo/commits/:rev/checks":     "PostCheck",
	"GET /api/v1/repos/:repo/commits/:rev/checks":      "Checks",
	"POST /api/v1/repos/:repo/hooks":                   "CreateHook",
	"GET /api/v1/repos/:repo/hooks":                    "Hooks",
	"DELETE /api/v1/repos/:repo/hooks/:id":             "DeleteHook",
	"POST /api/v1/repos/:repo/hooks/:id/rotate":        "RotateHook",
	"GET /api/v1/repos/:repo/hooks/:id/deliveries":     "HookDeliveries",
	"POST /api/v1/repos/:repo/promote":                 "Promote",
	"PUT /api/v1/repos/:repo/database":                 "BindDatabase",
	"GET /api/v1/repos/:repo/database":                 "Database",
	"POST /api/v1/repos/:repo/database/refresh":        "RefreshDatabase",
	"GET /api/v1/repos/:repo/redis":                    "Redis",
	"POST /api/v1/repos/:repo/checkpoints":             "CreateCheckpoint",
	"GET /api/v1/repos/:repo/checkpoints":              "Checkpoints",
	"POST /api/v1/repos/:repo/checkpoints/:id/restore": "RestoreCheckpoint",
	"POST /api/v1/repos/:repo/effects":                 "StageEffect",
	"GET /api/v1/repos/:repo/effects":                  "Effects",
	"POST /api/v1/repos/:repo/effects/discard":         "DiscardEffects",
	"POST /api/v1/repos/:repo/effects/compensate":      "CompensateCommit",
	"GET /api/v1/repos/:repo/effects/:id":              "Effect",
	"POST /api/v1/repos/:repo/effects/:id/approve":     "ApproveEffect",
	"POST /api/v1/repos/:repo/effects/:id/reject":      "RejectEffect",
	"POST /api/v1/repos/:repo/effects/:id/compensate":  "CompensateEffect",
	"POST /api/v1/repos/:repo/runs":                    "ReportRun",
	"POST /api/v1/repos/:repo/jobs":                    "ExecuteRun",
	"GET /api/v1/repos/:repo/jobs/:id":                 "RunJob",
	"POST /api/v1/runners":                             "RegisterRunner",
	"POST /api/v1/runners/:id/jobs":                    "TakeRunJob",
	"POST /api/v1/runners/:id/jobs/:job/output":        "PostRunJobOutput",
	"POST /api/v1/runners/:id/jobs/:job/result":        "FinishRunJob",
}

// notForThisClient are routes other clients speak: the git smart-HTTP
// protocol (the git CLI) and the Model Context Protocol (MCP clients).
var notForThisClient = map[string]string{
	"/git/": "git smart HTTP: spoken by the git CLI",
	"/mcp":  "Model Context Protocol: spoken by MCP clients (agentmcp)",
	"/ui":   "the reviewers' HTML UI",
}

// TestEveryRouteHasAMethod walks the router, as the OpenAPI drift test
// does, and fails for a route without a client method (or a table entry
// naming a method the client lacks, or a route that is gone).
func TestEveryRouteHasAMethod(t *testing.T) {
	s := mustServer(t)
	e, ok := s.Handler.(*gin.Engine)
	if !ok {
		t.Fatalf("Handler() is %T, want *gin.Engine", s.Handler)
	}
	ct := reflect.TypeOf(&client.Client{})
	seen := map[string]bool{}
	n := 0
	for _, r := range e.Routes() {
		other := false
		for prefix := range notForThisClient {
			if strings.HasPrefix(r.Path, prefix) {
				other = true
			}
		}
		if other {
			continue
		}
		n++
		key := r.Method + " " + r.Path
		seen[key] = true
		m, ok := routeMethods[key]
		if !ok {
			t.Errorf("route %s has no client method: add one and list it in routeMethods", key)
			continue
		}
		if _, ok := ct.MethodByName(m); !ok {
			t.Errorf("route %s: routeMethods names (*Client).%s, which does not exist", key, m)
		}
	}
	if n < 45 {
		t.Fatalf("only %d routes found: the route listing is broken", n)
	}
	var gone []string
	for k := range routeMethods {
		if !seen[k] {
			gone = append(gone, k)
		}
	}
	sort.Strings(gone)
	for _, k := range gone {
		t.Errorf("routeMethods lists %s, which is not a route", k)
	}
}
