package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPushBulkGroup runs the push-bulk group on a small bundle (two
// branches, a merge, a lightweight and an annotated tag) against a
// `lockstep serve` process: both rows have Lockstep and baseline
// numbers for every round, notes on CPU, and the group's own checks
// passed: after round 0 every branch and tag was listed by Lockstep and
// by the git-http target at the bundle's objects (else Run fails), and a
// file:// push's child CPU was counted. No timing is asserted. (The
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
	bundle := testBundle(t, filepath.Join(dir, "hist"))
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
