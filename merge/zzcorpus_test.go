package merge

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

func TestZZCorpus(t *testing.T) {
	dir := os.Getenv("ZZ_CORPUS")
	if dir == "" {
		t.Skip()
	}
	out, _ := exec.Command("git", "-C", dir, "rev-list", "--all", "--merges", "--min-parents=2", "--max-parents=2").Output()
	st := filesystem.NewStorageWithOptions(osfs.New(dir), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
	var agree, renames, differ, total, markerSame int
	for _, m := range strings.Fields(string(out)) {
		total++
		ps, _ := exec.Command("git", "-C", dir, "rev-parse", m+"^1", m+"^2").Output()
		p := strings.Fields(string(ps))
		if err := exec.Command("git", "-C", dir, "merge-base", p[0], p[1]).Run(); err != nil {
			t.Logf("%s: no merge base, skipped", m)
			continue
		}
		want := gitMergeTree(t, dir, nil, p[0], p[1])
		got, err := Merge(context.Background(), NewOverlay(st), plumbing.NewHash(p[0]), plumbing.NewHash(p[1]), Options{Deep: true})
		if err != nil {
			t.Logf("%s: %v", m, err)
			continue
		}
		if matches(got, want) {
			agree++
			if !want.clean {
				mk, err := Merge(context.Background(), NewOverlay(st), plumbing.NewHash(p[0]), plumbing.NewHash(p[1]), Options{Deep: true, Markers: true, OursLabel: p[0], TheirsLabel: p[1]})
				if err != nil {
					t.Fatal(err)
				}
				if mk.Tree == want.tree {
					markerSame++
				} else {
					t.Logf("%s: conflicted tree differs (%s %s) kinds %v", m, p[0], p[1], mk.Conflicts)
				}
			}
			continue
		}
		if mentionsRename(want.messages) {
			renames++
			continue
		}
		differ++
		t.Logf("%s (%s %s): git clean=%v conflicts=%v tree=%s; we clean=%v conflicts=%v tree=%s\n%s", m, p[0], p[1], want.clean, want.conflicts, want.tree, got.Clean, conflictPaths(got), got.Tree, want.messages)
	}
	t.Logf("%d merges: %d agree (%d conflicted trees identical to git's), %d differ with renames in git's messages, %d differ otherwise", total, agree, markerSame, renames, differ)
}
