package web

import (
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// registerRoutes declares the whole API. Public: health, readiness,
// metrics. Everything under /api/v1 and /git needs a key.
func (s *Server) registerRoutes(e *gin.Engine) {
	e.GET("/healthz", s.handleHealthz())
	e.GET("/readyz", s.handleReadyz())
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{})))
	e.GET("/api/v1/openapi.json", s.handleOpenAPI()) // public: api/openapi.yaml as JSON (openapi.go)

	if s.MCP != nil {
		// Model Context Protocol (streamable HTTP): the same keys and roles.
		mcp := gin.WrapH(s.MCP(e))
		e.POST("/mcp", s.authenticate, s.mcpSlot, s.mcpHoldSlot, mcp) // upload.go: the slot of a large request
		e.GET("/mcp", s.authenticate, mcp)
		e.DELETE("/mcp", s.authenticate, mcp)
	}

	api := e.Group("/api/v1", s.authenticate, s.admit, s.idempotency) // admit.go: authorization and upload slots before any body is read; idempotency.go: Idempotency-Key on writes
	api.POST("/keys", s.handleKeyCreate())
	api.GET("/keys", s.handleKeyList())
	api.DELETE("/keys/:id", s.handleKeyRevoke())
	api.PUT("/keys/:id/quota", s.handleKeyQuota()) // key.go: per-key workspace quota
	api.GET("/whoami", s.handleWhoami())

	api.POST("/gc", s.handleGC()) // gc.go: object GC now (admin)
	api.GET("/oplog", s.handleOplogList())
	api.GET("/oplog/verify", s.handleOplogVerify())

	api.POST("/repos", s.handleRepoCreate())
	api.GET("/repos", s.handleRepoList())
	api.GET("/repos/:repo", s.handleRepoGet())
	api.DELETE("/repos/:repo", s.handleAbandon())
	api.POST("/repos/:repo/status", s.handleStatus())
	api.POST("/repos/:repo/forks", s.handleFork())
	api.GET("/repos/:repo/workspaces", s.handleWorkspaces())
	api.GET("/repos/:repo/attempts", s.handleAttempts())
	api.GET("/repos/:repo/usage", s.handleUsage())            // repo.go: storage of its network (admins)
	api.GET("/repos/:repo/retention", s.handleRetentionGet()) // retention.go: a base's retention policy (admins)
	api.PUT("/repos/:repo/retention", s.handleRetentionPut())
	api.GET("/repos/:repo/refs", s.handleRefs())
	api.PUT("/repos/:repo/worktree", s.handleWorktree())
	api.POST("/repos/:repo/edits", s.handleEdits())
	api.POST("/repos/:repo/objects/missing", s.handleObjectsMissing())
	api.POST("/repos/:repo/objects", s.handleObjectsUpload())
	api.POST("/repos/:repo/rollback", s.handleRollback())
	api.GET("/repos/:repo/commits", s.handleLog())
	api.GET("/repos/:repo/commits/:rev", s.handleCommit())
	api.GET("/repos/:repo/tree/:rev", s.handleTree())
	api.GET("/repos/:repo/blob/:rev/*path", s.handleBlob())
	api.GET("/repos/:repo/archive/:rev", s.handleArchive())
	api.GET("/repos/:repo/compare", s.handleCompare())
	api.POST("/repos/:repo/merges", s.handleMerge())
	api.POST("/repos/:repo/merges/preflight", s.handlePreflightBatch())
	api.POST("/repos/:repo/sync", s.handleSync())
	api.PUT("/repos/:repo/gate", s.handleGateSet())
	api.GET("/repos/:repo/gate", s.handleGateGet())
	api.GET("/repos/:repo/gate/evaluate", s.handleGateEvaluate())
	api.POST("/repos/:repo/commits/:rev/checks", s.handleCheckPost())
	api.GET("/repos/:repo/commits/:rev/checks", s.handleCheckList())
	api.POST("/repos/:repo/hooks", s.handleHookCreate())
	api.GET("/repos/:repo/hooks", s.handleHookList())
	api.DELETE("/repos/:repo/hooks/:id", s.handleHookDelete())
	api.POST("/repos/:repo/hooks/:id/rotate", s.handleHookRotate())
	api.GET("/repos/:repo/hooks/:id/deliveries", s.handleDeliveries())
	api.POST("/repos/:repo/promote", s.handlePromote())
	api.PUT("/repos/:repo/database", s.handleDatabaseBind())
	api.GET("/repos/:repo/database", s.handleDatabaseGet())
	api.POST("/repos/:repo/database/refresh", s.handleDatabaseRefresh())
	api.GET("/repos/:repo/redis", s.handleRedisGet())
	api.POST("/repos/:repo/checkpoints", s.handleCheckpointCreate())
	api.GET("/repos/:repo/checkpoints", s.handleCheckpointList())
	api.POST("/repos/:repo/checkpoints/:id/restore", s.handleCheckpointRestore())
	// The effects outbox (effects.go).
	api.POST("/repos/:repo/effects", s.handleEffectStage())
	api.GET("/repos/:repo/effects", s.handleEffectList())
	api.POST("/repos/:repo/effects/discard", s.handleEffectDiscard())
	api.POST("/repos/:repo/effects/compensate", s.handleEffectCompensateCommit())
	api.GET("/repos/:repo/effects/:id", s.handleEffectGet())
	api.POST("/repos/:repo/effects/:id/approve", s.handleEffectDecide(true))
	api.POST("/repos/:repo/effects/:id/reject", s.handleEffectDecide(false))
	api.POST("/repos/:repo/effects/:id/compensate", s.handleEffectCompensate())
	api.POST("/repos/:repo/runs", s.handleRunReport()) // a lockstep run's report (runs.go)
	// Run jobs on runners (runjobs.go).
	api.POST("/repos/:repo/jobs", s.handleJobCreate())
	api.GET("/repos/:repo/jobs/:id", s.handleJobGet())
	api.POST("/runners", s.handleRunnerRegister())
	api.POST("/runners/:id/jobs", s.handleRunnerTake())
	api.POST("/runners/:id/jobs/:job/output", s.handleRunnerOutput())
	api.POST("/runners/:id/jobs/:job/result", s.handleRunnerResult())

	git := e.Group("/git", s.authenticate, s.admit)
	git.GET("/:repo/info/refs", s.handleGitInfoRefs())
	git.POST("/:repo/git-upload-pack", s.handleGitUploadPack())
	git.POST("/:repo/git-receive-pack", s.handleGitReceivePack())

	s.registerUI(e) // the reviewers' UI under /ui/ (ui.go)
}
