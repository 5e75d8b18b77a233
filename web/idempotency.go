package web

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/lockstep-hq/lockstep"
)

// IdempotencyConfig configures idempotent writes (docs/idempotency.md).
type IdempotencyConfig struct {
	// Retention is how long a key's answer is kept (default 24 h).
	Retention time.Duration
	// Lease is how long a running claim counts as alive without a renewal
	// (renewed every Lease/3 while the request runs; default 30 s). A claim
	// whose server died is taken over after it, if nothing committed.
	Lease time.Duration
	// Wait bounds how long a concurrent duplicate waits for the first
	// request before it is answered 409 in_progress (default 10 s).
	Wait time.Duration
	// PauseAfterCommitPrefix is a test-only fault-injection point: a
	// request whose Idempotency-Key starts with it stops after its handler
	// committed, before the answer is stored or sent (so a test can kill
	// the server there). Empty in production.
	PauseAfterCommitPrefix string
	// PauseBeforeRunPrefix is the same, after the key is claimed and
	// before the handler runs (nothing committed).
	PauseBeforeRunPrefix string
}

func (c *IdempotencyConfig) defaults() {
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 10 * time.Second
	}
}

// MaxIdempotencyKey is the longest Idempotency-Key accepted.
const MaxIdempotencyKey = 255

// IdempotentReplayedHeader marks an answer replayed from the first
// execution.
const IdempotentReplayedHeader = "Idempotent-Replayed"

// validIdemKey: 1-255 visible ASCII characters.
func validIdemKey(k string) error {
	if len(k) == 0 || len(k) > MaxIdempotencyKey {
		return lockstep.Errorf(lockstep.EINVALID, "Idempotency-Key: want 1-%d characters, got %d", MaxIdempotencyKey, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return lockstep.Errorf(lockstep.EINVALID, "Idempotency-Key: only visible ASCII characters (no spaces), got byte 0x%02x at %d", k[i], i)
		}
	}
	return nil
}

// idempotency is the middleware of every /api/v1 write: a request with an
// Idempotency-Key runs once per (caller key, Idempotency-Key); a repeat of
// the same request gets the first answer, a different request with the
// same key 422, a concurrent duplicate waits for the first (bounded) or
// gets 409 in_progress.
func (s *Server) idempotency(c *gin.Context) {
	switch c.Request.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		c.Next()
		return
	}
	vals := c.Request.Header.Values("Idempotency-Key")
	facts := factsOf(c.Request.Method + " " + c.FullPath())
	if len(vals) == 0 || facts.idem == idemNone {
		c.Next()
		return
	}
	if len(vals) > 1 {
		writeError(c, lockstep.Errorf(lockstep.EINVALID, "Idempotency-Key sent %d times: send it once", len(vals)))
		return
	}
	key := vals[0]
	if err := validIdemKey(key); err != nil {
		writeError(c, err)
		return
	}
	k := caller(c)
	cfg := s.Config.Idempotency
	cfg.defaults()
	route := c.Request.Method + " " + c.FullPath()

	limit := s.routeBodyLimit(c) // the route's own body limit (limits.go)
	sp, err := spoolBody(c.Request.Body, limit)
	if err != nil {
		var te *spoolTempError
		if errors.As(err, &te) {
			// The server's temp directory (full, read-only, out of
			// descriptors), not the request: 503, and no path shown.
			writeError(c, lockstep.E("web.spoolBody", lockstep.EUNAVAILABLE,
				"the server has no room to hold the request body (its temp directory is full or failing): nothing was changed; retry later", te.err))
			return
		}
		writeError(c, lockstep.Errorf(lockstep.EINVALID, "reading the request body: %v", err))
		return
	}
	defer sp.close()
	c.Request.Body = sp.reader()
	if sp.over {
		// Over the route's limit: the handler answers too_large without
		// doing anything; nothing to remember.
		c.Next()
		return
	}
	fp := s.fingerprint(c, sp.sum)

	ctx := c.Request.Context()
	now := time.Now()
	token := randomToken()
	rec := &lockstep.IdemRecord{Owner: k.ID, Key: key, Fingerprint: fp, Method: c.Request.Method, Path: c.Request.URL.Path,
		Token: token, LeaseUntil: now.Add(cfg.Lease), ExpiresAt: now.Add(cfg.Retention)}
	deadline := now.Add(cfg.Wait)
	kind := facts.idem
	if facts.idemOf != nil && sp.file == nil {
		kind = facts.idemOf(sp.mem)
	}
	oneTx := kind == idemOneTx

	// A duplicate on this replica waits here for the first request to be
	// answered and stored, without polling the database; duplicates on
	// other replicas are resolved by the record (below).
	release, ok := s.flights().acquire(ctx, k.ID+"\x00"+key, deadline)
	if !ok {
		if ctx.Err() != nil {
			writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "gave up waiting for the first request with Idempotency-Key %q", key))
			return
		}
		c.Header("Retry-After", "1")
		writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "the first request with Idempotency-Key %q is still running: retry later", key).
			WithDetails(map[string]any{"idempotency_key": key}))
		return
	}
	handedOff := false
	defer func() {
		if !handedOff {
			release()
		}
	}()

	if oneTx && facts.idemRunFirst {
		// No read before the effect (routeFact.idemRunFirst): a repeat
		// is answered from the record after its transaction failed.
		handedOff = true
		s.execute(c, cfg, route, &lockstep.IdemClaim{Owner: k.ID, Key: key, Token: token, Deferred: rec}, release, rec)
		return
	}
	delay := 2 * time.Millisecond
	for {
		var cur *lockstep.IdemRecord
		if oneTx {
			// No claim before the effect: read the record; none (or an
			// expired one) means run, and claim in the effect's commit.
			cur, err = s.Store.IdemByKey(ctx, k.ID, key)
			if lockstep.ErrorCode(err) == lockstep.ENOTFOUND {
				cur, err = nil, nil
			}
			if err != nil {
				writeError(c, err)
				return
			}
			if cur != nil && time.Now().After(cur.ExpiresAt) && !(cur.State == lockstep.IdemRunning && time.Now().Before(cur.LeaseUntil)) {
				cur = nil
			}
			if cur == nil {
				rec.LeaseUntil = time.Now().Add(cfg.Lease)
				handedOff = true
				s.execute(c, cfg, route, &lockstep.IdemClaim{Owner: k.ID, Key: key, Token: token, Deferred: rec}, release, rec)
				return
			}
		} else {
			cur, err = s.Store.ClaimIdem(ctx, rec)
			if err != nil {
				writeError(c, err)
				return
			}
			if cur == nil {
				break // ours
			}
		}
		if cur.Fingerprint != fp {
			writeError(c, lockstep.Errorf(lockstep.EIDEMREUSED, "Idempotency-Key %q was used for %s %s with different parameters or body: use a new key for a new operation", key, cur.Method, cur.Path).
				WithDetails(map[string]any{"idempotency_key": key, "method": cur.Method, "path": cur.Path, "first_used_at": cur.CreatedAt.Format(time.RFC3339)}))
			return
		}
		alive := time.Now().Before(cur.LeaseUntil)
		switch {
		case cur.State == lockstep.IdemDone:
			s.replay(c, cur)
			return
		case cur.State == lockstep.IdemCommitted && !alive:
			// The server that ran it died after its commit: the answer
			// staged in that transaction is the first result.
			s.replay(c, cur)
			return
		case cur.State == lockstep.IdemRunning && !alive:
			// Its server died before committing anything (the oplog is
			// checked in the same transaction): safe to run it again.
			ok, err := s.Store.TakeOverIdem(ctx, k.ID, key, cur.Token, token, time.Now().Add(cfg.Lease))
			if err != nil {
				writeError(c, err)
				return
			}
			if ok {
				goto execute
			}
		}
		if time.Now().Add(delay).After(deadline) {
			c.Header("Retry-After", "1")
			writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "the first request with Idempotency-Key %q is still running: retry later", key).
				WithDetails(map[string]any{"idempotency_key": key}))
			return
		}
		select {
		case <-ctx.Done():
			writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "gave up waiting for the first request with Idempotency-Key %q", key))
			return
		case <-time.After(delay):
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
execute:
	handedOff = true
	s.execute(c, cfg, route, &lockstep.IdemClaim{Owner: k.ID, Key: key, Token: token}, release, nil)
}

// execute runs the handler under a held claim (or, with claim.Deferred, a
// claim the effect's commit makes) and stores its answer. release ends
// this replica's single flight for the key once the answer is stored.
func (s *Server) execute(c *gin.Context, cfg IdempotencyConfig, route string, claim *lockstep.IdemClaim, release func(), deferred *lockstep.IdemRecord) {
	claim.Status = factsOf(route).successStatus()
	ctx := c.Request.Context()
	c.Request = c.Request.WithContext(lockstep.WithIdemClaim(ctx, claim))

	stopHB, hbDone := func() {}, make(chan struct{})
	if deferred == nil {
		// A held claim is renewed while the request runs. A deferred one
		// has no record before its commit, and its commit is the last.
		var hbCtx context.Context
		hbCtx, stopHB = context.WithCancel(context.WithoutCancel(ctx))
		go func() {
			defer close(hbDone)
			t := time.NewTicker(cfg.Lease / 3)
			defer t.Stop()
			for {
				select {
				case <-hbCtx.Done():
					return
				case <-t.C:
					if err := s.Store.ExtendIdem(hbCtx, claim.Owner, claim.Key, claim.Token, time.Now().Add(cfg.Lease)); err != nil && hbCtx.Err() == nil {
						s.Logger.WarnContext(hbCtx, "extend idempotency lease", "error", err)
					}
				}
			}
		}()
	} else {
		close(hbDone)
	}

	if p := cfg.PauseBeforeRunPrefix; p != "" && strings.HasPrefix(claim.Key, p) {
		fmt.Fprintf(os.Stderr, "lockstep: paused before running (Idempotency-Key %s)\n", claim.Key)
		select {} // test-only: the test kills the process here
	}
	orig := c.Writer
	cw := &captureWriter{ResponseWriter: orig, status: http.StatusOK}
	c.Writer = cw
	func() {
		defer func() {
			if r := recover(); r != nil {
				c.Writer = orig
				stopHB()
				<-hbDone
				if deferred == nil {
					s.Store.ReleaseIdem(context.WithoutCancel(ctx), claim.Owner, claim.Key, claim.Token)
				}
				release()
				panic(r)
			}
		}()
		c.Next()
	}()
	c.Writer = orig
	stopHB()
	<-hbDone

	if p := cfg.PauseAfterCommitPrefix; p != "" && strings.HasPrefix(claim.Key, p) {
		fmt.Fprintf(os.Stderr, "lockstep: paused after commit (Idempotency-Key %s)\n", claim.Key)
		select {} // test-only: the test kills the process here
	}

	status, body := cw.status, cw.buf.Bytes()
	header := keptHeaders(orig.Header())
	bg := context.WithoutCancel(ctx)

	if deferred != nil {
		commits := claim.Commits()
		if len(commits) == 0 && !claim.Lost() {
			// Nothing committed here. A duplicate on another replica that
			// committed while this one ran may be why (a forced push found
			// its tree already there, a refusal saw its effect): its record
			// committed with that effect, so it is visible now, and its
			// answer is the result.
			if cur, err := s.Store.IdemByKey(bg, claim.Owner, claim.Key); err == nil && cur.Token != claim.Token &&
				!(time.Now().After(cur.ExpiresAt) && !(cur.State == lockstep.IdemRunning && time.Now().Before(cur.LeaseUntil))) {
				claim.MarkLost()
			}
		}
		switch {
		case claim.Lost():
			// A duplicate (on another replica) committed first; this
			// request's transaction failed on the key, or it found the
			// other's effect done. The other's answer is ours.
			release()
			s.awaitFirst(c, cfg, claim)
			return
		case status < 400 && len(commits) == 1 && commits[0].State == lockstep.IdemDone &&
			sameAnswer(status, header, body, commits[0].Status, commits[0].Header, commits[0].Body):
			// The common case: the answer stored as done with the effect
			// is this one, up to its duration_ms (measured to the
			// commit): send exactly that, nothing more to store.
			release()
			s.send(c, commits[0].Status, commits[0].Header, commits[0].Body)
			return
		case len(commits) == 0 && status >= 400:
			// Nothing committed, no record: a retry runs afresh.
			release()
			s.send(c, status, header, body)
			return
		case len(commits) == 0:
			// A success that committed nothing (a push that changed
			// nothing): claim the key now, before answering, so a
			// duplicate committing elsewhere meanwhile loses to this
			// answer; if one already holds it, its answer is ours.
			deferred.LeaseUntil = time.Now().Add(cfg.Lease)
			cur, err := s.Store.ClaimIdem(bg, deferred)
			if err != nil {
				release()
				writeError(c, err)
				return
			}
			if cur != nil {
				release()
				s.awaitFirst(c, cfg, claim)
				return
			}
			// Held: stored like any held claim's answer (below).
		}
		// Otherwise (several commits, a refusal, an answer unlike the
		// staged one): as for a held claim, the record is ours now.
	}

	if status >= 400 {
		// A refusal is remembered only when something committed with it
		// (a refused write's log entry); validation errors, 404s, 5xx
		// before any commit leave the key free for a corrected retry.
		cur, err := s.Store.IdemByKey(bg, claim.Owner, claim.Key)
		switch {
		case deferred != nil && lockstep.ErrorCode(err) == lockstep.ENOTFOUND:
			// The commit noted did not stand (its transaction rolled
			// back): nothing to remember.
			release()
			s.send(c, status, header, body)
			return
		case err != nil:
			s.Logger.ErrorContext(ctx, "read idempotency key", "error", err)
		case cur.State == lockstep.IdemRunning:
			// Nothing committed: forget the key so a retry runs afresh.
			if err := s.Store.ReleaseIdem(bg, claim.Owner, claim.Key, claim.Token); err != nil {
				s.Logger.ErrorContext(ctx, "release idempotency key", "error", err)
			}
			release()
			s.send(c, status, header, body)
			return
		case status >= 500 && cur.State != lockstep.IdemRunning && cur.Token == claim.Token:
			// The effect is durable: the answer its entry carried is the result.
			if st, h, b, ok := storedAnswer(cur); ok {
				status, header, body = st, h, b
			}
		}
	}
	stored := redact(body)
	s.send(c, status, header, body)
	// Stored after the answer is on its way, off the request's path: a
	// duplicate on this replica waits for release, one on another finds
	// the claim alive and waits for it; if this process dies first, the
	// answer staged in the commit's transaction (or, when nothing
	// committed, a re-run once the lease ran out) answers the retry.
	// Either way nothing runs twice.
	go func() {
		defer release()
		if err := s.Store.FinishIdem(bg, claim.Owner, claim.Key, claim.Token, status, header, stored); err != nil {
			s.Logger.ErrorContext(ctx, "store idempotent answer", "key", claim.Key, "error", err)
		}
	}()
}

// awaitFirst answers a request whose commit lost the key to a duplicate
// that committed first: with that one's answer once it is stored (waiting
// up to the configured wait), like any duplicate.
func (s *Server) awaitFirst(c *gin.Context, cfg IdempotencyConfig, claim *lockstep.IdemClaim) {
	ctx := c.Request.Context()
	deadline := time.Now().Add(cfg.Wait)
	delay := 2 * time.Millisecond
	for {
		cur, err := s.Store.IdemByKey(ctx, claim.Owner, claim.Key)
		if err != nil && lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
			writeError(c, err)
			return
		}
		if cur != nil && claim.Deferred != nil && cur.Fingerprint != claim.Deferred.Fingerprint {
			writeError(c, lockstep.Errorf(lockstep.EIDEMREUSED, "Idempotency-Key %q was used for %s %s with different parameters or body: use a new key for a new operation", claim.Key, cur.Method, cur.Path).
				WithDetails(map[string]any{"idempotency_key": claim.Key, "method": cur.Method, "path": cur.Path, "first_used_at": cur.CreatedAt.Format(time.RFC3339)}))
			return
		}
		if cur != nil && (cur.State == lockstep.IdemDone || (cur.State == lockstep.IdemCommitted && !time.Now().Before(cur.LeaseUntil))) {
			s.replay(c, cur)
			return
		}
		if time.Now().Add(delay).After(deadline) {
			c.Header("Retry-After", "1")
			writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "the first request with Idempotency-Key %q is still running: retry later", claim.Key).
				WithDetails(map[string]any{"idempotency_key": claim.Key}))
			return
		}
		select {
		case <-ctx.Done():
			writeError(c, lockstep.Errorf(lockstep.EINPROGRESS, "gave up waiting for the first request with Idempotency-Key %q", claim.Key))
			return
		case <-time.After(delay):
		}
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// sameAnswer reports whether the handler's answer is the one stored at
// commit, apart from a top-level duration_ms (the stored one is measured
// up to the commit).
func sameAnswer(status int, header map[string]string, body []byte, cStatus int, cHeader map[string]string, cBody []byte) bool {
	if status != cStatus || len(header) != len(cHeader) {
		return false
	}
	for k, v := range header {
		if cHeader[k] != v {
			return false
		}
	}
	if bytes.Equal(body, cBody) {
		return true
	}
	var a, b map[string]json.RawMessage
	if json.Unmarshal(body, &a) != nil || json.Unmarshal(cBody, &b) != nil || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok {
			return false
		}
		if k != "duration_ms" && !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// flightGroup serializes the requests of one replica that carry the same
// (caller, Idempotency-Key): the first runs, the others wait for its
// answer to be stored instead of polling the record.
type flightGroup struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	sem  chan struct{}
	refs int
}

var serverFlights sync.Map // *Server → *flightGroup

func (s *Server) flights() *flightGroup {
	if g, ok := serverFlights.Load(s); ok {
		return g.(*flightGroup)
	}
	g, _ := serverFlights.LoadOrStore(s, &flightGroup{m: map[string]*flight{}})
	return g.(*flightGroup)
}

// acquire waits until no other request of this replica holds id (until
// deadline or ctx's end: ok false) and holds it; release lets the next in.
func (g *flightGroup) acquire(ctx context.Context, id string, deadline time.Time) (release func(), ok bool) {
	g.mu.Lock()
	f := g.m[id]
	if f == nil {
		f = &flight{sem: make(chan struct{}, 1)}
		g.m[id] = f
	}
	f.refs++
	g.mu.Unlock()
	done := func() {
		g.mu.Lock()
		if f.refs--; f.refs == 0 {
			delete(g.m, id)
		}
		g.mu.Unlock()
	}
	select {
	case f.sem <- struct{}{}:
	default:
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case f.sem <- struct{}{}:
		case <-t.C:
			done()
			return nil, false
		case <-ctx.Done():
			done()
			return nil, false
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-f.sem
			done()
		})
	}, true
}

func (s *Server) send(c *gin.Context, status int, header map[string]string, body []byte) {
	for k, v := range header {
		c.Writer.Header().Set(k, v)
	}
	if status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified {
		// The whole answer is known: with its length, the flush below
		// sends headers and body in one write and the connection has
		// nothing left to send (without it, the flush switches the
		// answer to chunked encoding and its end goes in a second write).
		c.Writer.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	c.Writer.WriteHeader(status)
	if len(body) > 0 {
		c.Writer.Write(body)
	}
	c.Writer.WriteHeaderNow()
	c.Writer.Flush()
}

// replay answers from a stored record and counts the replay.
func (s *Server) replay(c *gin.Context, r *lockstep.IdemRecord) {
	ctx := c.Request.Context()
	status, header, body, ok := storedAnswer(r)
	if !ok {
		// Committed without an answer (an operation whose entry carries
		// none): say so instead of running it again.
		ops, _ := s.Store.OpsByIdemKey(ctx, r.Owner, r.Key)
		writeError(c, rebuildFromOps(r, ops))
		s.countReplay(c, r)
		return
	}
	c.Header(IdempotentReplayedHeader, "true")
	s.countReplay(c, r)
	s.send(c, status, header, body)
	c.Abort()
}

func (s *Server) countReplay(c *gin.Context, r *lockstep.IdemRecord) {
	if err := s.Store.CountIdemReplay(context.WithoutCancel(c.Request.Context()), r.Owner, r.Key); err != nil {
		s.Logger.ErrorContext(c, "count idempotent replay", "error", err)
	}
	c.Set("idempotent_replay", true)
}

// rebuildFromOps is the answer for a key whose operation committed but
// left no staged answer: a refusal is rebuilt from its log entry, anything
// else is named, never executed again.
func rebuildFromOps(r *lockstep.IdemRecord, ops []*lockstep.OpEntry) error {
	if len(ops) > 0 {
		last := ops[len(ops)-1]
		if _, ok := statuses[last.Result]; ok && last.Result != "ok" {
			msg, _ := last.Details["error"].(string)
			if msg == "" {
				msg = fmt.Sprintf("%s refused (%s): see operations-log entry %s", last.Op, last.Result, last.ID)
			}
			return lockstep.Errorf(last.Result, "%s", msg).WithDetails(last.Details)
		}
		return lockstep.Errorf(lockstep.EINTERNAL, "the operation with Idempotency-Key %q committed (operations-log entry %s) but its answer was not recorded: read the current state", r.Key, last.ID)
	}
	return lockstep.Errorf(lockstep.EINTERNAL, "the operation with Idempotency-Key %q committed but its answer was not recorded: read the current state", r.Key)
}

// redact is lockstep.RedactSecrets: the one place a stored answer loses
// its secrets (every field in lockstep.SecretFields, at any depth).
func redact(body []byte) []byte { return lockstep.RedactSecrets(body) }

// storedAnswer is the answer a record replays. A refusal carried by a log
// entry is stored as its error envelope without a status: its code maps to
// one here, through the one table (StatusOf). ok false: nothing was stored.
func storedAnswer(r *lockstep.IdemRecord) (status int, header map[string]string, body []byte, ok bool) {
	status, header, body = r.Status, r.Header, r.Body
	if status == 0 {
		if len(body) == 0 {
			return 0, nil, nil, false
		}
		status = StatusOf(lockstep.ErrorEnvelopeCode(body))
	}
	return status, header, body, true
}

// keptHeaders are the answer headers a replay repeats.
func keptHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		if len(v) == 0 {
			continue
		}
		if k == "Content-Type" || k == "Location" || k == "Retry-After" || strings.HasPrefix(k, "X-Lockstep-") {
			out[k] = v[0]
		}
	}
	return out
}

// fingerprint identifies a request: method, route, path parameters,
// query and the body's SHA-256.
func (s *Server) fingerprint(c *gin.Context, body [32]byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", c.Request.Method, c.FullPath())
	ps := make([]string, 0, len(c.Params))
	for _, p := range c.Params {
		ps = append(ps, p.Key+"="+p.Value)
	}
	sort.Strings(ps)
	fmt.Fprintf(h, "%s\n%s\n", strings.Join(ps, "&"), c.Request.URL.Query().Encode())
	h.Write(body[:])
	return hex.EncodeToString(h.Sum(nil))
}

func randomToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// spooled is a request body read ahead of the handler (to hash it before
// anything runs): in memory up to spoolMem, then in a temporary file.
type spooled struct {
	mem  []byte
	file *os.File
	rest io.Reader // the unread remainder when over
	sum  [32]byte
	over bool
}

const spoolMem = 4 << 20

func spoolBody(r io.Reader, limit int64) (*spooled, error) {
	sp := &spooled{}
	if r == nil || r == http.NoBody {
		sp.sum = sha256.Sum256(nil)
		return sp, nil
	}
	h := sha256.New()
	var buf bytes.Buffer
	lr := io.LimitReader(r, limit+1)
	n, err := io.Copy(&buf, io.LimitReader(io.TeeReader(lr, h), spoolMem))
	if err != nil {
		return nil, err
	}
	total := n
	if n == spoolMem {
		f, err := os.CreateTemp("", "lockstep-body-*")
		if err != nil {
			return nil, &spoolTempError{err}
		}
		os.Remove(f.Name())
		sp.file = f
		if _, err := f.Write(buf.Bytes()); err != nil {
			sp.close()
			return nil, &spoolTempError{err}
		}
		tw := &tempWriter{f: f}
		m, err := io.Copy(tw, io.TeeReader(lr, h))
		if err != nil {
			sp.close()
			if tw.err != nil {
				return nil, &spoolTempError{tw.err}
			}
			return nil, err
		}
		total += m
		buf.Reset()
	} else {
		sp.mem = buf.Bytes()
	}
	if total > limit {
		sp.over = true
		sp.rest = r
	}
	copy(sp.sum[:], h.Sum(nil))
	return sp, nil
}

// spoolTempError is a failure of the temp file a body is spooled to (the
// server's side), as opposed to reading the body (the client's).
type spoolTempError struct{ err error }

func (e *spoolTempError) Error() string { return "spool the request body: " + e.err.Error() }
func (e *spoolTempError) Unwrap() error { return e.err }

// tempWriter remembers the error of a write to the spool file, which
// io.Copy would not tell apart from one reading the body.
type tempWriter struct {
	f   *os.File
	err error
}

func (w *tempWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

func (sp *spooled) reader() io.ReadCloser {
	var rd io.Reader
	if sp.file != nil {
		sp.file.Seek(0, io.SeekStart)
		rd = sp.file
	} else {
		rd = bytes.NewReader(sp.mem)
	}
	if sp.rest != nil {
		rd = io.MultiReader(rd, sp.rest)
	}
	return io.NopCloser(rd)
}

func (sp *spooled) close() {
	if sp.file != nil {
		sp.file.Close()
	}
}

// captureWriter holds a handler's answer so it can be stored before it is
// sent.
type captureWriter struct {
	gin.ResponseWriter
	status  int
	written bool
	buf     bytes.Buffer
}

func (w *captureWriter) WriteHeader(code int) {
	if code > 0 && !w.written {
		w.status = code
	}
}
func (w *captureWriter) WriteHeaderNow() { w.written = true }
func (w *captureWriter) Write(b []byte) (int, error) {
	w.written = true
	return w.buf.Write(b)
}
func (w *captureWriter) WriteString(s string) (int, error) {
	w.written = true
	return w.buf.WriteString(s)
}
func (w *captureWriter) Status() int   { return w.status }
func (w *captureWriter) Size() int     { return w.buf.Len() }
func (w *captureWriter) Written() bool { return w.written }
func (w *captureWriter) Flush()        {}

// PurgeIdempotencyKeys deletes expired idempotency records every interval
// until ctx ends (the background cleanup; run by lockstep serve).
func (s *Server) PurgeIdempotencyKeys(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := s.Store.PurgeIdem(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			s.Logger.ErrorContext(ctx, "purge idempotency keys", "error", err)
		} else if n > 0 {
			s.Logger.InfoContext(ctx, "purged idempotency keys", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
