package repositories_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// hangGuard bounds a wait that would never end on broken code; it is not
// a duration assertion.
const hangGuard = 60 * time.Second

// heldCompaction is the real local object store (gitstore.Local)
// whose Compact reports that it started and then holds, as a long git
// repack would, until its context is cancelled (or the test releases
// it), before running the real Compact under that context.
type heldCompaction struct {
	repositories.ObjectStore
	started chan struct{} // closed when the first Compact begins
	release chan struct{} // closed by the test's cleanup
	once    sync.Once

	mu     sync.Mutex
	ctxErr error // ctx.Err() once the hold ended
	err    error // the real Compact's answer
}

func (h *heldCompaction) Compact(ctx context.Context) error {
	h.once.Do(func() { close(h.started) })
	select {
	case <-ctx.Done():
	case <-h.release:
	}
	err := h.ObjectStore.Compact(ctx)
	h.mu.Lock()
	h.ctxErr, h.err = ctx.Err(), err
	h.mu.Unlock()
	return err
}

// TestCloseCancelsRunningCompaction: Service.Close cancels a background
// compaction that is running and returns (it used to run under
// context.Background(), so Close waited for the whole git repack).
func TestCloseCancelsRunningCompaction(t *testing.T) {
	ctx := context.Background()
	held := &heldCompaction{started: make(chan struct{}), release: make(chan struct{})}
	w := servicetest.MustWorld(t, servicetest.Options{Repos: repositories.Config{
		CompactPacks: 1,
		Objects: gitobj.OpenerFunc(func(dir string, opts gitobj.OpenOptions) (gitobj.Store, error) {
			n, err := gitstore.Local{}.Open(dir, opts)
			if err != nil {
				return nil, err
			}
			held.ObjectStore = n
			return held, nil
		}),
	}})
	// Registered after MustWorld's cleanups, so it runs before them: on
	// broken code the held compaction ends and the world's Close returns.
	t.Cleanup(func() { close(held.release) })

	// Every push adds a pack: the second one takes the network past
	// CompactPacks and starts a compaction.
	first := w.MustRepo(t, "app", map[string]string{"a.txt": "one\n"})
	if _, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, map[string]string{"a.txt": "two\n"}),
		repositories.WriteOptions{Branch: "main", ExpectOID: first.Commit}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held.started:
	case <-time.After(hangGuard):
		t.Fatalf("no compaction started after two pushes with CompactPacks 1 (%d packs)", held.PackCount())
	}

	closed := make(chan error, 1)
	go func() { closed <- w.Repos.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(hangGuard):
		t.Fatal("Service.Close did not return while a compaction was running: the compaction's context was not cancelled by Close")
	}
	held.mu.Lock()
	defer held.mu.Unlock()
	if !errors.Is(held.ctxErr, context.Canceled) {
		t.Fatalf("compaction's context after Close: %v, want context.Canceled", held.ctxErr)
	}
	if held.err == nil {
		t.Fatal("the real Compact under a cancelled context answered success; want the cancelled repack's error")
	}
}
