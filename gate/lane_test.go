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

func TestSignVerify(t *testing.T) {
	body := []byte(`{"event":"push"}`)
	sig := Sign("0123456789abcdef", body)
	if !Verify("0123456789abcdef", body, sig) {
		t.Fatal("own signature does not verify")
	}
	if Verify("0123456789abcdeX", body, sig) || Verify("0123456789abcdef", []byte(`{"event":"pull"}`), sig) || Verify("0123456789abcdef", body, "sha256=00") {
		t.Fatal("a wrong secret, body or signature verified")
	}
	// Known value: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
	if got := Sign("key", []byte("The quick brown fox jumps over the lazy dog")); got != "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8" {
		t.Fatalf("signature %s", got)
	}
}

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	s := &Service{cfg: Config{HookBackoff: time.Second, HookMaxBackoff: 10 * time.Second}}
	for n := 1; n <= 8; n++ {
		want := time.Second << (n - 1)
		if want > 10*time.Second {
			want = 10 * time.Second
		}
		for i := 0; i < 50; i++ {
			d := s.backoff(n)
			if d < want*8/10 || d > want*12/10 {
				t.Fatalf("backoff(%d) = %s, want %s ±20%%", n, d, want)
			}
		}
	}
}
