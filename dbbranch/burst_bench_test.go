package dbbranch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkBurst measures a burst of burstSize concurrent forks, each
// iteration side by side with the same burst of bare CREATE DATABASE …
// TEMPLATE (one connection each), interleaved so both see the same load.
// The warm manager's pool is given time to refill between bursts (as it
// would between bursts in use). Metrics: p50 and p99 over every fork of
// every burst, in ms.
//
//	go test -run '^$' -bench Burst -benchtime 10x ./dbbranch
func BenchmarkBurst(b *testing.B) {
	const burstSize = 10
	ctx := context.Background()
	f := mustFixture(b, Config{Warm: true, MaxSpares: burstSize})
	mustOK(b, f.m.BindTemplate(ctx, "app", f.template))
	conns := make([]*pgx.Conn, burstSize)
	for i := range conns {
		conns[i] = mustAdmin(b)
	}
	// One burst first, untimed: the pool learns the demand.
	burst := func(run int, fn func(i int) error) []time.Duration {
		out := make([]time.Duration, burstSize)
		var wg sync.WaitGroup
		for i := range burstSize {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				if err := fn(i); err != nil {
					b.Errorf("burst %d fork %d: %v", run, i, err)
				}
				out[i] = time.Since(t0)
			}()
		}
		wg.Wait()
		return out
	}
	fork := func(run int) func(i int) error {
		return func(i int) error {
			_, err := f.m.CreateBranch(ctx, "app", fmt.Sprintf("b%d-%d", run, i))
			return err
		}
	}
	drop := func(run int) {
		for i := range burstSize {
			mustOK(b, f.m.DropBranch(ctx, fmt.Sprintf("b%d-%d", run, i)))
		}
	}
	waitIdle(b, f.m)
	burst(-1, fork(-1))
	drop(-1)
	var raw, ls []time.Duration
	for run := 0; b.Loop(); run++ {
		b.StopTimer()
		waitIdle(b, f.m)
		b.StartTimer()
		raw = append(raw, burst(run, func(i int) error {
			_, err := conns[i].Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY WAL_LOG", ident(fmt.Sprintf("%s_raw%d_%d", f.prefix, run, i)), ident(f.template)))
			return err
		})...)
		ls = append(ls, burst(run, fork(run))...)
		b.StopTimer()
		for i := range burstSize {
			mustExec(b, f.admin, "DROP DATABASE "+ident(fmt.Sprintf("%s_raw%d_%d", f.prefix, run, i)))
		}
		drop(run)
		b.StartTimer()
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(raw, 0.5), "raw_p50_ms")
	b.ReportMetric(pct(raw, 0.99), "raw_p99_ms")
	b.ReportMetric(pct(ls, 0.5), "fork_p50_ms")
	b.ReportMetric(pct(ls, 0.99), "fork_p99_ms")
	b.ReportMetric(0, "ns/op")
	st := f.m.Stats()
	b.Logf("stats: %+v", st)
}
