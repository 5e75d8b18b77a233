package dbbranch

import (
	"context"
	"fmt"
	"testing"
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
