package web

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/repositories"
)

// Authorization and admission come before any request body is read, for
// every route, with or without an Idempotency-Key: admit runs after
// authenticate and before idempotency (which reads a keyed body ahead of
// the handler to fingerprint it). It refuses, without touching the body,
// a caller whose role or ownership can never allow the route (the rule
// the route's service applies first, decided from the route, its :repo
// and the key), then takes an upload slot on the upload routes. The
// declared Content-Length was checked before (bodyLimits). The services
// check the same rules again on what they read themselves: this is the
// early refusal, not the only one.

// preAuth is a route's early rule: by role alone (roles), on the
// repository named by :repo (repo), or on the key named by :id (keyID).
type preAuth struct {
	roles []string
	repo  func(k *lockstep.Key, r *lockstep.Repo) error
	keyID func(s *Server, c *gin.Context, k *lockstep.Key, id string) error
}

func canWriteRepo(k *lockstep.Key, r *lockstep.Repo) error { return repositories.CanWrite(k, r) }

// canWriteWorkspace is CanWrite on a workspace; a base repository is left
// to the handler (its own, more precise refusal).
func canWriteWorkspace(msg string) func(k *lockstep.Key, r *lockstep.Repo) error {
	return func(k *lockstep.Key, r *lockstep.Repo) error {
		if r.ForkOf == "" {
			return nil
		}
		if err := repositories.CanWrite(k, r); err != nil {
			if msg != "" {
				return lockstep.Errorf(lockstep.EFORBIDDEN, msg, r.Name)
			}
			return err
		}
		return nil
	}
}

// canDeleteWorkspace is the rule of DELETE /repos/{ws} (abandon and
// purge alike): the workspace's owner or an admin; a base repository is
// left to the handler (its invalid_argument).
func canDeleteWorkspace(k *lockstep.Key, r *lockstep.Repo) error {
	if !r.IsWorkspace() || k.Role == lockstep.RoleAdmin || k.Owns(r) {
		return nil
	}
	return lockstep.Errorf(lockstep.EFORBIDDEN, "only the workspace's owner or an admin may delete %s (abandon or purge)", r.Name)
}

// canManageHooks is gate.CanManageHooks (create, rotate, delete).
func canManageHooks(k *lockstep.Key, r *lockstep.Repo) error { return gate.CanManageHooks(k, r.Name) }

// canStageEffect is effects.CanStage (stage, discard).
func canStageEffect(k *lockstep.Key, r *lockstep.Repo) error { return effects.CanStage(k, r) }

// canRevokeKey: an admin revokes any key, another key only those it
// minted (auth.Service.Revoke).
func canRevokeKey(s *Server, c *gin.Context, k *lockstep.Key, id string) error {
	if k.Role == lockstep.RoleAdmin {
		return nil
	}
	return s.Keys.MayRevoke(c.Request.Context(), k, id)
}

// Each route's rule is its preAuth in routeTable (routefacts.go). Routes
// whose rule depends on the body have none (a merge preflight is open to
// every key; a status change's rule depends on the status).

// admit is the middleware (routes.go: after authenticate, before
// idempotency and any handler).
func (s *Server) admit(c *gin.Context) {
	route := c.Request.Method + " " + c.FullPath()
	f := factsOf(route)
	err := s.preAuthorize(c, route, f)
	if err == nil && f.uploadSlot {
		// Every write (an MCP tool's edits too: they call the edits
		// route in-process) is refused here once the key's active
		// workspaces reached --quota-storage-bytes.
		err = s.checkStorageQuota(c.Request.Context(), c, caller(c))
	}
	if err == nil && route == "GET /git/:repo/info/refs" && c.Query("service") == "git-receive-pack" {
		// A git push is refused at its first request too: git prints
		// that answer's text, not the pack POST's.
		if err = s.checkStorageQuota(c.Request.Context(), c, caller(c)); err != nil {
			gitAdvertiseError(c, err)
			c.Abort()
			return
		}
	}
	if err != nil {
		if c.Request.Body != nil && c.Request.Body != http.NoBody {
			// The body stays unread: do not wait for it after the answer.
			c.Header("Connection", "close")
		}
		if strings.HasPrefix(route, "POST /git/") {
			gitAdvertiseError(c, err) // git prints its text
		} else {
			writeError(c, err)
		}
		c.Abort()
		return
	}
	if f.uploadSlot {
		s.uploadSlot(c)
		return
	}
	c.Next()
}

// notRunner refuses a runner key: it takes jobs and posts their output,
// nothing else (it acts on a job's workspace with the job's own key), on
// the API, git, /mcp and the UI alike.
func notRunner(k *lockstep.Key) error {
	if k != nil && k.Role == lockstep.RoleRunner {
		return lockstep.Errorf(lockstep.EFORBIDDEN, "a runner key may only register, take run jobs and post their output and result")
	}
	return nil
}

// refuseRunner is /mcp's notRunner, after authenticate.
func (s *Server) refuseRunner(c *gin.Context) {
	if err := notRunner(caller(c)); err != nil {
		writeError(c, err)
		c.Abort()
		return
	}
	c.Next()
}

func (s *Server) preAuthorize(c *gin.Context, route string, f *routeFact) error {
	if k := caller(c); !f.runner {
		if err := notRunner(k); err != nil {
			return err
		}
	}
	rule := f.preAuth
	if rule == nil {
		return nil
	}
	k := caller(c)
	if k == nil {
		return lockstep.Errorf(lockstep.EUNAUTH, "missing API key: send Authorization: Bearer <key>")
	}
	if len(rule.roles) > 0 {
		if err := auth.Require(k, rule.roles...); err != nil {
			return err
		}
	}
	if rule.repo != nil && s.Repos != nil {
		name := c.Param("repo")
		if strings.Contains(route, " /git/") {
			name = strings.TrimSuffix(name, ".git") // as gitRepo
		}
		r, err := s.Repos.Repo(c.Request.Context(), name)
		if err != nil {
			return err
		}
		if err := rule.repo(k, r); err != nil {
			return err
		}
	}
	if rule.keyID != nil {
		if err := rule.keyID(s, c, k, c.Param("id")); err != nil {
			return err
		}
	}
	return nil
}
