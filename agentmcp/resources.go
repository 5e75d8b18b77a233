package agentmcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
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
		Description: "The operations-log entries of a workspace, newest first (100, or limit up to 1000); next_before pages back: lockstep://{workspace}/oplog?before={next_before}.",
		MIMEType:    "application/json",
		URITemplate: "lockstep://{workspace}/oplog{?before,limit}"}, t.readOplogResource)
}

// safeErrors is the server's receiving middleware: a resources/read whose
// URI holds control characters or invalid UTF-8 is refused as invalid
// params before anything else sees it, and an error whose data is not
// valid JSON (the SDK's "resource not found" quotes the URI with Go
// syntax, which for a NUL is not JSON) gets JSON data: an answer that
// cannot be encoded would otherwise end the session's connection, and a
// stateful session then answers every later request with an empty 200.
func safeErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		uri := ""
		if rr, ok := req.(*mcp.ReadResourceRequest); ok && rr.Params != nil {
			uri = rr.Params.URI
			if !utf8.ValidString(uri) || strings.IndexFunc(uri, unicode.IsControl) >= 0 {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid resource URI: it holds control characters or invalid UTF-8"}
			}
		}
		res, err := next(ctx, method, req)
		var je *jsonrpc.Error
		if errors.As(err, &je) && len(je.Data) > 0 && !json.Valid(je.Data) {
			data, _ := json.Marshal(map[string]string{"uri": strings.ToValidUTF8(uri, "\uFFFD")})
			return nil, &jsonrpc.Error{Code: je.Code, Message: je.Message, Data: data}
		}
		return res, err
	}
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
	body, _, err := t.readBlob(ctx, c, ws, "HEAD", path, 0, 0)
	if err != nil {
		if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
			return nil, mcp.ResourceNotFoundError(req.Params.URI)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: lockstep.ErrorMessage(err)}
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
	u, _ := url.Parse(req.Params.URI)
	c, err := t.client(ctx, req.Extra)
	if err != nil {
		return nil, err
	}
	raw, err := t.oplog(ctx, c, ws, u.Query().Get("before"), u.Query().Get("limit"))
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: lockstep.ErrorMessage(err)}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(raw)}}}, nil
}

// oplog lists a workspace's entries newest first, before the sequence
// number before (empty: the newest), with next_before to page back.
func (t *tools) oplog(ctx context.Context, c *client.Client, ws, before, limit string) ([]byte, error) {
	if limit == "" {
		limit = "100"
	}
	raw, err := c.Do(ctx, http.MethodGet, withQuery("/api/v1/oplog", "repo", ws, "order", "desc", "after", before, "limit", limit), nil)
	if err != nil {
		return nil, err
	}
	var page struct {
		Entries   json.RawMessage `json:"entries"`
		NextAfter int64           `json:"next_after"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		return nil, err
	}
	out := map[string]any{"entries": page.Entries, "order": "newest first"}
	if page.NextAfter > 0 {
		out["next_before"] = page.NextAfter
	}
	return json.Marshal(out)
}
