package web

// Live updates of the reviewers' UI: every committed oplog entry (the one
// place all operations pass through: pushes, checks, runs, checkpoints,
// promotes, status changes) is published as a small event; /ui/events
// streams the events of the repositories a page shows as server-sent
// events, and /ui/live.js (the UI's only script, same-origin) refetches
// the page and swaps its <main> when one arrives. Pages work without it
// (as static pages, reloaded by hand).
//
// Across replicas the events travel over Redis pub/sub (one channel, see
// Config.EventsChannel) when Redis is configured: a replica publishes to
// Redis only, and delivers what its subscription receives, so every
// replica (itself included) sees each event once. Without Redis the
// fan-out is in-process.

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/auth"
)

// liveEvent is what a page learns of an operation.
type liveEvent struct {
	Seq   int64    `json:"seq"`
	Op    string   `json:"op"`
	Repos []string `json:"repos"` // the entry's repository and those whose refs it moved
	KeyID string   `json:"key_id,omitempty"`
}

// liveSubBuffer is how many events a slow page may lag behind before
// events to it are dropped (it reloads on the next one anyway).
const liveSubBuffer = 16

type liveHub struct {
	redis   *redis.Client
	channel string
	logf    func(msg string, args ...any)

	mu   sync.Mutex
	subs map[chan liveEvent]struct{}
	ps   *redis.PubSub // open while there are subscribers
	out  chan liveEvent
}

func newLiveHub(rdb *redis.Client, channel string, logf func(string, ...any)) *liveHub {
	h := &liveHub{redis: rdb, channel: channel, logf: logf, subs: map[chan liveEvent]struct{}{}}
	if rdb != nil {
		// Publishing must not hold up the appender: a bounded queue and
		// one goroutine per hub.
		h.out = make(chan liveEvent, 1024)
		go func() {
			for ev := range h.out {
				b, _ := json.Marshal(ev)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if err := h.redis.Publish(ctx, h.channel, b).Err(); err != nil {
					h.logf("publish live event", "error", err)
					h.deliver(ev) // at least this replica's pages update
				}
				cancel()
			}
		}()
	}
	return h
}

// opEvent turns a committed oplog entry into an event; read-only entries
// (clones, fetches) change nothing a page shows.
func opEvent(e lockstep.OpEntry) (liveEvent, bool) {
	if e.ReadOnly {
		return liveEvent{}, false
	}
	ev := liveEvent{Seq: e.Seq, Op: e.Op, KeyID: e.KeyID}
	seen := map[string]bool{}
	add := func(r string) {
		if r != "" && !seen[r] {
			seen[r] = true
			ev.Repos = append(ev.Repos, r)
		}
	}
	add(e.Repo)
	if base, ok := e.Details["fork_of"].(string); ok {
		add(base) // a new workspace shows on its base's (and task's) pages
	}
	for _, m := range e.Refs {
		add(m.Repo)
	}
	return ev, true
}

func (h *liveHub) publishOp(e lockstep.OpEntry) {
	ev, ok := opEvent(e)
	if !ok {
		return
	}
	if h.out == nil {
		h.deliver(ev)
		return
	}
	select {
	case h.out <- ev:
	default:
		h.deliver(ev) // queue full: local pages at least
	}
}

func (h *liveHub) deliver(ev liveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// subscribe registers a page; with Redis the first subscriber opens the
// subscription, and subscribe returns once Redis has confirmed it.
func (h *liveHub) subscribe(ctx context.Context) (chan liveEvent, error) {
	ch := make(chan liveEvent, liveSubBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.redis != nil && h.ps == nil {
		ps := h.redis.Subscribe(ctx, h.channel)
		if _, err := ps.Receive(ctx); err != nil {
			ps.Close()
			return nil, err
		}
		h.ps = ps
		go func() {
			for m := range ps.Channel() {
				var ev liveEvent
				if json.Unmarshal([]byte(m.Payload), &ev) == nil {
					h.deliver(ev)
				}
			}
		}()
	}
	h.subs[ch] = struct{}{}
	return ch, nil
}

func (h *liveHub) unsubscribe(ch chan liveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, ch)
	if len(h.subs) == 0 && h.ps != nil {
		h.ps.Close()
		h.ps = nil
	}
}

// liveRecheck is how often an open event stream checks its key again
// (auth.Service.Recheck): at most this long after a revocation the
// stream still runs.
const liveRecheck = time.Second

// liveHeartbeat keeps idle streams (and proxies) from timing out.
const liveHeartbeat = 25 * time.Second

// handleEvents streams the events touching the repositories named by
// repeated repo= parameters (none: every event) as server-sent events.
// An agent key learns only that a repository changed, not who changed it
// or how (as in the oplog, it sees its own operations only).
func (u *uiServer) handleEvents(c *gin.Context) {
	ctx := c.Request.Context()
	me := auth.FromContext(ctx)
	want := map[string]bool{}
	for _, r := range c.QueryArray("repo") {
		if r != "" {
			want[r] = true
		}
	}
	if len(want) > 100 {
		u.fail(c, lockstep.Errorf(lockstep.EINVALID, "at most 100 repositories per event stream"))
		return
	}
	release, err := u.streams.acquire(me.ID)
	if err != nil {
		refuseStream(c, err)
		return
	}
	defer release()
	lifetime := u.s.Config.SSEMaxLifetime
	if lifetime <= 0 {
		lifetime = DefaultSSEMaxLifetime
	}
	if me.ExpiresAt != nil {
		// An expiring key's stream ends when the key does.
		lifetime = min(lifetime, max(time.Until(*me.ExpiresAt), 0))
	}
	end := time.NewTimer(lifetime)
	defer end.Stop()
	ch, err := u.live.subscribe(ctx)
	if err != nil {
		u.fail(c, err)
		return
	}
	defer u.live.unsubscribe(ch)
	w := c.Writer
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The stream is open (and, with Redis, subscribed): say so, which
	// also tells a client it may now expect events.
	w.WriteString("retry: 3000\nevent: ready\ndata: {}\n\n")
	w.Flush()
	scoped := scopeCache{key: me, repo: u.s.Repos.Repo, in: map[string]bool{}}
	rc := http.NewResponseController(w)
	tick := time.NewTicker(liveHeartbeat)
	defer tick.Stop()
	// The key is checked again (at most once a second, before an event
	// or a heartbeat is sent): a revoked key's open stream ends.
	var checked time.Time
	alive := func() bool {
		if time.Since(checked) < liveRecheck {
			return true
		}
		if err := u.s.Keys.Recheck(ctx, me); err != nil {
			return false
		}
		checked = time.Now()
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return // --sse-max-lifetime: the browser reconnects
		case <-tick.C:
			if !alive() {
				return
			}
			w.WriteString(": keep-alive\n\n")
		case ev := <-ch:
			if !alive() {
				return
			}
			if me.Scope != nil {
				// A scoped key hears of the repositories of its scope
				// only, and only their names.
				if ev.Repos = scoped.filter(ctx, ev.Repos); len(ev.Repos) == 0 {
					continue
				}
			}
			if len(want) > 0 {
				hit := false
				for _, r := range ev.Repos {
					hit = hit || want[r]
				}
				if !hit {
					continue
				}
			}
			if !opVisible(me, ev.KeyID) {
				ev.Op = ""
			}
			ev.KeyID = ""
			b, _ := json.Marshal(ev)
			w.WriteString("id: " + strconv.FormatInt(ev.Seq, 10) + "\ndata: ")
			w.Write(b)
			w.WriteString("\n\n")
		}
		rc.SetWriteDeadline(time.Now().Add(2 * liveHeartbeat))
		w.Flush()
	}
}

// scopeCache answers, for one event stream of a scoped key, which
// repositories are in the key's scope (a repository's name, network and
// task never change, so neither does the answer; one not found is out).
type scopeCache struct {
	key  *lockstep.Key
	repo func(ctx context.Context, name string) (*lockstep.Repo, error)
	in   map[string]bool
}

// filter returns the names of repos in the key's scope.
func (sc *scopeCache) filter(ctx context.Context, repos []string) []string {
	var out []string
	for _, name := range repos {
		in, ok := sc.in[name]
		if !ok {
			r, err := sc.repo(ctx, name)
			in = err == nil && sc.key.InScope(r) == nil
			if len(sc.in) < 10000 {
				sc.in[name] = in
			}
		}
		if in {
			out = append(out, name)
		}
	}
	return out
}

// liveJS is the UI's only script: it follows the page's event stream
// (body data-live) and, when an event arrives, refetches the page and
// replaces its <main>, unless the reader is typing in a form.
const liveJS = `(function () {
  var src = document.body.getAttribute("data-live");
  if (!src || !window.EventSource || !window.fetch) return;
  var timer = null, busy = false, again = false;
  function typing() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA" || a.tagName === "SELECT") && a.type !== "submit";
  }
  function refresh() {
    if (busy || typing()) { again = true; return; }
    busy = true;
    fetch(location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var next = doc.querySelector("main"), cur = document.querySelector("main");
        if (next && cur) {
          cur.innerHTML = next.innerHTML;
          document.body.setAttribute("data-updated", String(Date.now()));
        }
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; schedule(); } });
  }
  function schedule() { clearTimeout(timer); timer = setTimeout(refresh, 250); }
  function connect() {
    var es = new EventSource(src);
    es.addEventListener("ready", function () { document.body.setAttribute("data-live-ready", "1"); });
    es.onmessage = schedule;
  }
  if (document.readyState === "complete") connect(); else window.addEventListener("load", connect);
  document.addEventListener("focusout", function () { if (again) { again = false; schedule(); } });
})();
`

func (u *uiServer) handleLiveJS(c *gin.Context) {
	c.Header("Cache-Control", "public, max-age=300")
	c.Data(http.StatusOK, "text/javascript; charset=utf-8", []byte(liveJS))
}

// endWithKey ends a long-lived request (a stateful MCP session's event
// stream) when its key is revoked or expires: its context is cancelled
// at most liveRecheck after, as /ui/events and a followed run job end.
// Without it the stream ran until the session's idle timeout.
func (s *Server) endWithKey(c *gin.Context) {
	k := caller(c)
	if k == nil || s.Keys == nil {
		c.Next()
		return
	}
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	c.Request = c.Request.WithContext(ctx)
	go func() {
		t := time.NewTicker(liveRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := s.Keys.Recheck(ctx, k); lockstep.ErrorCode(err) == lockstep.EUNAUTH {
					cancel()
					return
				}
			}
		}
	}()
	c.Next()
}
