package web

// The reviewers' UI under /ui/: server-rendered html/template pages, one
// small stylesheet, no JavaScript. Repository content (file names, commit
// messages, diffs, check summaries) is untrusted, so every value goes
// through html/template's contextual escaping and the pages are served
// with a Content-Security-Policy that allows no script at all.
//
// Sessions: /ui/login takes an API key and keeps it in an HttpOnly,
// SameSite=Strict cookie scoped to /ui; every page authenticates it through
// auth.Service like the API does. The few POSTs (login, logout, mark a
// workspace failed) also carry a CSRF token: on signed-in pages an HMAC
// keyed by the session's secret (good for that session only); on the login
// form, which has no session yet, a random value in a second cookie and in
// a hidden form field (double-submit).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/api"
	"github.com/lockstep-hq/lockstep/auth"
	"github.com/lockstep-hq/lockstep/effects"
	"github.com/lockstep-hq/lockstep/gate"
	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/repositories"
	"github.com/lockstep-hq/lockstep/workspaces"
)

//go:embed ui
var uiFiles embed.FS

const (
	uiSessionCookie = "lockstep_session"
	uiCSRFCookie    = "lockstep_csrf"
	uiSessionMaxAge = 12 * time.Hour

	uiMaxDiffLines = 4000      // per file; the rest is cut with a note
	uiMaxBlobBytes = 512 << 10 // a blob page shows at most this much
)

// uiServer renders the pages; it holds the parsed templates and calls the
// same domain services as the API handlers.
type uiServer struct {
	s     *Server
	pages map[string]*template.Template
	live  *liveHub
	// streams caps the open event streams (streams.go).
	streams *streamLimiter
}

// registerUI declares every /ui route. Login and the stylesheet are
// public; everything else needs a session.
func (s *Server) registerUI(e *gin.Engine) {
	u := &uiServer{s: s, pages: mustParseUI(), streams: newStreamLimiter(s.Config.MaxSSEStreams, s.Config.MaxSSEStreamsPerKey)}
	channel := s.EventsChannel
	if channel == "" {
		channel = DefaultEventsChannel
	}
	logf := func(msg string, args ...any) {
		if s.Logger != nil {
			s.Logger.Warn(msg, args...)
		}
	}
	u.live = newLiveHub(s.Redis, channel, logf)
	if st, ok := s.Store.(interface{ OnOp(func(lockstep.OpEntry)) }); ok {
		st.OnOp(u.live.publishOp)
	}
	s.uiNotFound = func(c *gin.Context) {
		u.headers(c)
		u.fail(c, lockstep.Errorf(lockstep.ENOTFOUND, "no page %s", c.Request.URL.Path))
	}
	g := e.Group("/ui", u.headers)
	g.GET("/style.css", u.handleStyle)
	g.GET("/live.js", u.handleLiveJS)
	g.GET("/highlight.css", u.handleHighlightCSS)
	g.GET("/login", u.handleLoginForm)
	g.POST("/login", u.handleLogin)
	g.POST("/logout", u.handleLogout)

	a := g.Group("", u.authenticate)
	a.GET("/", u.handleIndex)
	a.GET("/repos/:repo", u.handleRepo)
	a.POST("/repos/:repo/fail", u.handleMarkFailed)
	a.POST("/repos/:repo/effects/:id/approve", u.handleEffectDecide(true))
	a.POST("/repos/:repo/effects/:id/reject", u.handleEffectDecide(false))
	a.GET("/repos/:repo/commits/:oid", u.handleCommit)
	a.GET("/repos/:repo/compare", u.handleCompare)
	a.GET("/repos/:repo/tasks/:task", u.handleTask)
	a.GET("/events", u.handleEvents)
	a.GET("/oplog/verify", u.handleOplogVerify)
	a.GET("/repos/:repo/tree/:rev", u.handleTree)
	a.GET("/repos/:repo/blob/:rev/*path", u.handleBlob)
	a.GET("/oplog", u.handleOplog)
	a.GET("/oplog/entries/:id", u.handleOplogEntry)
	a.GET("/runs", u.handleRuns) // runs.go
	a.GET("/keys", u.handleKeys) // ui_keys.go (admins)
}

func mustParseUI() map[string]*template.Template {
	funcs := template.FuncMap{
		"short": shortOID,
		"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		// whenText formats the RFC 3339 strings of workspaces.WorkspaceInfo.
		"whenText": func(s string) string {
			if t, err := time.Parse(time.RFC3339, s); err == nil {
				return t.UTC().Format("2006-01-02 15:04:05 UTC")
			}
			return s
		},
		"firstLine": firstLine,
		"body": func(msg string) string {
			msg = strings.TrimSpace(msg)
			if i := strings.IndexByte(msg, '\n'); i >= 0 {
				return strings.TrimSpace(msg[i+1:])
			}
			return ""
		},
		"join":     strings.Join,
		"isZero":   func(oid string) bool { return oid == "" || oid == lockstep.ZeroOID },
		"pathEsc":  url.PathEscape,
		"queryEsc": url.QueryEscape,
		"filePath": escapeFilePath,
		"ms":       func(us int64) string { return strconv.FormatFloat(float64(us)/1000, 'f', 1, 64) },
		"bytes":    humanBytes,
		"inc":      func(i int) int { return i + 1 },
		"restore":  isRestoreOp,
		"resultClass": func(r string) string {
			switch {
			case r == "ok":
				return "ok"
			case StatusOf(r) != http.StatusInternalServerError:
				return "refused" // an error code: a write the service refused
			}
			return "failed"
		},
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(uiFiles, "ui/layout.html", "ui/partials.html", "ui/review.html"))
	pages := map[string]*template.Template{}
	names, err := fs.Glob(uiFiles, "ui/page_*.html")
	if err != nil || len(names) == 0 {
		panic(fmt.Sprintf("ui: no page templates embedded (%v)", err))
	}
	for _, name := range names {
		t := template.Must(template.Must(layout.Clone()).ParseFS(uiFiles, name))
		pages[strings.TrimSuffix(strings.TrimPrefix(path.Base(name), "page_"), ".html")] = t
	}
	return pages
}

// headers applies the UI's security headers: no script may run but the
// UI's own /ui/live.js (no inline script, no eval), nothing
// may frame the pages, pages are never cached (they show live state).
func (u *uiServer) headers(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.Next()
}

func (u *uiServer) handleStyle(c *gin.Context) {
	b, err := uiFiles.ReadFile("ui/style.css")
	if err != nil {
		c.Status(http.StatusNotFound)
		return
	}
	c.Header("Cache-Control", "public, max-age=300")
	c.Data(http.StatusOK, "text/css; charset=utf-8", b)
}

// view is what every page template receives: the layout's fields and the
// page's own data in D.
type view struct {
	Title   string
	Section string // "repos" or "oplog": the highlighted nav item
	Me      *lockstep.Key
	CSRF    string
	Live    string // the page's event stream (/ui/events?…); "" = a static page
	D       any
}

func (u *uiServer) render(c *gin.Context, status int, page string, v view) {
	t, ok := u.pages[page]
	if !ok {
		u.fail(c, fmt.Errorf("ui: no template %q", page))
		return
	}
	if v.Me == nil {
		v.Me = auth.FromContext(c.Request.Context())
	}
	if v.CSRF == "" {
		v.CSRF = u.csrfToken(c)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		if page == "error" {
			c.Set("error", err.Error())
			c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("internal error\n"))
			return
		}
		u.fail(c, fmt.Errorf("render %s: %w", page, err))
		return
	}
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// fail renders the error page: the status of the error's code and its
// public message; internal details go to the request log only.
func (u *uiServer) fail(c *gin.Context, err error) {
	code := lockstep.ErrorCode(err)
	status := StatusOf(code)
	c.Set("error", err.Error())
	u.render(c, status, "error", view{Title: http.StatusText(status), D: struct {
		Status  int
		Text    string
		Message string
	}{status, http.StatusText(status), lockstep.ErrorMessage(err)}})
	c.Abort()
}

// --- sessions -----------------------------------------------------------

func (u *uiServer) setCookie(c *gin.Context, name, value string, maxAge time.Duration) {
	ck := &http.Cookie{Name: name, Value: value, Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: overHTTPS(c.Request), MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		ck.MaxAge = -1
	}
	http.SetCookie(c.Writer, ck)
}

// overHTTPS reports whether the browser reached the UI over HTTPS: TLS
// terminated here, or by a proxy in front that says so
// (X-Forwarded-Proto: https, Forwarded: proto=https). The header is taken
// from anyone: forging it only makes the forger's own cookies Secure.
func overHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if p, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ","); strings.EqualFold(strings.TrimSpace(p), "https") {
		return true
	}
	first, _, _ := strings.Cut(r.Header.Get("Forwarded"), ",")
	for _, pair := range strings.Split(first, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(pair), "="); ok && strings.EqualFold(k, "proto") && strings.EqualFold(strings.Trim(v, `"`), "https") {
			return true
		}
	}
	return false
}

func cookie(c *gin.Context, name string) string {
	ck, err := c.Request.Cookie(name)
	if err != nil {
		return ""
	}
	return ck.Value
}

// csrfToken returns the CSRF token of the page's forms. On a signed-in
// page it is bound to the session (sessionCSRF); the login page, which has
// no session yet, uses a random value kept in a second cookie
// (double-submit).
func (u *uiServer) csrfToken(c *gin.Context) string {
	if v, ok := c.Get(uiCSRFCookie); ok {
		return v.(string)
	}
	if secret := cookie(c, uiSessionCookie); secret != "" && auth.FromContext(c.Request.Context()) != nil {
		tok := sessionCSRF(secret)
		c.Set(uiCSRFCookie, tok)
		return tok
	}
	tok := cookie(c, uiCSRFCookie)
	if len(tok) != 64 {
		tok = randomHex(32)
		u.setCookie(c, uiCSRFCookie, tok, uiSessionMaxAge)
	}
	c.Set(uiCSRFCookie, tok)
	return tok
}

// sessionCSRF is a signed-in session's CSRF token: an HMAC keyed by the
// session's secret, so it is good for that session only — a token taken
// from another session, or a token planted together with a matching
// cookie, is refused. Replicas compute the same value without sharing
// any state, and it reveals nothing of the secret.
func sessionCSRF(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("lockstep ui csrf v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// checkCSRF refuses a POST whose hidden token is not the session's (bound)
// or does not match the cookie (the login form), or that a browser says
// comes from another site.
func (u *uiServer) checkCSRF(c *gin.Context, bound bool) error {
	bad := lockstep.Errorf(lockstep.EFORBIDDEN, "the form is stale or was not sent from this site: reload the page and try again")
	if site := c.GetHeader("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return bad
	}
	if o := c.GetHeader("Origin"); o != "" && o != "null" {
		ou, err := url.Parse(o)
		if err != nil || ou.Host != c.Request.Host {
			return bad
		}
	}
	want := cookie(c, uiCSRFCookie)
	if bound {
		want = ""
		if secret := cookie(c, uiSessionCookie); secret != "" {
			want = sessionCSRF(secret)
		}
	}
	got := c.PostForm("csrf")
	if len(want) != 64 || subtle.ConstantTimeCompare([]byte(want), []byte(got)) != 1 {
		return bad
	}
	return nil
}

// authenticate resolves the session cookie to a key; without a valid one
// the browser goes to the login page, which brings it back afterwards.
func (u *uiServer) authenticate(c *gin.Context) {
	secret := cookie(c, uiSessionCookie)
	if secret == "" {
		u.toLogin(c, "")
		return
	}
	k, err := u.s.Keys.Authenticate(c.Request.Context(), secret)
	if err != nil {
		if lockstep.ErrorCode(err) == lockstep.EUNAUTH {
			u.setCookie(c, uiSessionCookie, "", -1)
			u.toLogin(c, "revoked")
			return
		}
		u.fail(c, err)
		return
	}
	c.Request = c.Request.WithContext(auth.WithKey(c.Request.Context(), k))
	// A runner key sees no page, a scoped key only the repositories of
	// its scope, here as on the API (the page's own key is set first:
	// the error page shows it).
	if err := notRunner(k); err != nil {
		u.fail(c, err)
		return
	}
	if err := u.s.scopeCheck(c.Request.Context(), k, c.Param("repo")); err != nil {
		u.fail(c, err)
		return
	}
	c.Next()
}

func (u *uiServer) toLogin(c *gin.Context, reason string) {
	q := url.Values{}
	if c.Request.Method == http.MethodGet {
		q.Set("next", c.Request.URL.RequestURI())
	}
	if reason != "" {
		q.Set("reason", reason)
	}
	loc := "/ui/login"
	if len(q) > 0 {
		loc += "?" + q.Encode()
	}
	c.Redirect(http.StatusSeeOther, loc)
	c.Abort()
}

// safeNext keeps a post-login redirect inside the UI (no open redirect).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

var loginReasons = map[string]string{
	"revoked":   "Your API key is unknown or has been revoked. Sign in again.",
	"signedout": "You are signed out.",
}

type loginData struct {
	Next    string
	Message string
	Error   string
}

func (u *uiServer) handleLoginForm(c *gin.Context) {
	u.render(c, http.StatusOK, "login", view{Title: "Sign in", D: loginData{Next: safeNext(c.Query("next")), Message: loginReasons[c.Query("reason")]}})
}

func (u *uiServer) handleLogin(c *gin.Context) {
	next := safeNext(c.PostForm("next"))
	if err := u.checkCSRF(c, false); err != nil {
		u.render(c, http.StatusForbidden, "login", view{Title: "Sign in", D: loginData{Next: next, Error: lockstep.ErrorMessage(err)}})
		return
	}
	secret := strings.TrimSpace(c.PostForm("key"))
	_, err := u.s.Keys.Authenticate(c.Request.Context(), secret)
	if err != nil || secret == "" {
		if err != nil && lockstep.ErrorCode(err) != lockstep.EUNAUTH {
			u.fail(c, err)
			return
		}
		u.render(c, http.StatusUnauthorized, "login", view{Title: "Sign in", D: loginData{Next: next, Error: "Unknown or revoked API key."}})
		return
	}
	u.setCookie(c, uiSessionCookie, secret, uiSessionMaxAge)
	// A fresh CSRF token per session.
	tok := randomHex(32)
	u.setCookie(c, uiCSRFCookie, tok, uiSessionMaxAge)
	c.Redirect(http.StatusSeeOther, next)
}

func (u *uiServer) handleLogout(c *gin.Context) {
	if err := u.checkCSRF(c, cookie(c, uiSessionCookie) != ""); err != nil {
		u.fail(c, err)
		return
	}
	u.setCookie(c, uiSessionCookie, "", -1)
	u.setCookie(c, uiCSRFCookie, "", -1)
	c.Redirect(http.StatusSeeOther, "/ui/login?reason=signedout")
}

// --- repositories -------------------------------------------------------

type statusCount struct {
	Status string
	N      int
}

type repoRow struct {
	*repositories.RepoInfo
	Counts     []statusCount
	Workspaces int
}

// uiWorkspacePage is how many workspaces a repository page shows at once.
const uiWorkspacePage = 100

// workspaceStatuses are the lifecycle's statuses (lockstep.Statuses) as
// the templates show them.
var workspaceStatuses = func() []string {
	out := make([]string, 0, len(lockstep.Statuses))
	for _, st := range lockstep.Statuses {
		out = append(out, string(st))
	}
	return out
}()

func (u *uiServer) handleIndex(c *gin.Context) {
	ctx := c.Request.Context()
	all, err := u.s.Repos.Repos(ctx, lockstep.RepoFilter{})
	if err != nil {
		u.fail(c, err)
		return
	}
	all = inScope(caller(c), all)
	counts := map[string]map[string]int{}
	for _, r := range all {
		if r.ForkOf != "" {
			if counts[r.ForkOf] == nil {
				counts[r.ForkOf] = map[string]int{}
			}
			counts[r.ForkOf][string(r.Status)]++
		}
	}
	var rows []repoRow
	for _, r := range all {
		if r.ForkOf != "" {
			continue
		}
		info, err := u.s.Repos.Info(ctx, r.Name)
		if err != nil {
			u.fail(c, err)
			return
		}
		row := repoRow{RepoInfo: info}
		for _, st := range workspaceStatuses {
			n := counts[r.Name][st]
			row.Counts = append(row.Counts, statusCount{st, n})
			row.Workspaces += n
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	u.render(c, http.StatusOK, "index", view{Title: "Repositories", Section: "repos", D: rows})
}

type hookRow struct {
	ID     string
	URL    string
	Events []string
	Active bool
	Latest *lockstep.Delivery
}

type baseData struct {
	*repositories.RepoInfo
	Policy     *lockstep.Policy
	Workspaces []workspaces.WorkspaceInfo
	// The workspace page shown: filters, and the next page's cursor.
	WSQuery   workspaces.WorkspaceQuery
	NextAfter string
	Statuses  []string
	Commits   []gitobj.CommitInfo
	LogError  string
	Hooks     []hookRow
	// Tasks: a page of the task labels with counts by status.
	Tasks     []lockstep.TaskCount
	TasksNext string
	// NoNet: active workspaces ahead of the base whose tip has their fork
	// point's tree (a rollback undid every change).
	NoNet map[string]bool
	// Usage is the network's storage (admins only; nil for others).
	Usage *api.Usage
	// AskedReclaimable: the view computed Usage.Reclaimable (GC dry runs).
	AskedReclaimable bool
}

type checkedAttempt struct {
	lockstep.Attempt
	Message string
	Checks  []lockstep.Check
	Failed  bool // a check of this commit failed or errored
}

type workspaceData struct {
	*repositories.RepoInfo
	Attempts    []checkedAttempt
	Checkpoints []lockstep.Checkpoint
	Eval        *gate.Evaluation
	EvalError   string
	CanFail     bool
	CompareURL  string
	TaskURL     string
	// Why it failed: the failed runs (newest first) and, for a failed
	// workspace, who marked it and why.
	Runs   []failedRun
	Marked *lockstep.OpEntry
	// What the failed runs wrote, from their run reports (runs.go).
	Wrote []runWrites
	// Machines a run of this workspace quarantined, not cleared since
	// (runs.go).
	Quarantined []quarantineRecord
	// The effects outbox: what the workspace would send (or sent), and
	// whether this key may approve or reject held effects.
	Effects   []api.Effect
	CanDecide bool
	// Review aids (ui_review.go): the merge conflicts with the base, how a
	// promoted workspace landed, a rollback that left nothing to land, and
	// the timeline of its operations.
	Conflicts  *conflictsData
	Landing    *landing
	RolledBack bool
	Timeline   []timelineItem
}

// failedRun is one failed `lockstep run` as its run.failed entry records it.
type failedRun struct {
	*lockstep.OpEntry
	Command    string
	Ended      string
	Duration   string
	Evidence   string
	StdoutTail string
	StderrTail string
}

// uiFailedRuns is how many failed runs a workspace page shows.
const uiFailedRuns = 5

func newFailedRun(e *lockstep.OpEntry) failedRun {
	d := e.Details
	str := func(k string) string { s, _ := d[k].(string); return s }
	r := failedRun{OpEntry: e, Evidence: str("evidence"), StdoutTail: str("stdout_tail"), StderrTail: str("stderr_tail")}
	if cmd, ok := d["command"].([]any); ok {
		parts := make([]string, len(cmd))
		for i, c := range cmd {
			parts[i] = fmt.Sprint(c)
		}
		r.Command = shellJoin(parts)
	}
	switch {
	case d["timed_out"] == true:
		r.Ended = "timed out"
	case str("signal") != "":
		r.Ended = "killed by signal " + str("signal")
	default:
		code, _ := d["exit_code"].(float64)
		r.Ended = fmt.Sprintf("exit code %d", int(code))
	}
	if ms, ok := d["duration_ms"].(float64); ok {
		r.Duration = fmt.Sprintf("%.1f s", ms/1000)
	}
	return r
}

func (u *uiServer) handleRepo(c *gin.Context) {
	ctx := c.Request.Context()
	info, err := u.s.Repos.Info(ctx, c.Param("repo"))
	if err != nil {
		u.fail(c, err)
		return
	}
	if info.ForkOf != "" {
		u.workspace(c, info)
		return
	}
	d := baseData{RepoInfo: info}
	if d.Policy, err = u.s.Gate.Policy(ctx, info.Name, ""); err != nil {
		u.fail(c, err)
		return
	}
	d.WSQuery = workspaces.WorkspaceQuery{Task: c.Query("task"), Status: lockstep.Status(c.Query("status")), After: c.Query("after"), Limit: uiWorkspacePage}
	d.Statuses = workspaceStatuses
	if d.Workspaces, d.NextAfter, err = u.s.Workspaces.Workspaces(ctx, info.Name, d.WSQuery); err != nil {
		u.fail(c, err)
		return
	}
	d.NoNet = u.noNetChange(ctx, d.Workspaces)
	if d.Tasks, err = u.s.Workspaces.Tasks(ctx, info.Name, c.Query("tasks_after"), uiTaskList+1); err != nil {
		u.fail(c, err)
		return
	}
	if len(d.Tasks) > uiTaskList {
		d.Tasks = d.Tasks[:uiTaskList]
		d.TasksNext = d.Tasks[uiTaskList-1].Task
	}
	if info.Head != "" {
		if d.Commits, err = u.s.Repos.Log(ctx, info.Name, "", 20, ""); err != nil {
			d.LogError = publicMessage(c, err)
		}
	}
	hooks, err := u.s.Gate.Hooks(ctx, auth.FromContext(ctx), info.Name)
	if lockstep.ErrorCode(err) == lockstep.EFORBIDDEN {
		hooks, err = nil, nil // agents do not see hooks
	}
	if err != nil {
		u.fail(c, err)
		return
	}
	for _, h := range hooks {
		row := hookRow{ID: h.ID, URL: h.URL, Events: h.Events, Active: h.Active} // the URL redacted by Gate.Hooks
		if ds, err := u.s.Gate.Deliveries(ctx, auth.FromContext(ctx), info.Name, h.ID, 1); err == nil && len(ds) > 0 {
			row.Latest = &ds[0]
		}
		d.Hooks = append(d.Hooks, row)
	}
	if k := auth.FromContext(ctx); k != nil && k.Role == lockstep.RoleAdmin {
		if d.Usage, err = u.s.Repos.Usage(ctx, k, info.Name); err != nil {
			u.fail(c, err)
			return
		}
		// Branches and checkpoints too; the GC dry runs of the API's
		// reclaimable (a walk of the network's objects) only when asked
		// (?reclaimable=1, the panel's link), not on every view.
		if err := u.s.Workspaces.AddBranchUsage(ctx, d.Usage); err != nil {
			u.fail(c, err)
			return
		}
		if c.Query("reclaimable") == "1" {
			if d.Usage.Reclaimable, err = u.s.reclaimable(ctx, info.Name); err != nil {
				u.fail(c, err)
				return
			}
			d.AskedReclaimable = true
		}
	}
	u.render(c, http.StatusOK, "base", view{Title: info.Name, Section: "repos", D: d})
}

func (u *uiServer) workspace(c *gin.Context, info *repositories.RepoInfo) {
	ctx := c.Request.Context()
	me := auth.FromContext(ctx)
	d := workspaceData{RepoInfo: info}
	attempts, err := u.s.Workspaces.Attempts(ctx, info.Name, 50)
	if err != nil {
		u.fail(c, err)
		return
	}
	for _, a := range attempts {
		ca := checkedAttempt{Attempt: a}
		if ci, err := u.s.Repos.Commit(ctx, info.Name, a.Commit); err == nil {
			ca.Message = firstLine(ci.Message)
		}
		if set, err := u.s.Gate.Checks(ctx, info.Name, a.Commit); err == nil {
			ca.Checks = set.Latest
			for _, ch := range set.Latest {
				ca.Failed = ca.Failed || ch.Status == lockstep.CheckFailure || ch.Status == lockstep.CheckError
			}
		}
		d.Attempts = append(d.Attempts, ca)
	}
	if u.s.Checkpoints != nil {
		if d.Checkpoints, err = u.s.Checkpoints.List(ctx, info.Name, 50); err != nil {
			u.fail(c, err)
			return
		}
	}
	switch {
	case info.Head == "":
		d.EvalError = "the workspace has no commit yet"
	case !info.Movable():
		d.EvalError = "the workspace is " + string(info.Status) + ": it can no longer be promoted"
	default:
		t, err := u.s.Gate.Target(ctx, info.Name, "")
		if err == nil {
			d.Eval, _, err = u.s.Gate.Evaluate(ctx, t)
		}
		if err != nil {
			d.EvalError = publicMessage(c, err)
		}
	}
	// The failed runs and the mark this key may see (visibility.go).
	runsFilter, err := u.s.visibleOps(ctx, me, lockstep.OpFilter{Repo: info.Name, Op: "run.failed", Newest: true, Limit: uiFailedRuns})
	if err != nil {
		u.fail(c, err)
		return
	}
	runs, err := u.s.Store.ListOps(ctx, runsFilter)
	if err != nil {
		u.fail(c, err)
		return
	}
	for _, e := range runs {
		d.Runs = append(d.Runs, newFailedRun(e))
	}
	reportsFilter, err := u.s.visibleOps(ctx, me, lockstep.OpFilter{Repo: info.Name, Op: OpRunReport, Newest: true, Limit: 10 * uiFailedRuns})
	if err != nil {
		u.fail(c, err)
		return
	}
	reports, err := u.s.Store.ListOps(ctx, reportsFilter)
	if err != nil {
		u.fail(c, err)
		return
	}
	d.Wrote = failedRunWrites(reports)
	d.Quarantined = quarantines(reports)
	if info.Status == lockstep.StatusFailed {
		marksFilter, err := u.s.visibleOps(ctx, me, lockstep.OpFilter{Repo: info.Name, Op: "workspace." + string(lockstep.StatusFailed), Newest: true, Limit: 1})
		if err != nil {
			u.fail(c, err)
			return
		}
		marks, err := u.s.Store.ListOps(ctx, marksFilter)
		if err != nil {
			u.fail(c, err)
			return
		}
		if len(marks) > 0 {
			d.Marked = marks[0]
		}
	}
	if u.s.Effects != nil && effects.CanSee(me, info.Repo) == nil { // another agent's effects stay hidden, as in the API
		list, _, err := u.s.Effects.List(ctx, me, info.Name, 0, 1000)
		if err != nil {
			u.fail(c, err)
			return
		}
		d.Effects = effects.Views(list)
		d.CanDecide = auth.Require(me, lockstep.RoleAdmin, lockstep.RoleReviewer) == nil
	}
	d.CanFail = info.Movable() && lockstep.CheckTransition(me, info.Repo, lockstep.StatusFailed) == nil
	d.CompareURL = "/ui/repos/" + url.PathEscape(info.Name) + "/compare?" + url.Values{
		"base": {info.ForkOf + ":" + info.DefaultBranch}, "head": {info.DefaultBranch}, "from": {"merge-base"}}.Encode()
	if info.Task != "" {
		d.TaskURL = taskURL(info.ForkOf, info.Task)
	}
	if d.Eval != nil && !d.Eval.MergeClean {
		d.Conflicts = u.workspaceConflicts(ctx, c, info)
	}
	d.RolledBack = rolledBack(d.Attempts, d.Eval)
	if info.Status == lockstep.StatusPromoted {
		if d.Landing, err = u.landing(ctx, info); err != nil {
			u.fail(c, err)
			return
		}
	}
	if d.Timeline, err = u.timeline(ctx, info.Name); err != nil {
		u.fail(c, err)
		return
	}
	u.render(c, http.StatusOK, "workspace", view{Title: info.Name, Section: "repos",
		Live: "/ui/events?" + url.Values{"repo": {info.Name}}.Encode(), D: d})
}

func (u *uiServer) handleMarkFailed(c *gin.Context) {
	if err := u.checkCSRF(c, true); err != nil {
		u.fail(c, err)
		return
	}
	name := c.Param("repo")
	if _, err := u.s.Workspaces.SetStatus(c.Request.Context(), auth.FromContext(c.Request.Context()), name, lockstep.StatusFailed, c.PostForm("reason")); err != nil {
		u.fail(c, err)
		return
	}
	c.Redirect(http.StatusSeeOther, "/ui/repos/"+url.PathEscape(name))
}

// handleEffectDecide approves or rejects a held effect from the
// workspace page (reviewer or admin; the form's CSRF token).
func (u *uiServer) handleEffectDecide(approve bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := u.checkCSRF(c, true); err != nil {
			u.fail(c, err)
			return
		}
		if u.s.Effects == nil {
			u.fail(c, lockstep.Errorf(lockstep.EUNAVAILABLE, "the effects outbox is not configured on this server"))
			return
		}
		name := c.Param("repo")
		if _, err := u.s.Effects.Decide(c.Request.Context(), auth.FromContext(c.Request.Context()), name, c.Param("id"), approve, c.PostForm("reason")); err != nil {
			u.fail(c, err)
			return
		}
		c.Redirect(http.StatusSeeOther, "/ui/repos/"+url.PathEscape(name)+"#effects")
	}
}

// --- commits and diffs --------------------------------------------------

type diffLine struct {
	Class    string // add, del, ctx, hunk, meta
	Old, New int    // line numbers, 0 when the side has none
	Text     string
	HTML     template.HTML // Text[1:] highlighted (ui_review.go); "" = plain
}

type fileDiff struct {
	gitobj.FileChange
	Anchor string
	Lines  []diffLine
	Cut    int        // lines left out beyond uiMaxDiffLines
	Rows   []splitRow // the split view's rows (set when Split)
}

type diffData struct {
	Repo    string
	Head    string // the commit whose tree the file links open
	Files   []fileDiff
	Added   int
	Removed int
	// The split (side-by-side) view, chosen by ?view=split.
	Split                bool
	UnifiedURL, SplitURL string
}

func newDiff(repoName, head string, files []gitobj.FileChange) diffData {
	d := diffData{Repo: repoName, Head: head}
	for i, f := range files {
		fd := fileDiff{FileChange: f, Anchor: "f" + strconv.Itoa(i)}
		fd.Lines, fd.Cut = parsePatch(f.Patch, uiMaxDiffLines)
		highlightLines(f.Path, fd.Lines)
		fd.Patch = ""
		d.Files = append(d.Files, fd)
		d.Added += f.Added
		d.Removed += f.Removed
	}
	return d
}

// parsePatch turns a unified diff into classified lines with old and new
// line numbers. The git headers before the first hunk are dropped (the
// page shows path, status and modes itself).
func parsePatch(patch string, max int) ([]diffLine, int) {
	var out []diffLine
	cut := 0
	inHunk := false
	oldN, newN := 0, 0
	sc := bufio.NewScanner(strings.NewReader(patch))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(out) >= max {
			cut++
			continue
		}
		switch {
		case strings.HasPrefix(line, "@@"):
			inHunk = true
			oldN, newN = hunkStart(line)
			out = append(out, diffLine{Class: "hunk", Text: line})
		case !inHunk:
			// diff --git, index, ---/+++, mode lines
		case strings.HasPrefix(line, "+"):
			out = append(out, diffLine{Class: "add", New: newN, Text: line})
			newN++
		case strings.HasPrefix(line, "-"):
			out = append(out, diffLine{Class: "del", Old: oldN, Text: line})
			oldN++
		case strings.HasPrefix(line, `\`):
			out = append(out, diffLine{Class: "meta", Text: line})
		case strings.HasPrefix(line, "diff --git "):
			inHunk = false
		default:
			out = append(out, diffLine{Class: "ctx", Old: oldN, New: newN, Text: line})
			oldN++
			newN++
		}
	}
	return out, cut
}

// hunkStart reads "@@ -a,b +c,d @@" into a and c.
func hunkStart(h string) (int, int) {
	var a, c int
	f := strings.Fields(h)
	if len(f) >= 3 {
		a, _ = strconv.Atoi(strings.SplitN(strings.TrimPrefix(f[1], "-"), ",", 2)[0])
		c, _ = strconv.Atoi(strings.SplitN(strings.TrimPrefix(f[2], "+"), ",", 2)[0])
	}
	return a, c
}

type commitData struct {
	Repo    string
	Commit  *gitobj.CommitInfo
	Parents []string
	Checks  *gate.CheckSet
	Diff    diffData
	Against string
}

func (u *uiServer) handleCommit(c *gin.Context) {
	ctx := c.Request.Context()
	name := c.Param("repo")
	ci, err := u.s.Repos.Commit(ctx, name, c.Param("oid"))
	if err != nil {
		u.fail(c, err)
		return
	}
	head := ci.Hash.String()
	d := commitData{Repo: name, Commit: ci}
	for _, p := range ci.Parents {
		d.Parents = append(d.Parents, p.String())
	}
	if d.Checks, err = u.s.Gate.Checks(ctx, name, head); err != nil {
		u.fail(c, err)
		return
	}
	var files []gitobj.FileChange
	if len(d.Parents) > 0 {
		d.Against = d.Parents[0]
		res, err := u.s.Repos.Compare(ctx, name, d.Against, head)
		if err != nil {
			u.fail(c, err)
			return
		}
		files = res.Files
	} else {
		// A root commit: everything is added (against the empty tree).
		r, err := u.s.Repos.Repo(ctx, name)
		if err == nil {
			var n repositories.ObjectStore
			if n, err = u.s.Repos.Network(r.Network); err == nil {
				files, err = n.Compare(gitobj.ZeroHash, ci.Hash, gitobj.CompareOptions{})
			}
		}
		if err != nil {
			u.fail(c, err)
			return
		}
	}
	d.Diff = newDiff(name, head, files)
	viewURLs(&d.Diff, c.Request.URL)
	u.render(c, http.StatusOK, "commit", view{Title: firstLine(ci.Message) + " · " + shortOID(head), Section: "repos", D: d})
}

type compareData struct {
	Repo      string
	BaseRev   string
	HeadRev   string
	Base      string
	Head      string
	MergeBase bool
	Diff      diffData
	Conflicts *conflictsData // what merging head into base conflicts on
}

func (u *uiServer) handleCompare(c *gin.Context) {
	ctx := c.Request.Context()
	name := c.Param("repo")
	d := compareData{Repo: name, BaseRev: c.Query("base"), HeadRev: c.Query("head"), MergeBase: c.Query("from") == "merge-base"}
	if d.BaseRev == "" || d.HeadRev == "" {
		u.fail(c, lockstep.Errorf(lockstep.EINVALID, "compare needs a base and a head revision"))
		return
	}
	r, err := u.s.Repos.Repo(ctx, name)
	if err != nil {
		u.fail(c, err)
		return
	}
	var files []gitobj.FileChange
	if d.MergeBase {
		// What the head adds since it left the base: the diff from their
		// merge base, as a promote would land it.
		files, d.Base, d.Head, err = u.compareFromMergeBase(ctx, r, d.BaseRev, d.HeadRev)
	} else {
		var res *repositories.CompareResult
		if res, err = u.s.Repos.Compare(ctx, name, d.BaseRev, d.HeadRev); err == nil {
			files, d.Base, d.Head = res.Files, res.Base, res.Head
		}
	}
	if err != nil {
		u.fail(c, err)
		return
	}
	d.Diff = newDiff(name, d.Head, files)
	viewURLs(&d.Diff, c.Request.URL)
	d.Conflicts = u.compareConflicts(ctx, c, r, d.BaseRev, d.HeadRev)
	u.render(c, http.StatusOK, "compare", view{Title: d.BaseRev + "…" + d.HeadRev, Section: "repos", D: d})
}

func (u *uiServer) compareFromMergeBase(ctx context.Context, r *lockstep.Repo, baseRev, headRev string) ([]gitobj.FileChange, string, string, error) {
	bh, err := u.s.Repos.Resolve(ctx, r, baseRev)
	if err != nil {
		return nil, "", "", err
	}
	hh, err := u.s.Repos.Resolve(ctx, r, headRev)
	if err != nil {
		return nil, "", "", err
	}
	mb, files, err := u.s.Repos.ChangesSinceMergeBase(ctx, r, bh, hh)
	if err != nil {
		return nil, "", "", err
	}
	if files == nil {
		files = []gitobj.FileChange{}
	}
	base := mb.String()
	if mb.IsZero() {
		base = ""
	}
	return files, base, hh.String(), err
}

// --- tree and blob ------------------------------------------------------

type crumb struct{ Name, Path string }

type treeData struct {
	Repo    string
	Rev     string
	Path    string
	Crumbs  []crumb
	Entries []gitobj.TreeEntry
}

func crumbs(p string) []crumb {
	var out []crumb
	acc := ""
	for _, part := range strings.Split(p, "/") {
		if part == "" {
			continue
		}
		acc = path.Join(acc, part)
		out = append(out, crumb{part, acc})
	}
	return out
}

func (u *uiServer) handleTree(c *gin.Context) {
	name, rev, p := c.Param("repo"), c.Param("rev"), strings.Trim(c.Query("path"), "/")
	entries, err := u.s.Repos.Tree(c.Request.Context(), name, rev, p)
	if err != nil {
		u.fail(c, err)
		return
	}
	sort.SliceStable(entries, func(i, j int) bool { return (entries[i].Type == "tree") && (entries[j].Type != "tree") })
	u.render(c, http.StatusOK, "tree", view{Title: name + "/" + p, Section: "repos",
		D: treeData{Repo: name, Rev: rev, Path: p, Crumbs: crumbs(p), Entries: entries}})
}

type blobData struct {
	Repo    string
	Rev     string
	Path    string
	Crumbs  []crumb
	Info    *gitobj.BlobInfo
	Binary  bool
	Cut     bool
	Lines   []string
	Symlink string
}

func (u *uiServer) handleBlob(c *gin.Context) {
	name, rev, p := c.Param("repo"), c.Param("rev"), strings.Trim(c.Param("path"), "/")
	info, rc, err := u.s.Repos.Blob(c.Request.Context(), name, rev, p)
	if err != nil {
		u.fail(c, err)
		return
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, uiMaxBlobBytes+1))
	if err != nil {
		u.fail(c, err)
		return
	}
	d := blobData{Repo: name, Rev: rev, Path: p, Crumbs: crumbs(p), Info: info}
	if len(b) > uiMaxBlobBytes {
		b, d.Cut = b[:uiMaxBlobBytes], true
	}
	switch {
	case info.Mode == "120000":
		d.Symlink = string(b)
	case bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0:
		d.Binary = true
	default:
		d.Lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	u.render(c, http.StatusOK, "blob", view{Title: name + "/" + p, Section: "repos", D: d})
}

// --- operations log -----------------------------------------------------

type opRow struct {
	*lockstep.OpEntry
	FollowsURL   string
	FollowsLabel string // "run.failed #18" when the followed entry is on the page
	DetailList   []detail
}

type detail struct {
	Key, Value string
	Fold       bool     // long or multi-line: folded
	Short      string   // the folded value's first line
	List       []string // a list of gate reasons ("rule: message"), one item each
}

type oplogData struct {
	Filter    lockstep.OpFilter
	Entries   []opRow
	NewerURL  string
	OlderURL  string
	CanVerify bool
	OwnOnly   bool
	Limit     int
}

const uiOpWindow = 1000 // ListOps' own cap on one query

func (u *uiServer) handleOplog(c *gin.Context) {
	ctx := c.Request.Context()
	me := auth.FromContext(ctx)
	f := lockstep.OpFilter{Repo: c.Query("repo"), KeyID: c.Query("key"), Op: c.Query("op")}
	d := oplogData{Limit: 50}
	var err error
	if d.Limit, err = queryInt(c, "limit", 50); err != nil || d.Limit == 0 || d.Limit > 500 {
		u.fail(c, lockstep.Errorf(lockstep.EINVALID, "limit must be between 1 and 500"))
		return
	}
	after, err := queryInt(c, "after", 0)
	if err != nil {
		u.fail(c, err)
		return
	}
	before, err := queryInt(c, "before", 0)
	if err != nil {
		u.fail(c, err)
		return
	}
	// An agent sees its own operations only, as in the API.
	if f, err = u.s.visibleOps(ctx, me, f); err != nil {
		u.fail(c, err)
		return
	}
	d.OwnOnly = ownOpsOnly(me)
	d.Filter = f
	var entries []*lockstep.OpEntry // newest first
	var nextBefore int64
	if after > 0 {
		f.After, f.Limit = int64(after), d.Limit
		es, err := u.s.Store.ListOps(ctx, f)
		if err != nil {
			u.fail(c, err)
			return
		}
		for i := len(es) - 1; i >= 0; i-- {
			entries = append(entries, es[i])
		}
		if len(es) > 0 {
			nextBefore = es[0].Seq
		}
		if len(es) == d.Limit {
			d.NewerURL = oplogURL(d.Filter, d.Limit, "after", es[len(es)-1].Seq)
		}
	} else {
		if before == 0 {
			last, err := u.lastSeq(ctx)
			if err != nil {
				u.fail(c, err)
				return
			}
			before = int(last + 1)
		} else if before > 1 {
			d.NewerURL = oplogURL(d.Filter, d.Limit, "after", int64(before-1))
		}
		if entries, nextBefore, err = u.opsBefore(ctx, f, int64(before), d.Limit); err != nil {
			u.fail(c, err)
			return
		}
		if len(entries) > 0 && d.NewerURL != "" {
			d.NewerURL = oplogURL(d.Filter, d.Limit, "after", entries[0].Seq)
		}
	}
	if nextBefore > 1 {
		d.OlderURL = oplogURL(d.Filter, d.Limit, "before", nextBefore)
	}
	onPage := map[string]*lockstep.OpEntry{}
	for _, e := range entries {
		onPage[e.ID] = e
	}
	for _, e := range entries {
		row := opRow{OpEntry: e, DetailList: details(e.Details), FollowsLabel: e.Follows}
		if e.Follows != "" {
			if f := onPage[e.Follows]; f != nil {
				row.FollowsURL = "#" + e.Follows
				row.FollowsLabel = f.Op + " #" + strconv.FormatInt(f.Seq, 10)
			} else {
				row.FollowsURL = "/ui/oplog/entries/" + url.PathEscape(e.Follows) + "?near=" + strconv.FormatInt(e.Seq, 10)
			}
		}
		d.Entries = append(d.Entries, row)
	}
	// The chain is verified on demand (/ui/oplog/verify), not on every
	// view: verifying reads the whole log.
	d.CanVerify = auth.Require(me, lockstep.RoleAdmin, lockstep.RoleReviewer, lockstep.RoleCI) == nil
	live := ""
	if after == 0 && c.Query("before") == "" {
		q := url.Values{}
		if f.Repo != "" {
			q.Set("repo", f.Repo)
		}
		live = "/ui/events"
		if len(q) > 0 {
			live += "?" + q.Encode()
		}
	}
	u.render(c, http.StatusOK, "oplog", view{Title: "Operations log", Section: "oplog", Live: live, D: d})
}

// lastSeq finds the newest entry's seq. The store lists oldest first with
// an "after" cursor only, and seqs run 1, 2, 3 … without gaps (the chain),
// so a doubling probe and a binary search take O(log n) one-row queries.
func (u *uiServer) lastSeq(ctx context.Context) (int64, error) {
	exists := func(after int64) (bool, error) {
		es, err := u.s.Store.ListOps(ctx, lockstep.OpFilter{After: after, Limit: 1})
		return len(es) > 0, err
	}
	ok, err := exists(0)
	if err != nil || !ok {
		return 0, err
	}
	lo, hi := int64(0), int64(1) // exists(lo) is true; find hi with exists(hi) false
	for {
		ok, err := exists(hi)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		lo, hi = hi, hi*2
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, nil
}

// opsBefore returns up to limit entries matching f with seq < before,
// newest first, reading the log backwards in windows of uiOpWindow seqs
// (each window is one ListOps query). It returns the cursor for the next
// older page (0 when the start of the log was reached).
func (u *uiServer) opsBefore(ctx context.Context, f lockstep.OpFilter, before int64, limit int) ([]*lockstep.OpEntry, int64, error) {
	var out []*lockstep.OpEntry
	hi := before
	for windows := 0; hi > 1 && len(out) < limit; windows++ {
		if windows == 100 { // bound one request; the "older" link goes on
			return out, hi, nil
		}
		lo := max(hi-1-uiOpWindow, 0)
		f.After, f.Limit = lo, uiOpWindow
		es, err := u.s.Store.ListOps(ctx, f)
		if err != nil {
			return nil, 0, err
		}
		for i := len(es) - 1; i >= 0 && len(out) < limit; i-- {
			if es[i].Seq < hi {
				out = append(out, es[i])
			}
		}
		hi = lo + 1
	}
	if len(out) == limit {
		return out, out[len(out)-1].Seq, nil
	}
	return out, 0, nil
}

// handleOplogEntry finds an entry by id (a follows link to an entry not on
// the current page) and redirects to the page that starts with it. The
// followed entry precedes its follower, so the search runs backwards from
// the follower's seq (near).
func (u *uiServer) handleOplogEntry(c *gin.Context) {
	ctx := c.Request.Context()
	me := auth.FromContext(ctx)
	id := c.Param("id")
	near, err := queryInt(c, "near", 0)
	if err != nil {
		u.fail(c, err)
		return
	}
	hi := int64(near) + 1
	if near == 0 {
		last, err := u.lastSeq(ctx)
		if err != nil {
			u.fail(c, err)
			return
		}
		hi = last + 1
	}
	f, err := u.s.visibleOps(ctx, me, lockstep.OpFilter{})
	if err != nil {
		u.fail(c, err)
		return
	}
	for windows := 0; hi > 1 && windows < 100; windows++ {
		lo := max(hi-1-uiOpWindow, 0)
		f.After, f.Limit = lo, uiOpWindow
		es, err := u.s.Store.ListOps(ctx, f)
		if err != nil {
			u.fail(c, err)
			return
		}
		for _, e := range es {
			if e.ID == id && e.Seq < hi {
				c.Redirect(http.StatusSeeOther, "/ui/oplog?before="+strconv.FormatInt(e.Seq+1, 10)+"#"+url.PathEscape(id))
				return
			}
		}
		hi = lo + 1
	}
	u.fail(c, lockstep.Errorf(lockstep.ENOTFOUND, "operation %s not found", id))
}

func oplogURL(f lockstep.OpFilter, limit int, cursor string, seq int64) string {
	q := url.Values{}
	if f.Repo != "" {
		q.Set("repo", f.Repo)
	}
	if f.KeyID != "" {
		q.Set("key", f.KeyID)
	}
	if f.Op != "" {
		q.Set("op", f.Op)
	}
	if limit != 50 {
		q.Set("limit", strconv.Itoa(limit))
	}
	q.Set(cursor, strconv.FormatInt(seq, 10))
	return "/ui/oplog?" + q.Encode()
}

// uiDetailFold is the length over which a detail's value is folded
// (shown in a <details> element); uiDetailMax cuts it.
const (
	uiDetailFold = 120
	uiDetailMax  = 4000
)

// details flattens an entry's details for display as fields, sorted by
// key: strings as they are (not JSON-quoted), a command (a list of
// strings) as a shell would show it, nested objects as key.sub fields,
// full oids shortened; long values are folded by the template.
func details(m map[string]any) []detail {
	var out []detail
	var walk func(prefix string, v any)
	walk = func(k string, v any) {
		var s string
		switch v := v.(type) {
		case nil:
			return
		case string:
			s = v
			if lockstep.IsOID(s) {
				s = shortOID(s)
			}
		case map[string]any:
			for sk, sv := range v {
				walk(k+"."+sk, sv)
			}
			return
		case []any:
			if words, ok := stringList(v); ok {
				s = shellJoin(words)
				break
			}
			if items, ok := ruleList(v); ok {
				out = append(out, detail{Key: k, List: items})
				return
			}
			b, _ := json.Marshal(v)
			s = string(b)
		case float64:
			s = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			s = fmt.Sprint(v)
		}
		if s == "" {
			return
		}
		if len(s) > uiDetailMax {
			s = s[:uiDetailMax] + "…"
		}
		d := detail{Key: k, Value: s}
		if len(s) > uiDetailFold || strings.Contains(s, "\n") {
			d.Fold = true
			d.Short = firstLine(s)
			if len(d.Short) > 80 {
				d.Short = d.Short[:80]
			}
			d.Short += "…"
		}
		out = append(out, d)
	}
	for k, v := range m {
		walk(k, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func stringList(v []any) ([]string, bool) {
	out := make([]string, len(v))
	for i, x := range v {
		s, ok := x.(string)
		if !ok {
			return nil, false
		}
		out[i] = s
	}
	return out, true
}

// shellJoin shows a command's words as a shell would take them: plain
// words as they are, others single-quoted.
func shellJoin(words []string) string {
	var b strings.Builder
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		if w != "" && strings.IndexFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			b.WriteString(w)
			continue
		}
		b.WriteString("'" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	return b.String()
}

// --- helpers ------------------------------------------------------------

// publicMessage is an error's public message for an inline note; internal
// errors are logged with the request, shown as "internal error".
func publicMessage(c *gin.Context, err error) string {
	if lockstep.ErrorCode(err) == lockstep.EINTERNAL {
		c.Set("error", err.Error())
	}
	return lockstep.ErrorMessage(err)
}

func shortOID(oid string) string {
	if len(oid) > 10 {
		return oid[:10]
	}
	return oid
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// escapeFilePath escapes each segment of a repository path for a URL.
func escapeFilePath(p string) string {
	parts := strings.Split(p, "/")
	for i := range parts {
		parts[i] = url.PathEscape(parts[i])
	}
	return strings.Join(parts, "/")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " B"
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
