package web

import (
	"encoding/base64"
	"net/http"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/repositories"
)

// editOf checks edit i of a batch (api.Edit: op write or delete, content
// as UTF-8 text or base64 bytes) and makes it a repositories.Edit.
func editOf(e api.Edit, i int) (repositories.Edit, error) {
	out := repositories.Edit{Path: e.Path, Executable: e.Executable}
	switch e.Op {
	case "delete":
		if e.Content != nil || e.ContentBase64 != nil || e.Executable {
			return out, lockstep.Errorf(lockstep.EINVALID, "edit %d (%s): a delete takes only a path", i, e.Path)
		}
		out.Delete = true
	case "write":
		switch {
		case e.Content != nil && e.ContentBase64 != nil:
			return out, lockstep.Errorf(lockstep.EINVALID, "edit %d (%s): give content or content_base64, not both", i, e.Path)
		case e.Content != nil:
			if !utf8.ValidString(*e.Content) {
				return out, lockstep.Errorf(lockstep.EINVALID, "edit %d (%s): content is not valid UTF-8: send content_base64", i, e.Path)
			}
			out.Content = []byte(*e.Content)
		case e.ContentBase64 != nil:
			b, err := base64.StdEncoding.DecodeString(*e.ContentBase64)
			if err != nil {
				return out, lockstep.Errorf(lockstep.EINVALID, "edit %d (%s): content_base64: %v", i, e.Path, err)
			}
			out.Content = b
		default:
			return out, lockstep.Errorf(lockstep.EINVALID, "edit %d (%s): a write needs content or content_base64 (\"\" for an empty file)", i, e.Path)
		}
	default:
		return out, lockstep.Errorf(lockstep.EINVALID, "edit %d: op %q: want write or delete", i, e.Op)
	}
	return out, nil
}

// handleEdits commits a batch of file edits (POST /repos/:repo/edits).
func (s *Server) handleEdits() gin.HandlerFunc {
	return func(c *gin.Context) {
		var req api.EditRequest
		if err := s.decodeJSONLimit(c, &req, s.Config.MaxEditBytes); err != nil {
			writeError(c, err)
			return
		}
		edits := make([]repositories.Edit, len(req.Edits))
		for i, e := range req.Edits {
			var err error
			if edits[i], err = editOf(e, i); err != nil {
				writeError(c, err)
				return
			}
		}
		opts := repositories.WriteOptions{Branch: req.Branch, ExpectOID: req.ExpectOID, Force: req.Force, Message: req.Message, Author: req.Author, From: req.From}
		res, err := s.Repos.EditFiles(c.Request.Context(), caller(c), c.Param("repo"), edits, opts)
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
