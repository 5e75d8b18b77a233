package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearerTransport adds an API key to every request.
type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// benchMCP measures what an MCP tool call costs over the same HTTP API
// call: file_list through /mcp (streamable HTTP, one session) against GET
// /tree/main with the Go client, on the 2,000-file repository.
func (b *bencher) benchMCP() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	st, err := b.inc(true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "lockstep-bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{s.key}},
			DisableStandaloneSSE: true}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	httpCall := func(int) (time.Duration, error) {
		t := time.Now()
		_, err := s.c.Tree(ctx, st.repo, "main", "")
		return time.Since(t), err
	}
	mcpCall := func(int) (time.Duration, error) {
		t := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_list", Arguments: map[string]any{"workspace": st.repo, "rev": "main"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("file_list: %v", res.Content)
		}
		return time.Since(t), err
	}
	hd, err := b.measure("mcp-http-baseline", 5, b.o.iters*2, httpCall)
	if err != nil {
		return err
	}
	md, err := b.measure("mcp-tool-call", 5, b.o.iters*2, mcpCall)
	if err != nil {
		return err
	}
	r := b.add(&benchRow{Name: "mcp-tool-call", LS: md, Target: "< HTTP + 1 ms"})
	r.check("≥ HTTP + 1 ms", md.Median-hd.Median < 1)
	r.note("file_list over /mcp vs GET /tree/main over HTTP (median %.3f ms): +%.3f ms", hd.Median, md.Median-hd.Median)
	return nil
}
