package checkpoints_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/dbbranch"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// hangGuard bounds a wait that would never end on broken code; it is not
// a duration assertion.
const hangGuard = 60 * time.Second

// heldRefresh is the real Postgres brancher (dbbranch) whose
// RefreshTemplate, once armed, reports that it started and then holds, as
// a long template copy would, until its context is cancelled (or the test
// releases it), then finishes with real Postgres work (see below).
type heldRefresh struct {
	lockstep.Brancher
	armed    chan struct{} // closed by the test: hold the next refresh
	started  chan struct{} // closed when the held refresh begins
	finished chan struct{} // closed when it returns
	release  chan struct{} // closed by the test's cleanup

	mu     sync.Mutex
	ctxErr error // ctx.Err() once the hold ended
}

func (h *heldRefresh) RefreshTemplate(ctx context.Context, repo string) error {
	select {
	case <-h.armed:
	default:
		return h.Brancher.RefreshTemplate(ctx, repo)
	}
	defer close(h.finished)
	close(h.started)
	select {
	case <-ctx.Done():
	case <-h.release:
	}
	h.mu.Lock()
	h.ctxErr = ctx.Err()
	h.mu.Unlock()
	// Real work is left after the cancel, as in a copy being torn down:
	// a Postgres round trip, then the real refresh under the cancelled
	// context. A Close that does not wait returns well before this ends.
	if _, err := h.Brancher.Template(context.WithoutCancel(ctx), repo); err != nil {
		return err
	}
	return h.Brancher.RefreshTemplate(ctx, repo)
}

// TestCloseWaitsForPromoteRefresh: checkpoints.Service.Close cancels the
// template refresh AfterPromote started in the background and returns
// only once it has finished (the goroutine used to be untracked and
// never cancelled: it outlived Close).
func TestCloseWaitsForPromoteRefresh(t *testing.T) {
	ctx := context.Background()
	tplURL := testenv.MustPostgresDB(t)
	u, err := url.Parse(tplURL)
	if err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	rand.Read(b[:])
	m, err := dbbranch.New(ctx, dbbranch.Config{AdminURL: testenv.PostgresURL(t), Prefix: "c" + hex.EncodeToString(b[:]), Secret: []byte("test secret")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.DropRepo(context.Background(), "app")
		m.Close()
	})
	held := &heldRefresh{Brancher: dbbranch.Brancher{M: m}, armed: make(chan struct{}),
		started: make(chan struct{}), finished: make(chan struct{}), release: make(chan struct{})}
	w := servicetest.MustWorld(t, servicetest.Options{Brancher: held})
	// Registered after MustWorld's cleanups, so it runs before them: on
	// broken code the held refresh ends before the Postgres cleanups.
	t.Cleanup(func() {
		close(held.release)
		select {
		case <-held.started:
			<-held.finished
		default: // never started
		}
	})
	w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	if _, err := w.Checkpoints.BindTemplate(ctx, w.Admin, "app", strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatal(err)
	}

	close(held.armed)
	w.Checkpoints.AfterPromote(ctx, "app")
	select {
	case <-held.started:
	case <-time.After(hangGuard):
		t.Fatal("AfterPromote started no template refresh for a repository with a template")
	}

	closed := make(chan error, 1)
	go func() { closed <- w.Checkpoints.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("checkpoints.Service.Close did not return while a promote's template refresh was running")
	}
	select {
	case <-held.finished:
	default:
		t.Fatal("Close returned while the promote's background template refresh was still running (not waited for)")
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	if !errors.Is(held.ctxErr, context.Canceled) {
		t.Fatalf("refresh's context after Close: %v, want context.Canceled", held.ctxErr)
	}
}
