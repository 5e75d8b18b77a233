package repositories_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/gitobj"
	"github.com/lockstep-hq/lockstep/gitstore"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// sharedLocal is the local opener declaring its networks shared
// (gitobj.Shared), as replica.Manager does.
type sharedLocal struct{ gitstore.Local }

func (sharedLocal) SharesNetworks() bool { return true }

// plainOpener opens local networks but implements no optional interface.
type plainOpener struct{}

func (plainOpener) Open(dir string, o gitobj.OpenOptions) (gitobj.Store, error) {
	return gitstore.Local{}.Open(dir, o)
}

func mirroredRefs(t *testing.T, n repositories.ObjectStore, repoName string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", n.Dir(), "for-each-ref", "--format=%(refname)", "refs/namespaces/"+repoName+"/refs/").CombinedOutput()
	if err != nil {
		t.Fatalf("git for-each-ref: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestSharedOpenerDecidesMirrorMode: the service asks the opener
// (gitobj.Shared) whether networks are shared, instead of a mode
// setting: a local opener gets its ref mirror written after each move; a
// shared one only when git is about to serve the repository (PrepareGit).
func TestSharedOpenerDecidesMirrorMode(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		opener gitobj.Opener
		shared bool
	}{{"local", gitstore.Local{}, false}, {"shared", sharedLocal{}, true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := servicetest.MustWorld(t, servicetest.Options{Repos: repositories.Config{Objects: tc.opener}})
			w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
			r, err := w.Repos.Repo(ctx, "app")
			if err != nil {
				t.Fatal(err)
			}
			n, err := w.Repos.Network(r.Network)
			if err != nil {
				t.Fatal(err)
			}
			got := mirroredRefs(t, n, "app")
			if want := "refs/namespaces/app/refs/heads/main"; tc.shared && got != "" || !tc.shared && got != want {
				t.Fatalf("mirror after a push: %q (shared %v)", got, tc.shared)
			}
			if _, err := w.Repos.PrepareGit(ctx, r); err != nil {
				t.Fatal(err)
			}
			if got := mirroredRefs(t, n, "app"); got != "refs/namespaces/app/refs/heads/main" {
				t.Fatalf("mirror after PrepareGit: %q", got)
			}
		})
	}
}

// TestSweepTempsAsksTheOpener: SweepTemps removes a crash's temp files
// through the opener's gitobj.TempSweeper, and leaves the networks alone
// when the opener has none.
func TestSweepTempsAsksTheOpener(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opener  gitobj.Opener
		removed bool
	}{{"local", gitstore.Local{}, true}, {"no sweeper", plainOpener{}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			w := servicetest.MustWorld(t, servicetest.Options{Repos: repositories.Config{Objects: tc.opener}})
			w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
			stale := filepath.Join(w.Dir, "networks", "app.git", "objects", "pack", "tmp_pack_crashed")
			if err := os.WriteFile(stale, []byte("left by a crash"), 0o644); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-time.Hour)
			if err := os.Chtimes(stale, old, old); err != nil {
				t.Fatal(err)
			}
			st := w.Repos.SweepTemps()
			_, err := os.Stat(stale)
			if gone := os.IsNotExist(err); gone != tc.removed || (st.Files == 1) != tc.removed {
				t.Fatalf("stale temp file gone %v, sweep %+v; want removed %v", gone, st, tc.removed)
			}
		})
	}
}
