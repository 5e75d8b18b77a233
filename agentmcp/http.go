package agentmcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	lauth "github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/client"
)

// HTTPOptions configure the streamable HTTP endpoint.
type HTTPOptions struct {
	Version string
	// SessionTimeout closes idle sessions (default 30 minutes).
	SessionTimeout time.Duration
	// MaxRequestBytes bounds one MCP request body (default: the SDK's 4 MiB).
	MaxRequestBytes int64
}

// HTTPHandler serves MCP over streamable HTTP for `lockstep serve` at
// /mcp. It must sit behind the API's authentication, which puts the
// caller's key in the request context; every tool call then goes to api
// in-process with the caller's own key, so roles, ownership, limits and
// the operations log apply exactly as for a direct API call. A session is
// bound to the key that opened it: another key gets 403 on it.
func HTTPHandler(api http.Handler, o HTTPOptions) http.Handler {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 30 * time.Minute
	}
	rt := InProcess(api)
	srv := New(Options{
		Version: o.Version,
		Client: func(ctx context.Context, extra *mcp.RequestExtra) (*client.Client, error) {
			if extra == nil || extra.TokenInfo == nil {
				return nil, lockstep.Errorf(lockstep.EUNAUTH, "missing API key")
			}
			secret, _ := extra.TokenInfo.Extra["secret"].(string)
			c := client.New("http://lockstep.in-process", secret)
			c.HTTP = &http.Client{Transport: rt}
			return c, nil
		},
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: o.SessionTimeout, MaxRequestBodyBytes: o.MaxRequestBytes, JSONResponse: true,
			// The API key, not the Host header, is what protects this
			// endpoint; replicas sit behind load balancers with other names.
			DisableLocalhostProtection: true})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		k := lauth.FromContext(ctx)
		if k == nil {
			return nil, fmt.Errorf("%w: unknown or revoked API key", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: k.ID, Extra: map[string]any{"secret": token}}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// InProcess returns a RoundTripper that serves requests with h directly,
// without a network hop.
func InProcess(h http.Handler) http.RoundTripper { return inProcess{h} }

type inProcess struct{ h http.Handler }

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	w := &recorder{header: http.Header{}, status: http.StatusOK}
	r := req.Clone(req.Context())
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0"
	p.h.ServeHTTP(w, r)
	return &http.Response{
		StatusCode: w.status, Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(&w.body), ContentLength: int64(w.body.Len()), Request: req,
	}, nil
}

// recorder is a minimal in-memory http.ResponseWriter.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func (w *recorder) Flush() {}
