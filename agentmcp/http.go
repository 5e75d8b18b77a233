package agentmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	lauth "github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/client"
)

// Defaults of HTTPOptions' session settings.
const (
	DefaultSessionTimeout    = 10 * time.Minute
	DefaultMaxSessions       = 1000
	DefaultMaxSessionsPerKey = 64
	sessionRetryAfterSeconds = 30
	outerRequestContextExtra = "lockstep.request"
)

// HTTPOptions configure the streamable HTTP endpoint.
type HTTPOptions struct {
	Version string
	// Stateful keeps MCP sessions in this process's memory (the SDK's
	// sessions: Mcp-Session-Id, a standalone SSE stream on GET). The
	// default, stateless, answers every POST on its own: nothing is held
	// between requests, so a restart or another replica behind a load
	// balancer is invisible to the client, and idle clients cost nothing.
	Stateful bool
	// SessionTimeout closes idle stateful sessions (default
	// DefaultSessionTimeout).
	SessionTimeout time.Duration
	// MaxSessions and MaxSessionsPerKey bound the stateful sessions open
	// at once, in all and per API key (defaults DefaultMaxSessions,
	// DefaultMaxSessionsPerKey); beyond them a new session is refused
	// with 429 rate_limited and Retry-After.
	MaxSessions, MaxSessionsPerKey int
	// MaxRequestBytes bounds one MCP request body (default: the SDK's 4 MiB).
	MaxRequestBytes int64
	// MaxReadBytes bounds what file_read and the file resource return
	// (default 1 MiB).
	MaxReadBytes int64
}

// Handler is the /mcp endpoint; Shutdown ends its sessions and streams.
type Handler struct {
	h http.Handler
	// sse answers, in stateless mode, the requests that ask for
	// progress (a progressToken): as an event stream, so that progress
	// notifications (run_command's output lines) reach the caller
	// before the result; every other request gets one JSON answer.
	sse      http.Handler
	srv      *mcp.Server
	o        HTTPOptions
	mu       sync.Mutex
	sessions map[string]string // stateful session id → key id
	pending  map[string]int    // key id → new sessions being set up
}

// HTTPHandler serves MCP over streamable HTTP for `lockstep serve` at
// /mcp. It must sit behind the API's authentication, which puts the
// caller's key in the request context; every tool call then goes to api
// in-process with the caller's own key, so roles, ownership, limits
// (upload slots, body sizes) and the operations log apply exactly as for
// a direct API call. A stateful session is bound to the key that opened
// it: another key gets 403 on it.
func HTTPHandler(api http.Handler, o HTTPOptions) *Handler {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessionsPerKey <= 0 {
		o.MaxSessionsPerKey = DefaultMaxSessionsPerKey
	}
	srv := New(Options{
		Version:      o.Version,
		MaxReadBytes: o.MaxReadBytes,
		Client: func(ctx context.Context, extra *mcp.RequestExtra) (*client.Client, error) {
			if extra == nil || extra.TokenInfo == nil {
				return nil, lockstep.Errorf(lockstep.EUNAUTH, "missing API key")
			}
			secret, _ := extra.TokenInfo.Extra["secret"].(string)
			outer, _ := extra.TokenInfo.Extra[outerRequestContextExtra].(context.Context)
			c := client.New("http://lockstep.in-process", secret)
			c.HTTP = &http.Client{Transport: inProcess{h: api, outer: outer}}
			// In-process calls meet no network: a 503 (no upload slot
			// free) goes back to the agent as a tool error at once,
			// instead of being retried while the MCP request holds its
			// memory. Without retries an Idempotency-Key has no use.
			c.Retry = client.RetryPolicy{MaxAttempts: 1}
			c.NoIdempotencyKeys = true
			return c, nil
		},
	})
	sopts := mcp.StreamableHTTPOptions{Stateless: !o.Stateful, SessionTimeout: o.SessionTimeout, MaxRequestBodyBytes: o.MaxRequestBytes, JSONResponse: true,
		// The API key, not the Host header, is what protects this
		// endpoint; replicas sit behind load balancers with other names.
		DisableLocalhostProtection: true}
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &sopts)
	streamed := sopts
	streamed.JSONResponse = false
	sh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &streamed)
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		k := lauth.FromContext(ctx)
		if k == nil {
			return nil, fmt.Errorf("%w: unknown or revoked API key", auth.ErrInvalidToken)
		}
		// The request's context goes with the tool calls it carries: what
		// the API's middleware put there (an upload slot already held for
		// this request) applies to them.
		return &auth.TokenInfo{UserID: k.ID, Extra: map[string]any{"secret": token, outerRequestContextExtra: ctx}}, nil
	}
	h := &Handler{srv: srv, o: o, sessions: map[string]string{}, pending: map[string]int{}}
	h.h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(mh)
	h.sse = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sh)
	return h
}

// ServeHTTP serves one MCP request; the SDK's plain-text refusals (bad
// headers, unknown or foreign session, wrong method) become the API's
// JSON error envelope.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	jw := &jsonErrors{ResponseWriter: w}
	defer jw.finish()
	if r.Method == http.MethodPost {
		// The SDK's header checks, made here before wantsProgress reads
		// the body (up to --max-edit-bytes): a bad Content-Type or Accept
		// is refused with the body unread.
		if status, msg := postHeadersRefused(r); status != 0 {
			jw.Header().Set("Connection", "close")
			writeJSONError(jw, status, lockstep.EINVALID, msg)
			return
		}
	}
	if !h.o.Stateful && r.Method == http.MethodPost && wantsProgress(r, h.o.MaxRequestBytes) {
		h.sse.ServeHTTP(jw, r)
		return
	}
	if !h.o.Stateful || r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
		h.h.ServeHTTP(jw, r)
		return
	}
	// A POST without a session id opens a session.
	k := lauth.FromContext(r.Context())
	keyID := ""
	if k != nil {
		keyID = k.ID
	}
	if err := h.reserve(keyID); err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(sessionRetryAfterSeconds))
		writeJSONError(w, http.StatusTooManyRequests, lockstep.ERATELIMITED, err.Error())
		return
	}
	defer h.release(keyID, jw)
	h.h.ServeHTTP(jw, r)
}

// postHeadersRefused is the streamable HTTP transport's rule for a POST's
// headers (the SDK applies it too, after the body was read): Content-Type
// application/json, Accept naming both application/json and
// text/event-stream (or a wildcard). It returns the status and message of
// a refusal, or 0.
func postHeadersRefused(r *http.Request) (int, string) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return http.StatusUnsupportedMediaType, "Content-Type must be 'application/json'"
	}
	jsonOK, streamOK := false, false
	for _, v := range r.Header.Values("Accept") {
		for _, tok := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(tok, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	if !jsonOK || !streamOK {
		return http.StatusBadRequest, "Accept must contain both 'application/json' and 'text/event-stream'"
	}
	return 0, ""
}

// wantsProgress reads the request's body (up to limit, the SDK's own
// bound; default 4 MiB) and puts it back; true when it carries a
// progressToken.
func wantsProgress(r *http.Request, limit int64) bool {
	if limit <= 0 {
		limit = 4 << 20
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	return err == nil && int64(len(b)) <= limit && bytes.Contains(b, []byte(`"progressToken"`))
}

// reserve admits a new stateful session of keyID, or says why not.
func (h *Handler) reserve(keyID string) error {
	live := map[string]bool{}
	for s := range h.srv.Sessions() {
		live[s.ID()] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	total, mine := 0, h.pending[keyID]
	for id, owner := range h.sessions {
		if !live[id] { // closed: idle timeout, DELETE, shutdown
			delete(h.sessions, id)
			continue
		}
		if owner == keyID {
			mine++
		}
	}
	total = len(h.sessions)
	for _, n := range h.pending {
		total += n
	}
	if mine >= h.o.MaxSessionsPerKey {
		return fmt.Errorf("this API key has %d MCP sessions open, the limit (--mcp-max-sessions-per-key); close one (DELETE /mcp) or wait for an idle one to expire (--mcp-session-idle-timeout %s)", mine, h.o.SessionTimeout)
	}
	if total >= h.o.MaxSessions {
		return fmt.Errorf("%d MCP sessions open, the server's limit (--mcp-max-sessions); retry later", total)
	}
	h.pending[keyID]++
	return nil
}

func (h *Handler) release(keyID string, jw *jsonErrors) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending[keyID]--; h.pending[keyID] <= 0 {
		delete(h.pending, keyID)
	}
	if id := jw.Header().Get("Mcp-Session-Id"); id != "" && jw.status < 300 {
		h.sessions[id] = keyID
	}
}

// Shutdown closes every open session and its streams, so that a graceful
// server shutdown is not held by a client's open SSE stream.
func (h *Handler) Shutdown() {
	for s := range h.srv.Sessions() {
		s.Close()
	}
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// jsonErrors turns the SDK's text/plain error answers into the JSON error
// envelope of the API; every other answer passes through untouched.
type jsonErrors struct {
	http.ResponseWriter
	status int
	plain  bool // an error answer being collected
	buf    strings.Builder
}

func (w *jsonErrors) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	if code >= 400 && !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.plain = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *jsonErrors) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.plain {
		if w.buf.Len() < 4096 {
			w.buf.Write(b)
		}
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

func (w *jsonErrors) Flush() {
	if w.plain {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *jsonErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *jsonErrors) finish() {
	if !w.plain {
		return
	}
	msg := strings.TrimSpace(w.buf.String())
	code := lockstep.EINVALID
	switch w.status {
	case http.StatusUnauthorized:
		code = lockstep.EUNAUTH
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockstep"`)
	case http.StatusForbidden:
		code = lockstep.EFORBIDDEN
		if strings.Contains(msg, "mismatch") {
			msg = "this MCP session belongs to another API key"
		}
	case http.StatusNotFound:
		code = lockstep.ENOTFOUND
		if strings.Contains(msg, "session not found") {
			msg = "MCP session not found (it expired, was closed, or the server restarted): initialize a new session"
		}
	case http.StatusRequestEntityTooLarge:
		code = lockstep.ETOOLARGE
	case http.StatusTooManyRequests:
		code = lockstep.ERATELIMITED
	case http.StatusServiceUnavailable:
		code = lockstep.EUNAVAILABLE
	}
	if w.status >= 500 && w.status != http.StatusServiceUnavailable {
		code = lockstep.EINTERNAL
	}
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	writeJSONError(w.ResponseWriter, w.status, code, msg)
}

// inProcess streams: the answer is returned as soon as the handler has
// written its header, and its body is a pipe the handler writes into, so
// a caller that stops reading (a file over the read limit) stops the
// handler instead of having the whole answer buffered first.
type inProcess struct {
	h http.Handler
	// outer is the context of the MCP request the call belongs to (nil:
	// none): its values are visible to the handler, after the call's own.
	outer context.Context
}

func (p inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if p.outer != nil {
		ctx = valuesFrom{Context: ctx, outer: p.outer}
	}
	r := req.Clone(ctx)
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = "127.0.0.1:0"
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("in-process handler: %v", v))
				return
			}
			w.WriteHeader(http.StatusOK)
			pw.Close()
		}()
		p.h.ServeHTTP(w, r)
	}()
	<-w.ready
	resp := &http.Response{
		StatusCode: w.status, Status: fmt.Sprintf("%d %s", w.status, http.StatusText(w.status)),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}
	if n, err := strconv.ParseInt(w.sent.Get("Content-Length"), 10, 64); err == nil {
		resp.ContentLength = n
	}
	return resp, nil
}

// valuesFrom is ctx (its deadline and cancellation) with the values of
// outer behind its own.
type valuesFrom struct {
	context.Context
	outer context.Context
}

func (v valuesFrom) Value(key any) any {
	if x := v.Context.Value(key); x != nil {
		return x
	}
	return v.outer.Value(key)
}

// pipeWriter is the in-process http.ResponseWriter.
type pipeWriter struct {
	header http.Header
	sent   http.Header // the header as written
	status int
	once   sync.Once
	ready  chan struct{}
	pw     *io.PipeWriter
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

func (w *pipeWriter) Flush() {}
