package web

import (
	"context"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep/api"
)

func (s *Server) handleHealthz() gin.HandlerFunc {
	return func(c *gin.Context) { c.JSON(http.StatusOK, api.Health{Status: "ok"}) }
}

// handleReadyz checks the metadata store and, when configured, Redis.
func (s *Server) handleReadyz() gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		checks := gin.H{}
		ok := true
		// A failing check answers "unavailable"; the driver's error (hosts,
		// ports, database names) goes to the log only.
		var errs []string
		if err := s.Store.Ping(ctx); err != nil {
			checks["store"], ok = "unavailable", false
			errs = append(errs, "store: "+err.Error())
		} else {
			checks["store"] = "ok"
		}
		if s.Redis != nil {
			if err := s.Redis.Ping(ctx).Err(); err != nil {
				checks["redis"], ok = "unavailable", false
				errs = append(errs, "redis: "+err.Error())
			} else {
				checks["redis"] = "ok"
			}
		}
		// Out of file descriptors or memory: this check cannot open a file
		// and a pipe (what every write and git verb needs), or a request
		// failed for want of them moments ago.
		if err := resourceCheck(); err != nil {
			checks["resources"], ok = "exhausted", false
			errs = append(errs, "resources: "+err.Error())
		} else if at := s.exhaustedAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < exhaustedWindow {
			checks["resources"], ok = "exhausted recently", false
			errs = append(errs, "resources: a request failed for want of file descriptors or memory in the last "+exhaustedWindow.String())
		} else {
			checks["resources"] = "ok"
		}
		// The object store down does not make the replica unready: reads
		// the cache can answer go on, writes answer 503 on their own.
		if s.ObjectStore != nil {
			if err := s.ObjectStore.Ping(ctx); err != nil {
				checks["object_store"] = "unavailable (writes fail; cached reads are served)"
				errs = append(errs, "object store: "+err.Error())
				c.Set("error", "object store: "+err.Error())
			} else {
				checks["object_store"] = "ok"
			}
		}
		// Refs the on-disk mirror cannot hold (git clients do not see them)
		// are reported, not fatal: everything else is served.
		if s.Repos != nil {
			if probs := s.Repos.MirrorProblems(); len(probs) > 0 {
				checks["ref_mirror_problems"] = len(probs)
				checks["ref_mirror"] = probs[:min(len(probs), 20)]
			} else {
				checks["ref_mirror"] = "ok"
			}
		}
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
			c.Set("error", strings.Join(errs, "; "))
		}
		c.JSON(status, api.Readiness{Ready: ok, Checks: checks})
	}
}

// exhaustedWindow is how long /readyz stays 503 after a request failed for
// want of file descriptors or memory.
const exhaustedWindow = 10 * time.Second

// resourceCheck opens a file and a pipe and closes them.
func resourceCheck() error {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	f.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	r.Close()
	w.Close()
	return nil
}
