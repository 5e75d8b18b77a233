package delivery

import (
	"context"
	"sync"
	"time"
)

// DrainOutbox is the loop of an outbox worker (hook deliveries here,
// effects in package effects): claim a batch of due rows, send each
// concurrently, claim again until none is due, then sleep until the next
// poll or a wake-up, until ctx ends. claim takes the rows' leases in the
// metadata store (replicas never send one row at the same time); a claim
// error is reported to failed (unless ctx ended) and waits for the next
// poll.
func DrainOutbox[T any](ctx context.Context, poll time.Duration, wake <-chan struct{},
	claim func(context.Context) ([]T, error), send func(T), failed func(error)) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			rows, err := claim(ctx)
			if err != nil {
				if ctx.Err() == nil {
					failed(err)
				}
				break
			}
			if len(rows) == 0 {
				break
			}
			var wg sync.WaitGroup
			for _, r := range rows {
				wg.Add(1)
				go func(r T) {
					defer wg.Done()
					send(r)
				}(r)
			}
			wg.Wait()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-wake:
		}
	}
}
