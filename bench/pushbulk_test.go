package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPushBulkGroup runs the push-bulk group on a small bundle (two
// branches, a merge, a lightweight and an annotated tag, and a
// refs/pull/1/head on a commit of no branch, as GitHub's bundles hold)
// against a `lockstep serve` process: both rows have Lockstep and
// baseline numbers for every round, notes on CPU, and the group's own
// checks passed: after round 0 every branch and tag was listed by
// Lockstep and by the git-http target at the bundle's objects (else Run
// fails), and a file:// push's child CPU was counted. The source holds
// the branches and tags only (the pull ref deleted), and the note on the
// --mirror clone (with the pull ref) has its Lockstep and file:// figures.
// No timing is asserted. (The
// server is a child process here, reaped only at the end, so the
// Lockstep CPU lacks the server's share; `lockstep bench` runs it
// in-process.)
func TestPushBulkGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a lockstep server and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard, not a timing assertion
	defer cancel()
	dir := t.TempDir()
	bin := e2ekit.Binary
	bundle := withPullRef(t, testBundle(t, filepath.Join(dir, "hist")), filepath.Join(dir, "hist"))
	var stdout, stderr bytes.Buffer
	o := Options{Dir: dir, Files: 40, BigFiles: 50, Iterations: 1, JSON: true, Bin: bin, Seed: 1, Only: []string{"push-bulk"},
		Objstore:    ObjstoreOptions{Bundles: []string{bundle}},
		StartServer: func(ctx context.Context, c ServerConfig) (*Server, error) { return startServeProcess(ctx, t, bin, c) },
		Stderr:      &stderr,
	}
	if err := Run(ctx, o, &stdout); err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}
	var out struct {
		Rows []struct {
			Name    string   `json:"scenario"`
			Size    string   `json:"size"`
			LS      *dist    `json:"lockstep"`
			Git     *dist    `json:"git"`
			Skipped string   `json:"skipped"`
			Failed  []string `json:"failed"`
			Notes   []string `json:"notes"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, stdout.String())
	}
	want := PushBulkRowNames([]string{bundle})
	if len(want) != 2 || want[0] != "push-bulk-hist" || want[1] != "push-bulk-hist:git-http" {
		t.Fatalf("PushBulkRowNames = %v", want)
	}
	if len(out.Rows) != len(want) {
		t.Errorf("%d rows, want %d (%v)", len(out.Rows), len(want), want)
	}
	const rounds = 3 // max(3, iterations/2)
	for i, name := range want {
		if i >= len(out.Rows) {
			t.Errorf("no row %q", name)
			continue
		}
		r := out.Rows[i]
		if r.Name != name || r.Skipped != "" {
			t.Errorf("row %d = %q (skipped %q), want %q", i, r.Name, r.Skipped, name)
			continue
		}
		if r.LS == nil || r.LS.N != rounds || r.LS.Median <= 0 || r.Git == nil || r.Git.N != rounds || r.Git.Median <= 0 {
			t.Errorf("row %q: Lockstep %+v, baseline %+v, want %d pushes each", name, r.LS, r.Git, rounds)
		}
		notes := strings.Join(r.Notes, "\n")
		if !strings.Contains(notes, "CPU") {
			t.Errorf("row %q: no CPU note: %s", name, notes)
		}
		// main, feature, v0.1, v0.2: checked with ls-remote after round 0.
		if !strings.Contains(notes, "lists the 4 branches and tags") || !strings.Contains(r.Size, "4 branches and tags") {
			t.Errorf("row %q: refs not verified as 4 branches and tags: %s; %s", name, r.Size, notes)
		}
		// refs/pull/1/head: not in the source, reported.
		if !strings.Contains(notes, "holding its 4 branches and tags only") || !strings.Contains(notes, "its 1 other refs deleted") ||
			!strings.Contains(r.Size, "also held 1 other refs") {
			t.Errorf("row %q: the source is not said to hold the branches and tags only: %s; %s", name, r.Size, notes)
		}
		if i == 0 && !oldFixtureNote.MatchString(notes) {
			t.Errorf("row %q: no figures from the --mirror clone: %s", name, notes)
		}
		for _, f := range r.Failed {
			if strings.Contains(f, "not counted") {
				t.Errorf("row %q: %s", name, f)
			}
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
}

// oldFixtureNote is the note on the pushes from the --mirror clone, with
// both medians of both measures.
var oldFixtureNote = regexp.MustCompile(`from the --mirror clone \(4 branches and tags \+ 1 other refs.*wall median Lockstep [0-9.]+ ms, file:// [0-9.]+ ms \([0-9.]+×\); CPU median Lockstep [0-9.]+ ms, file:// [0-9.]+ ms \([0-9.]+×\)`)

// withPullRef remakes the bundle of the history in dir with a
// refs/pull/1/head on a commit no branch holds.
func withPullRef(t *testing.T, bundle, dir string) string {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	tree := git("rev-parse", "main^{tree}")
	pr := git("commit-tree", "-p", "main", "-m", "pull request", tree)
	git("update-ref", "refs/pull/1/head", pr)
	git("bundle", "create", "-q", bundle, "--all")
	if n := strings.Count(git("bundle", "list-heads", bundle), "\n") + 1; n != 6 { // HEAD, 2 branches, 2 tags, the pull ref
		t.Fatalf("bundle lists %d heads, want 6", n)
	}
	return bundle
}

// TestGitHTTPRepoDir: the git-http server serves only direct children
// of its root.
func TestGitHTTPRepoDir(t *testing.T) {
	g := &gitHTTP{root: "/r"}
	for p, want := range map[string]string{
		"/a.git/info/refs": "/r/a.git", "/a/info/refs": "/r/a",
		"/../info/refs": "", "/./info/refs": "", "/info/refs": "", "/a/b.git/info/refs": "", "/a.git/info/refsx": "",
	} {
		got, ok := g.repoDir(p, "/info/refs")
		if got != want || ok != (want != "") {
			t.Errorf("repoDir(%q) = %q, %v; want %q", p, got, ok, want)
		}
	}
}
