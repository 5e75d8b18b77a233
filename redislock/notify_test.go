package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
	"github.com/lockstep-hq/lockstep/redislock"
)

// TestNotifierDeliversAndStops: an announcement reaches a subscriber, and
// Subscribe returns once its context ends although no message comes (a
// replica's shutdown waits for it: go-redis's blocking receive does not
// watch the context).
func TestNotifierDeliversAndStops(t *testing.T) {
	rdb, prefix := testenv.MustRedis(t)
	n := redislock.NewNotifier(rdb, prefix+"net:")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- n.Subscribe(ctx, func(network string, gen int64) {
			if network == "net-a" {
				got <- gen
			}
		})
	}()
	// Publish until the subscription is up (a message before it is lost,
	// as pub/sub allows).
	deadline := time.Now().Add(30 * time.Second)
	for received := false; !received; {
		if err := n.Publish(context.Background(), "net-a", 7); err != nil {
			t.Fatal(err)
		}
		select {
		case gen := <-got:
			if gen != 7 {
				t.Fatalf("generation %d, want 7", gen)
			}
			received = true
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no announcement delivered within 30s")
			}
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Subscribe still blocked 30s after its context ended")
	}
}
