package dbbranch

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// go test -run=^$ -bench=. -benchtime=20x ./dbbranch

// BenchmarkRawCreateTemplate is the floor of the cold path: CREATE DATABASE
// … TEMPLATE of the 10-table database, nothing else.
func BenchmarkRawCreateTemplate(b *testing.B) {
	for _, strat := range []string{"WAL_LOG", "FILE_COPY"} {
		b.Run(strat, func(b *testing.B) {
			ctx := context.Background()
			f := mustFixture(b, Config{})
			for i := 0; b.Loop(); i++ {
				name := fmt.Sprintf("%s_raw%d", f.prefix, i)
				if _, err := f.admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY %s", ident(name), ident(f.template), strat)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				mustExec(b, f.admin, "DROP DATABASE "+ident(name))
				b.StartTimer()
			}
		})
	}
}

func BenchmarkCreateBranch(b *testing.B) {
	for _, warm := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(b *testing.B) {
			ctx := context.Background()
			f := mustFixture(b, Config{Warm: warm})
			mustOK(b, f.m.BindTemplate(ctx, "app", f.template))
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				waitIdle(b, f.m)
				ws := fmt.Sprintf("ws-%d", i)
				b.StartTimer()
				if _, err := f.m.CreateBranch(ctx, "app", ws); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				mustOK(b, f.m.DropBranch(ctx, ws))
				b.StartTimer()
			}
			st := f.m.Stats()
			if warm && st.ColdBranches > 0 || !warm && st.WarmBranches > 0 {
				b.Fatalf("wrong path taken: %+v", st)
			}
		})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	f := mustFixture(b, Config{})
	mustOK(b, f.m.BindTemplate(ctx, "app", f.template))
	must[*Branch](b)(f.m.CreateBranch(ctx, "app", "ws"))
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("s%d", i)
		if _, err := f.m.Snapshot(ctx, "ws", id); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		mustOK(b, f.m.DropSnapshot(ctx, "ws", id))
		b.StartTimer()
	}
}

func BenchmarkRestore(b *testing.B) {
	for _, warm := range []bool{false, true} {
		b.Run(map[bool]string{false: "cold", true: "warm"}[warm], func(b *testing.B) {
			ctx := context.Background()
			f := mustFixture(b, Config{Warm: warm})
			mustOK(b, f.m.BindTemplate(ctx, "app", f.template))
			must[*Branch](b)(f.m.CreateBranch(ctx, "app", "ws"))
			must[*Snapshot](b)(f.m.Snapshot(ctx, "ws", "s1"))
			for b.Loop() {
				b.StopTimer()
				waitIdle(b, f.m)
				b.StartTimer()
				if _, err := f.m.Restore(ctx, "ws", "s1"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			waitIdle(b, f.m)
			st := f.m.Stats()
			if warm && st.ColdRestores > 0 || !warm && st.WarmRestores > 0 {
				b.Fatalf("wrong path taken: %+v", st)
			}
		})
	}
}

// BenchmarkSideBySide runs every operation once per iteration, interleaved,
// so that they are compared under the same server load (the shared test
// machine's load swings by 5x between runs). Metrics are medians in ms.
func BenchmarkSideBySide(b *testing.B) {
	ctx := context.Background()
	cold := mustFixture(b, Config{})
	warm := mustFixture(b, Config{Warm: true})
	mustOK(b, cold.m.BindTemplate(ctx, "app", cold.template))
	mustOK(b, warm.m.BindTemplate(ctx, "app", warm.template))
	must[*Branch](b)(cold.m.CreateBranch(ctx, "app", "ws"))
	must[*Branch](b)(warm.m.CreateBranch(ctx, "app", "ws"))
	must[*Snapshot](b)(cold.m.Snapshot(ctx, "ws", "s0"))
	must[*Snapshot](b)(warm.m.Snapshot(ctx, "ws", "s0"))
	samples := map[string][]time.Duration{}
	timed := func(name string, fn func()) {
		t0 := time.Now()
		fn()
		samples[name] = append(samples[name], time.Since(t0))
	}
	for i := 0; b.Loop(); i++ {
		raw := fmt.Sprintf("%s_raw%d", cold.prefix, i)
		timed("raw_create_ms", func() {
			mustExec(b, cold.admin, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s STRATEGY WAL_LOG", ident(raw), ident(cold.template)))
		})
		mustExec(b, cold.admin, "DROP DATABASE "+ident(raw))
		ws := fmt.Sprintf("w%d", i)
		timed("branch_cold_ms", func() { must[*Branch](b)(cold.m.CreateBranch(ctx, "app", ws)) })
		waitIdle(b, warm.m)
		timed("branch_warm_ms", func() { must[*Branch](b)(warm.m.CreateBranch(ctx, "app", ws)) })
		timed("snapshot_ms", func() { must[*Snapshot](b)(cold.m.Snapshot(ctx, "ws", fmt.Sprintf("s%d", i+1))) })
		timed("restore_cold_ms", func() { must[*Branch](b)(cold.m.Restore(ctx, "ws", "s0")) })
		waitIdle(b, warm.m)
		timed("restore_warm_ms", func() { must[*Branch](b)(warm.m.Restore(ctx, "ws", "s0")) })
		mustOK(b, cold.m.DropBranch(ctx, ws))
		mustOK(b, cold.m.DropSnapshot(ctx, "ws", fmt.Sprintf("s%d", i+1)))
		mustOK(b, warm.m.DropBranch(ctx, ws))
	}
	b.StopTimer()
	waitIdle(b, warm.m)
	for name, d := range samples {
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, name)
	}
	b.ReportMetric(0, "ns/op")
	if st := warm.m.Stats(); st.ColdBranches > 0 || st.ColdRestores > 0 {
		b.Fatalf("warm manager took a cold path: %+v", st)
	}
}
