package web

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockstep-hq/lockstep"
)

// The route facts: one row per route (method and gin pattern) with what
// every layer needs to know about it before its handler runs. The router
// (routes.go) registers exactly these rows, admission (admit.go) reads the
// pre-body authorization, the runner rule and the upload slot from them,
// the body limits (limits.go) the body kind, and idempotency
// (idempotency.go) the success status and the key path. TestRouteFacts
// checks the table against the gin router and api/openapi.yaml. The
// reviewers' HTML UI (/ui/, ui.go) is not an API route and is not here.

// routeGroup is where a route hangs, which decides its middleware.
type routeGroup int

const (
	groupPublic routeGroup = iota // no key: health, readiness, metrics, the OpenAPI document
	groupMCP                      // Model Context Protocol: authenticate (and its own slot)
	groupAPI                      // /api/v1: authenticate → admit → idempotency
	groupGit                      // /git: authenticate → admit
)

// bodyKind picks a route's body limit (routeBodyLimit).
type bodyKind int

const (
	bodyJSON   bodyKind = iota // Config.MaxJSONBytes
	bodyEdit                   // JSON carrying file contents: Config.MaxEditBytes
	bodyUpload                 // tar, packs, git: Config.MaxUploadBytes (512 MiB when unset)
	bodyEffect                 // a staged effect (two bodies in base64): effects.Service.MaxRequestBytes, at least MaxJSONBytes
)

// idemKind is how a write with an Idempotency-Key runs
// (docs/idempotency.md).
type idemKind int

const (
	idemHeld  idemKind = iota // claim first, store the answer after (every write not listed otherwise)
	idemOneTx                 // the effect is one metadata transaction: claim in it, answer stored as done there
	idemNone                  // no key taken: a stream or a runner's own protocol
)

// routeFact is one route and its facts.
type routeFact struct {
	method, path string // gin's method and full pattern
	group        routeGroup
	handler      func(s *Server) gin.HandlerFunc
	body         bodyKind
	// status is a write's success status (0: 200): the status a stored
	// answer is replayed with.
	status int
	idem   idemKind
	// idemOf, when set, decides idem from the request body (read into
	// memory by the idempotency middleware): one route may run a read
	// whose effect is its one oplog entry, or a write that is not.
	idemOf func(body []byte) idemKind
	// idemRunFirst (idemOneTx routes whose only effect is their one keyed
	// transaction): run without reading the key's record first. A repeat
	// then fails in that transaction (the name it creates is taken, or the
	// key's upsert finds the record) and commits nothing, and execute's
	// check of a request that committed nothing reads the record and
	// answers from it, as the read before would have: the success path
	// saves that read (a round trip on PostgreSQL). The fork, and the
	// preflights (POST /merges without materialize, whose idemOf is
	// idemOneTx, and the batch): their one effect is the read-only entry;
	// a repeat computes the merge again in memory, writes nothing and is
	// answered from the record.
	idemRunFirst bool
	// uploadSlot: the route holds an upload slot (uploadSlot; on /mcp the
	// MCP slot) while it runs.
	uploadSlot bool
	// preAuth is the route's rule decided before any body is read (nil:
	// left to the handler, e.g. a rule that depends on the body).
	preAuth *preAuth
	// runner: a runner key may call it (runner keys may call nothing else).
	runner bool
}

// key is "METHOD /pattern", as the middlewares look a route up.
func (f *routeFact) key() string { return f.method + " " + f.path }

// write reports whether the route changes something (takes an
// Idempotency-Key on /api/v1).
func (f *routeFact) write() bool {
	switch f.method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// successStatus is a write's status when it succeeds.
func (f *routeFact) successStatus() int {
	if f.status == 0 {
		return http.StatusOK
	}
	return f.status
}

var routeTable = []routeFact{
	{method: "GET", path: "/healthz", group: groupPublic, handler: (*Server).handleHealthz},
	{method: "GET", path: "/readyz", group: groupPublic, handler: (*Server).handleReadyz},
	{method: "GET", path: "/metrics", group: groupPublic, handler: func(s *Server) gin.HandlerFunc {
		return gin.WrapH(promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}))
	}},
	{method: "GET", path: "/api/v1/openapi.json", group: groupPublic, handler: (*Server).handleOpenAPI}, // api/openapi.yaml as JSON (openapi.go)
	// The MCP handler is built from the engine (registerRoutes); only when s.MCP is set.
	{method: "POST", path: "/mcp", group: groupMCP, body: bodyEdit, uploadSlot: true}, // upload.go: the slot of a large request
	{method: "GET", path: "/mcp", group: groupMCP, body: bodyEdit},
	{method: "DELETE", path: "/mcp", group: groupMCP, body: bodyEdit},
	{method: "POST", path: "/api/v1/keys", group: groupAPI, handler: (*Server).handleKeyCreate, status: http.StatusCreated, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleAgent}}}, // an agent mints scoped keys (auth.Mint decides)
	{method: "GET", path: "/api/v1/keys", group: groupAPI, handler: (*Server).handleKeyList},
	{method: "DELETE", path: "/api/v1/keys/:id", group: groupAPI, handler: (*Server).handleKeyRevoke, status: http.StatusNoContent, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleAgent}, keyID: canRevokeKey}}, // ... and revokes those it minted
	{method: "PUT", path: "/api/v1/keys/:id/quota", group: groupAPI, handler: (*Server).handleKeyQuota, status: http.StatusNoContent, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/whoami", group: groupAPI, handler: (*Server).handleWhoami, runner: true},
	{method: "POST", path: "/api/v1/gc", group: groupAPI, handler: (*Server).handleGC, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/oplog", group: groupAPI, handler: (*Server).handleOplogList},
	{method: "GET", path: "/api/v1/oplog/verify", group: groupAPI, handler: (*Server).handleOplogVerify},
	{method: "POST", path: "/api/v1/repos", group: groupAPI, handler: (*Server).handleRepoCreate, status: http.StatusCreated, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos", group: groupAPI, handler: (*Server).handleRepoList},
	{method: "GET", path: "/api/v1/repos/:repo", group: groupAPI, handler: (*Server).handleRepoGet},
	{method: "DELETE", path: "/api/v1/repos/:repo", group: groupAPI, handler: (*Server).handleAbandon, preAuth: &preAuth{repo: canDeleteWorkspace}},
	{method: "POST", path: "/api/v1/repos/:repo/status", group: groupAPI, handler: (*Server).handleStatus},
	{method: "POST", path: "/api/v1/repos/:repo/forks", group: groupAPI, handler: (*Server).handleFork, status: http.StatusCreated, idem: idemOneTx, idemRunFirst: true, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleAgent}}},
	{method: "GET", path: "/api/v1/repos/:repo/workspaces", group: groupAPI, handler: (*Server).handleWorkspaces},
	{method: "GET", path: "/api/v1/repos/:repo/attempts", group: groupAPI, handler: (*Server).handleAttempts},
	{method: "GET", path: "/api/v1/repos/:repo/usage", group: groupAPI, handler: (*Server).handleUsage, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/retention", group: groupAPI, handler: (*Server).handleRetentionGet, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "PUT", path: "/api/v1/repos/:repo/retention", group: groupAPI, handler: (*Server).handleRetentionPut, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/refs", group: groupAPI, handler: (*Server).handleRefs},
	{method: "PUT", path: "/api/v1/repos/:repo/worktree", group: groupAPI, handler: (*Server).handleWorktree, body: bodyUpload, status: http.StatusCreated, idem: idemOneTx, uploadSlot: true, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "POST", path: "/api/v1/repos/:repo/edits", group: groupAPI, handler: (*Server).handleEdits, body: bodyEdit, status: http.StatusCreated, idem: idemOneTx, uploadSlot: true, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "POST", path: "/api/v1/repos/:repo/objects/missing", group: groupAPI, handler: (*Server).handleObjectsMissing, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "POST", path: "/api/v1/repos/:repo/objects", group: groupAPI, handler: (*Server).handleObjectsUpload, body: bodyUpload, uploadSlot: true, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "POST", path: "/api/v1/repos/:repo/rollback", group: groupAPI, handler: (*Server).handleRollback, status: http.StatusCreated, idem: idemOneTx, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "GET", path: "/api/v1/repos/:repo/commits", group: groupAPI, handler: (*Server).handleLog},
	{method: "GET", path: "/api/v1/repos/:repo/commits/:rev", group: groupAPI, handler: (*Server).handleCommit},
	{method: "GET", path: "/api/v1/repos/:repo/tree/:rev", group: groupAPI, handler: (*Server).handleTree},
	{method: "GET", path: "/api/v1/repos/:repo/blob/:rev/*path", group: groupAPI, handler: (*Server).handleBlob},
	{method: "GET", path: "/api/v1/repos/:repo/archive/:rev", group: groupAPI, handler: (*Server).handleArchive},
	{method: "GET", path: "/api/v1/repos/:repo/compare", group: groupAPI, handler: (*Server).handleCompare},
	{method: "POST", path: "/api/v1/repos/:repo/merges", group: groupAPI, handler: (*Server).handleMerge, idemOf: mergeIdem, idemRunFirst: true},
	{method: "POST", path: "/api/v1/repos/:repo/merges/preflight", group: groupAPI, handler: (*Server).handlePreflightBatch, idem: idemOneTx, idemRunFirst: true},
	{method: "POST", path: "/api/v1/repos/:repo/sync", group: groupAPI, handler: (*Server).handleSync, preAuth: &preAuth{repo: canWriteWorkspace("")}},
	{method: "PUT", path: "/api/v1/repos/:repo/gate", group: groupAPI, handler: (*Server).handleGateSet, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/gate", group: groupAPI, handler: (*Server).handleGateGet},
	{method: "GET", path: "/api/v1/repos/:repo/gate/evaluate", group: groupAPI, handler: (*Server).handleGateEvaluate},
	{method: "POST", path: "/api/v1/repos/:repo/commits/:rev/checks", group: groupAPI, handler: (*Server).handleCheckPost, status: http.StatusCreated, idem: idemOneTx, preAuth: &preAuth{roles: []string{lockstep.RoleCI, lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/commits/:rev/checks", group: groupAPI, handler: (*Server).handleCheckList},
	{method: "POST", path: "/api/v1/repos/:repo/hooks", group: groupAPI, handler: (*Server).handleHookCreate, status: http.StatusCreated, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleCI}, repo: canManageHooks}},
	{method: "GET", path: "/api/v1/repos/:repo/hooks", group: groupAPI, handler: (*Server).handleHookList},
	{method: "DELETE", path: "/api/v1/repos/:repo/hooks/:id", group: groupAPI, handler: (*Server).handleHookDelete, status: http.StatusNoContent, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleCI}, repo: canManageHooks}},
	{method: "POST", path: "/api/v1/repos/:repo/hooks/:id/rotate", group: groupAPI, handler: (*Server).handleHookRotate, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin, lockstep.RoleCI}, repo: canManageHooks}},
	{method: "GET", path: "/api/v1/repos/:repo/hooks/:id/deliveries", group: groupAPI, handler: (*Server).handleDeliveries},
	{method: "POST", path: "/api/v1/repos/:repo/promote", group: groupAPI, handler: (*Server).handlePromote, preAuth: &preAuth{repo: canWriteWorkspace("only the workspace's owner or an admin may promote %s")}},
	{method: "PUT", path: "/api/v1/repos/:repo/database", group: groupAPI, handler: (*Server).handleDatabaseBind, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/database", group: groupAPI, handler: (*Server).handleDatabaseGet},
	{method: "POST", path: "/api/v1/repos/:repo/database/refresh", group: groupAPI, handler: (*Server).handleDatabaseRefresh, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/redis", group: groupAPI, handler: (*Server).handleRedisGet},
	{method: "POST", path: "/api/v1/repos/:repo/checkpoints", group: groupAPI, handler: (*Server).handleCheckpointCreate, status: http.StatusCreated, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "GET", path: "/api/v1/repos/:repo/checkpoints", group: groupAPI, handler: (*Server).handleCheckpointList},
	{method: "POST", path: "/api/v1/repos/:repo/checkpoints/:id/restore", group: groupAPI, handler: (*Server).handleCheckpointRestore, preAuth: &preAuth{repo: canWriteRepo}},
	{method: "POST", path: "/api/v1/repos/:repo/effects", group: groupAPI, handler: (*Server).handleEffectStage, body: bodyEffect, status: http.StatusCreated, idem: idemOneTx, preAuth: &preAuth{repo: canStageEffect}},
	{method: "GET", path: "/api/v1/repos/:repo/effects", group: groupAPI, handler: (*Server).handleEffectList},
	{method: "POST", path: "/api/v1/repos/:repo/effects/discard", group: groupAPI, handler: (*Server).handleEffectDiscard, preAuth: &preAuth{repo: canStageEffect}},
	{method: "POST", path: "/api/v1/repos/:repo/effects/compensate", group: groupAPI, handler: (*Server).handleEffectCompensateCommit, preAuth: &preAuth{roles: []string{lockstep.RoleAdmin}}},
	{method: "GET", path: "/api/v1/repos/:repo/effects/:id", group: groupAPI, handler: (*Server).handleEffectGet},
	{method: "POST", path: "/api/v1/repos/:repo/effects/:id/approve", group: groupAPI, handler: func(s *Server) gin.HandlerFunc { return s.handleEffectDecide(true) }, preAuth: &preAuth{roles: []string{lockstep.RoleReviewer, lockstep.RoleAdmin}}},
	{method: "POST", path: "/api/v1/repos/:repo/effects/:id/reject", group: groupAPI, handler: func(s *Server) gin.HandlerFunc { return s.handleEffectDecide(false) }, preAuth: &preAuth{roles: []string{lockstep.RoleReviewer, lockstep.RoleAdmin}}},
	{method: "POST", path: "/api/v1/repos/:repo/effects/:id/compensate", group: groupAPI, handler: (*Server).handleEffectCompensate},
	{method: "POST", path: "/api/v1/repos/:repo/runs", group: groupAPI, handler: (*Server).handleRunReport, status: http.StatusCreated, preAuth: &preAuth{repo: canWriteWorkspace("")}},
	{method: "POST", path: "/api/v1/repos/:repo/jobs", group: groupAPI, handler: (*Server).handleJobCreate, idem: idemNone, preAuth: &preAuth{repo: canWriteWorkspace("only the workspace's owner or an admin may run commands on %s")}},
	{method: "GET", path: "/api/v1/repos/:repo/jobs/:id", group: groupAPI, handler: (*Server).handleJobGet, preAuth: &preAuth{repo: canWriteWorkspace("only the workspace's owner or an admin may see the run jobs of %s")}},
	{method: "POST", path: "/api/v1/runners", group: groupAPI, handler: (*Server).handleRunnerRegister, preAuth: &preAuth{roles: []string{lockstep.RoleRunner}}, runner: true},
	{method: "POST", path: "/api/v1/runners/:id/jobs", group: groupAPI, handler: (*Server).handleRunnerTake, idem: idemNone, preAuth: &preAuth{roles: []string{lockstep.RoleRunner}}, runner: true},
	{method: "POST", path: "/api/v1/runners/:id/jobs/:job/output", group: groupAPI, handler: (*Server).handleRunnerOutput, idem: idemNone, preAuth: &preAuth{roles: []string{lockstep.RoleRunner}}, runner: true},
	{method: "POST", path: "/api/v1/runners/:id/jobs/:job/result", group: groupAPI, handler: (*Server).handleRunnerResult, idem: idemNone, preAuth: &preAuth{roles: []string{lockstep.RoleRunner}}, runner: true},
	{method: "GET", path: "/git/:repo/info/refs", group: groupGit, handler: (*Server).handleGitInfoRefs},
	{method: "POST", path: "/git/:repo/git-upload-pack", group: groupGit, handler: (*Server).handleGitUploadPack, body: bodyUpload},
	{method: "POST", path: "/git/:repo/git-receive-pack", group: groupGit, handler: (*Server).handleGitReceivePack, body: bodyUpload, uploadSlot: true, preAuth: &preAuth{repo: canWriteRepo}},
}

// routeIndex is routeTable by key.
var routeIndex = indexRoutes(routeTable)

func indexRoutes(t []routeFact) map[string]*routeFact {
	m := make(map[string]*routeFact, len(t))
	for i := range t {
		m[t[i].key()] = &t[i]
	}
	return m
}

// factsOf returns the facts of a route ("METHOD /pattern"), or the zero
// facts (a JSON body, nothing else) for one not in the table (a 404).
func factsOf(route string) *routeFact {
	if f, ok := routeIndex[route]; ok {
		return f
	}
	return &routeFact{}
}
