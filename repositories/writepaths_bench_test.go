package repositories_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// BenchmarkWritePaths measures the service's write paths end to end on
// the local object store (SQLite metadata, a bare repository on disk):
// a tar push of a 200-file worktree with one file changed, a rollback to
// the first commit, and a materialized merge of a branch with one edited
// file into main (a real merge commit: both sides moved). It is the
// before/after measure of a change to the ObjectStore seam
// (docs/benchmarks.md).
func BenchmarkWritePaths(b *testing.B) {
	ctx := context.Background()
	files := map[string]string{}
	for i := 0; i < 200; i++ {
		files[fmt.Sprintf("pkg%d/f%d.go", i%10, i)] = fmt.Sprintf("package p\n\nconst C%d = %d\n", i, i)
	}
	b.Run("push", func(b *testing.B) {
		w := servicetest.MustWorld(b, servicetest.Options{})
		w.MustRepo(b, "app", files)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			files["pkg0/f0.go"] = fmt.Sprintf("package p\n\nconst C0 = %d\n", i+1000)
			if _, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(b, files), repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rollback", func(b *testing.B) {
		w := servicetest.MustWorld(b, servicetest.Options{})
		first := w.MustRepo(b, "app", files)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := w.Repos.EditFiles(ctx, w.Admin, "app", []repositories.Edit{{Path: "new.txt", Content: []byte(fmt.Sprint(i))}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
			if _, err := w.Repos.Rollback(ctx, w.Admin, "app", first.Commit, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		w := servicetest.MustWorld(b, servicetest.Options{})
		w.MustRepo(b, "app", files)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			br := fmt.Sprintf("b%d", i)
			if _, err := w.Repos.EditFiles(ctx, w.Admin, "app", []repositories.Edit{{Path: fmt.Sprintf("pkg1/side%d.txt", i), Content: []byte("side\n")}}, repositories.WriteOptions{Branch: br, Force: true}); err != nil {
				b.Fatal(err)
			}
			if _, err := w.Repos.EditFiles(ctx, w.Admin, "app", []repositories.Edit{{Path: fmt.Sprintf("pkg2/main%d.txt", i), Content: []byte("main\n")}}, repositories.WriteOptions{Branch: "main", Force: true}); err != nil {
				b.Fatal(err)
			}
			if _, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "main", Theirs: br, Materialize: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
