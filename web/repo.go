package web

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/workspaces"
)

func (s *Server) handleRepoCreate() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.RepoCreateRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		r, err := s.Repos.CreateRepo(c.Request.Context(), caller(c), req.Name, req.DefaultBranch)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, repositories.RepoInfo{Repo: r})
	}
}

func (s *Server) handleRepoList() gin.HandlerFunc {
	return func(c *gin.Context) {
		f := lockstep.RepoFilter{ForkOf: c.Query("fork_of"), Network: c.Query("network")}
		repos, err := s.Repos.Repos(c.Request.Context(), f)
		if err != nil {
			writeError(c, err)
			return
		}
		repos = inScope(caller(c), repos)
		if repos == nil {
			repos = []*lockstep.Repo{}
		}
		c.JSON(http.StatusOK, gin.H{"repos": repos})
	}
}

// inScope is the repositories of repos k may act on: all of them, unless
// k is a scoped key (its owner, tips and task would otherwise name the
// workspaces outside its scope).
func inScope(k *lockstep.Key, repos []*lockstep.Repo) []*lockstep.Repo {
	if k == nil || k.Scope == nil {
		return repos
	}
	out := repos[:0:0]
	for _, r := range repos {
		if k.InScope(r) == nil {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) handleRepoGet() gin.HandlerFunc {
	return func(c *gin.Context) {
		info, err := s.Repos.Info(c.Request.Context(), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, info)
	}
}

// handleUsage answers the storage of a repository's fork network
// (issue 28: storage accounting, admins only).
func (s *Server) handleUsage() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx := c.Request.Context()
		u, err := s.Repos.Usage(ctx, caller(c), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		if s.Workspaces != nil {
			if err := s.Workspaces.AddBranchUsage(ctx, u); err != nil {
				writeError(c, err)
				return
			}
		}
		if u.Reclaimable, err = s.reclaimable(ctx, u.Repo); err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, u)
	}
}

func (s *Server) handleFork() gin.HandlerFunc {
	return func(c *gin.Context) {
		// Refused before the body is read when already at the quota; the
		// fork's transaction counts again, so racing forks stop there.
		k := caller(c)
		if err := s.checkWorkspaceQuota(c, k); err != nil {
			writeError(c, err)
			return
		}
		var req api.ForkRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		maxOwned := 0
		if k.Role != lockstep.RoleAdmin {
			maxOwned = s.workspaceQuota(k)
		}
		res, err := s.Workspaces.ForkWithin(c.Request.Context(), k, c.Param("repo"), req.Name, req.Task, maxOwned)
		if lockstep.ErrorCode(err) == lockstep.ERATELIMITED {
			c.Header("Retry-After", "60")
		}
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, res)
	}
}

func (s *Server) handleWorkspaces() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 100, workspaces.MaxWorkspacePage)
		if err != nil {
			writeError(c, err)
			return
		}
		ws, next, err := s.Workspaces.Workspaces(c.Request.Context(), c.Param("repo"),
			workspaces.WorkspaceQuery{Task: c.Query("task"), Status: lockstep.Status(c.Query("status")), After: c.Query("after"), Limit: limit})
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"workspaces": ws, "next_after": next})
	}
}

func (s *Server) handleAttempts() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 100, MaxListLimit)
		if err != nil {
			writeError(c, err)
			return
		}
		a, err := s.Workspaces.Attempts(c.Request.Context(), c.Param("repo"), limit)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"attempts": a})
	}
}

func (s *Server) handleAbandon() gin.HandlerFunc {
	return func(c *gin.Context) {
		switch c.Query("purge") {
		case "", "false":
		case "true":
			ws, err := s.Workspaces.Purge(c.Request.Context(), caller(c), c.Param("repo"))
			if err != nil {
				writeError(c, err)
				return
			}
			c.JSON(http.StatusOK, ws)
			return
		default:
			writeError(c, lockstep.Errorf(lockstep.EINVALID, "purge=%q: want true or false", c.Query("purge")))
			return
		}
		ws, err := s.Workspaces.SetStatus(c.Request.Context(), caller(c), c.Param("repo"), lockstep.StatusAbandoned, c.Query("reason"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, ws)
	}
}

func (s *Server) handleStatus() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.StatusRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		ws, err := s.Workspaces.SetStatus(c.Request.Context(), caller(c), c.Param("repo"), lockstep.Status(req.Status), req.Reason)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, ws)
	}
}

func (s *Server) handleRefs() gin.HandlerFunc {
	return func(c *gin.Context) {
		refs, err := s.Repos.Refs(c.Request.Context(), c.Param("repo"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"refs": refs})
	}
}

// writeOptions reads the compare-and-swap query parameters.
func writeOptions(c *gin.Context) (repositories.WriteOptions, error) {
	o := repositories.WriteOptions{Branch: c.Query("branch"), ExpectOID: c.Query("expect_oid"), Message: c.Query("message"), Author: c.Query("author"), From: c.Query("from")}
	var err error
	if o.Force, err = queryBool(c, "force"); err != nil {
		return o, err
	}
	if o.AllowEmpty, err = queryBool(c, "allow_empty"); err != nil {
		return o, err
	}
	return o, nil
}

// limitedBody caps an upload body and remembers whether the cap tripped,
// so the answer is too_large whatever the parser made of the cut stream.
type limitedBody struct {
	r       io.Reader
	left    int64
	tripped bool
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.tripped = true
		return 0, lockstep.Errorf(lockstep.ETOOLARGE, "upload over the limit")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left <= 0 && err == nil {
		// Probe for one more byte: exactly at the limit is fine.
		var b [1]byte
		if m, _ := l.r.Read(b[:]); m > 0 {
			l.tripped = true
			return n, lockstep.Errorf(lockstep.ETOOLARGE, "upload over the limit")
		}
	}
	return n, err
}

func (s *Server) uploadBody(c *gin.Context) *limitedBody {
	max := s.Config.MaxUploadBytes
	if max <= 0 {
		max = 512 << 20
	}
	return &limitedBody{r: c.Request.Body, left: max}
}

func (s *Server) tooLarge() error {
	return lockstep.Errorf(lockstep.ETOOLARGE, "upload body over --max-upload-bytes (%d bytes)", s.Config.MaxUploadBytes)
}

func (s *Server) handleWorktree() gin.HandlerFunc {
	return func(c *gin.Context) {
		opts, err := writeOptions(c)
		if err != nil {
			writeError(c, err)
			return
		}
		var res *repositories.PushResult
		if tree := c.Query("tree"); tree != "" {
			res, err = s.Repos.PushTree(c.Request.Context(), caller(c), c.Param("repo"), tree, opts)
		} else {
			ct, _, _ := mime.ParseMediaType(c.GetHeader("Content-Type"))
			switch ct {
			case "application/x-tar", "application/gzip", "application/x-gzip", "application/tar+gzip", "application/octet-stream", "":
			default:
				writeError(c, lockstep.Errorf(lockstep.EINVALID, "content type %q: want application/x-tar (optionally gzip-compressed)", ct))
				return
			}
			body := s.uploadBody(c)
			res, err = s.Repos.PushTar(c.Request.Context(), caller(c), c.Param("repo"), body, opts)
			if err != nil && body.tripped {
				err = s.tooLarge()
			}
		}
		if err != nil {
			writeError(c, err)
			return
		}
		status := http.StatusOK
		if res.Changed {
			status = http.StatusCreated
		}
		c.JSON(status, res)
	}
}

func (s *Server) handleObjectsMissing() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.MissingRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		missing, err := s.Repos.Missing(c.Request.Context(), caller(c), c.Param("repo"), req.OIDs)
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.MissingResult{Missing: missing})
	}
}

func (s *Server) handleObjectsUpload() gin.HandlerFunc {
	return func(c *gin.Context) {
		body := s.uploadBody(c)
		stats, err := s.Repos.UploadPack(c.Request.Context(), caller(c), c.Param("repo"), body)
		if err != nil && body.tripped {
			err = s.tooLarge()
		}
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, api.UploadStats{ObjectsWritten: stats.Objects, BytesWritten: stats.Bytes})
	}
}

func (s *Server) handleRollback() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.RollbackRequest
		if err := s.decodeJSON(c, &req); err != nil {
			writeError(c, err)
			return
		}
		res, err := s.Repos.Rollback(c.Request.Context(), caller(c), c.Param("repo"), req.To,
			repositories.WriteOptions{Branch: req.Branch, ExpectOID: req.ExpectOID, Message: req.Message, Force: req.Force})
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusCreated, res)
	}
}

func (s *Server) handleLog() gin.HandlerFunc {
	return func(c *gin.Context) {
		limit, err := queryLimit(c, 50, MaxListLimit)
		if err != nil {
			writeError(c, err)
			return
		}
		commits, err := s.Repos.Log(c.Request.Context(), c.Param("repo"), c.Query("ref"), limit, c.Query("after"))
		if err != nil {
			writeError(c, err)
			return
		}
		out := make([]api.Commit, len(commits))
		for i := range commits {
			out[i] = toCommitJSON(&commits[i])
		}
		next := ""
		if limit > 0 && len(out) == limit {
			next = out[len(out)-1].Commit
		}
		c.JSON(http.StatusOK, api.CommitPage{Commits: out, NextAfter: next})
	}
}

func (s *Server) handleCommit() gin.HandlerFunc {
	return func(c *gin.Context) {
		ci, err := s.Repos.Commit(c.Request.Context(), c.Param("repo"), c.Param("rev"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, toCommitJSON(ci))
	}
}

func (s *Server) handleTree() gin.HandlerFunc {
	return func(c *gin.Context) {
		entries, err := s.Repos.Tree(c.Request.Context(), c.Param("repo"), c.Param("rev"), strings.Trim(c.Query("path"), "/"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, gin.H{"entries": entries})
	}
}

func (s *Server) handleBlob() gin.HandlerFunc {
	return func(c *gin.Context) {
		p := strings.TrimPrefix(c.Param("path"), "/")
		info, rc, err := s.Repos.Blob(c.Request.Context(), c.Param("repo"), c.Param("rev"), p)
		if err != nil {
			writeError(c, err)
			return
		}
		defer rc.Close()
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" || strings.HasPrefix(ct, "text/html") {
			ct = "application/octet-stream"
			if info.Mode == "120000" {
				ct = "text/plain; charset=utf-8"
			}
		}
		c.Header("X-Content-Type-Options", "nosniff")
		c.Header("Content-Security-Policy", "sandbox; default-src 'none'") // repository content is untrusted
		c.Header("X-Lockstep-Blob", info.Hash.String())
		c.Header("X-Lockstep-Mode", info.Mode)
		c.DataFromReader(http.StatusOK, info.Size, ct, rc, nil)
	}
}

func (s *Server) handleArchive() gin.HandlerFunc {
	return func(c *gin.Context) {
		err := s.Repos.Archive(c.Request.Context(), c.Param("repo"), c.Param("rev"), c.Writer, func(commit string) {
			c.Header("Content-Type", "application/x-tar")
			c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.tar"`, c.Param("repo"), commit[:12]))
			c.Header("X-Lockstep-Commit", commit)
			c.Status(http.StatusOK)
		})
		if err != nil {
			if !c.Writer.Written() {
				writeError(c, err)
				return
			}
			// Headers are gone: abort the stream so the client sees a
			// truncated tar, never a silently short one.
			c.Set("error", err.Error())
			panic(http.ErrAbortHandler)
		}
	}
}

func (s *Server) handleCompare() gin.HandlerFunc {
	return func(c *gin.Context) {
		res, err := s.Repos.Compare(c.Request.Context(), c.Param("repo"), c.Query("base"), c.Query("head"))
		if err != nil {
			writeError(c, err)
			return
		}
		c.JSON(http.StatusOK, res)
	}
}

func toCommitJSON(ci *gitobj.CommitInfo) api.Commit {
	out := api.Commit{Commit: ci.Hash.String(), Tree: ci.Tree.String(), Parents: []string{}, Message: ci.Message,
		Author:    api.Signature{Name: ci.Author.Name, Email: ci.Author.Email, Time: ci.Author.When.UTC().Format(time.RFC3339)},
		Committer: api.Signature{Name: ci.Committer.Name, Email: ci.Committer.Email, Time: ci.Committer.When.UTC().Format(time.RFC3339)},
		Time:      ci.Committer.When.UTC().Format(time.RFC3339)}
	for _, p := range ci.Parents {
		out.Parents = append(out.Parents, p.String())
	}
	return out
}

// reclaimable is what the object GC would free in repo's network, by two
// dry runs: at the configured retention (now) and at none (once every
// unreachable object is older than the retention). nil when the store
// has no GC support (unavailable).
func (s *Server) reclaimable(ctx context.Context, repo string) (*api.Reclaimable, error) {
	retention := s.Config.ObjectRetention
	if retention <= 0 {
		retention = repositories.DefaultObjectRetention
	}
	now, err := s.Repos.GCPlan(ctx, repo, retention)
	if lockstep.ErrorCode(err) == lockstep.EUNAVAILABLE {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	all, err := s.Repos.GCPlan(ctx, repo, 0)
	if err != nil {
		return nil, err
	}
	return &api.Reclaimable{Retention: retention.String(), Objects: now.Objects, Bytes: now.Bytes,
		AfterRetentionObjects: all.Objects, AfterRetentionBytes: all.Bytes}, nil
}
