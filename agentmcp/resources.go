package agentmcp

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
)

// Resources: a workspace's files at its default branch, and its entries
// in the operations log.
//
//	lockstep://{workspace}/files/{+path}
//	lockstep://{workspace}/oplog
func (t *tools) resources(s *mcp.Server) {
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "workspace-file", Title: "A file of a workspace",
		Description: "The content of a file at the workspace's default branch.",
		URITemplate: "lockstep://{workspace}/files/{+path}"}, t.readFileResource)
	s.AddResourceTemplate(&mcp.ResourceTemplate{Name: "workspace-oplog", Title: "A workspace's operations log",
		Description: "The latest operations-log entries of a workspace: who did what, when, with which result.",
		MIMEType:    "application/json",
		URITemplate: "lockstep://{workspace}/oplog"}, t.readOplogResource)
}

// parseURI splits lockstep://ws/kind/rest.
func parseURI(uri string) (ws, kind, rest string, err error) {
	u, perr := url.Parse(uri)
	if perr != nil || u.Scheme != "lockstep" || u.Host == "" {
		return "", "", "", mcp.ResourceNotFoundError(uri)
	}
	p := strings.TrimPrefix(u.Path, "/")
	kind, rest, _ = strings.Cut(p, "/")
	return u.Host, kind, rest, nil
}

func (t *tools) readFileResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ws, kind, path, err := parseURI(req.Params.URI)
	if err != nil || kind != "files" || path == "" {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, err
	}
	var body []byte
	if _, err := c.Request(ctx, http.MethodGet, repoPath(ws, "blob", "HEAD", escapePath(path)), nil, nil, "", &body); err != nil {
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		return nil, err
	}
	rc := &mcp.ResourceContents{URI: req.Params.URI}
	if utf8.Valid(body) {
		rc.MIMEType, rc.Text = "text/plain; charset=utf-8", string(body)
	} else {
		rc.MIMEType, rc.Blob = "application/octet-stream", body
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{rc}}, nil
}

func (t *tools) readOplogResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	ws, kind, _, err := parseURI(req.Params.URI)
	if err != nil || kind != "oplog" {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, err
	}
	raw, err := c.Do(ctx, http.MethodGet, withQuery("/api/v1/oplog", "repo", ws), nil)
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(raw)}}}, nil
}
