package gate

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestLaneIsFIFO: waiters are served in arrival order, and a cancelled
// waiter neither blocks nor skips the others.
func TestLaneIsFIFO(t *testing.T) {
	l := &lane{mu: make(chan struct{}, 1)}
	if err := l.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	cancelled, cancel := context.WithCancel(context.Background())
	for i := 0; i < 20; i++ {
		ctx := context.Background()
		if i == 7 {
			ctx = cancelled
		}
		wg.Add(1)
		ready := make(chan struct{})
		go func(i int, ctx context.Context) {
			defer wg.Done()
			go func() {
				// Wait until this goroutine is queued before starting the next.
				for {
					l.mu <- struct{}{}
					n := len(l.queue)
					<-l.mu
					if n == i+2 {
						close(ready)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			if err := l.acquire(ctx); err != nil {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.release()
		}(i, ctx)
		<-ready
	}
	cancel()
	l.release()
	wg.Wait()
	if len(order) != 19 {
		t.Fatalf("served %d waiters, want 19: %v", len(order), order)
	}
	for k := 1; k < len(order); k++ {
		if order[k] < order[k-1] {
			t.Fatalf("not FIFO: %v", order)
		}
	}
	if len(l.queue) != 0 {
		t.Fatalf("queue not empty: %d", len(l.queue))
	}
}
