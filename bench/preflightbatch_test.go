package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestPreflightBatchGroup runs the preflight-batch group once, two
// recorded rounds, on a bundle of its own (52 first-parent merges of
// one-commit side branches, 7 of the 50 it merges conflicting) against a
// `lockstep serve` process: both rows have a distribution per way of the
// right size and their notes, and the group's own check that the five
// ways agree on which merges are clean passed (43 of 50). A bundle with
// too few merges gives one skipped row naming --bundles. No timing is
// asserted.
func TestPreflightBatchGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts lockstep servers and runs git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard, not a timing assertion
	defer cancel()
	dir := t.TempDir()
	bin := e2ekit.Binary
	bundle := mergesBundle(t, filepath.Join(dir, "merges"), 52)
	run := func(bundles []string) ([]jsonRow, string) {
		var stdout, stderr bytes.Buffer
		o := Options{Dir: dir, Files: 40, BigFiles: 50, Iterations: 2, JSON: true, Bin: bin, Seed: 1, Only: []string{"preflight-batch"},
			Objstore:    ObjstoreOptions{Bundles: bundles},
			StartServer: func(ctx context.Context, c ServerConfig) (*Server, error) { return startServeProcess(ctx, t, bin, c) },
			Stderr:      &stderr,
		}
		if err := Run(ctx, o, &stdout); err != nil {
			t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
		}
		var out struct {
			Rows []jsonRow `json:"rows"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("bench --json: %v\n%s", err, stdout.String())
		}
		return out.Rows, stdout.String() + "\nstderr:\n" + stderr.String()
	}

	rows, log := run([]string{bundle})
	want := PreflightBatchRowNames()
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %v:\n%s", len(rows), want, log)
	}
	for i, name := range want {
		r := rows[i]
		if r.Name != name || r.Skipped != "" {
			t.Errorf("row %d: %q skipped %q, want %q", i, r.Name, r.Skipped, name)
			continue
		}
		if r.LS == nil || r.LS.N != 2 || r.LS.Median <= 0 || r.Git == nil || r.Git.N != 2 || r.Git.Median <= 0 {
			t.Errorf("row %q: lockstep %+v, git %+v; want 2 recorded rounds each", name, r.LS, r.Git)
		}
		notes := strings.Join(r.Notes, "\n")
		for _, s := range []string{"all five ways agree on which merges are clean (43 of 50 clean", "2 recorded rounds after 1 warm-up", "server handler"} {
			if !strings.Contains(notes, s) {
				t.Errorf("row %q: no note with %q:\n%s", name, s, notes)
			}
		}
		if name == "preflight-single" {
			for _, s := range []string{"without Idempotency-Key", "50 separate `git merge-tree --write-tree BASE BRANCH` processes"} {
				if !strings.Contains(notes, s) {
					t.Errorf("row %q: no note with %q:\n%s", name, s, notes)
				}
			}
		}
	}
	if t.Failed() {
		t.Logf("%s", log)
	}

	// A bundle with one merge: the group is one skipped row.
	rows, log = run([]string{mergesBundle(t, filepath.Join(dir, "few"), 3)})
	if len(rows) != 1 || rows[0].Name != "preflight-batch" || !strings.Contains(rows[0].Skipped, "--bundles") {
		t.Errorf("with a bundle of 3 merges: want one skipped preflight-batch row naming --bundles:\n%s", log)
	}
}

type jsonRow struct {
	Name    string   `json:"scenario"`
	LS      *dist    `json:"lockstep"`
	Git     *dist    `json:"git"`
	Skipped string   `json:"skipped"`
	Failed  []string `json:"failed"`
	Notes   []string `json:"notes"`
}

// mergesBundle writes (with git fast-import) a bundle whose main has
// `merges` first-parent merges: main changes shared.txt after the root,
// then merge i brings in side branch i, forked from the root, which adds
// s<i>.txt and, when i%7 == 3, changes shared.txt too (a conflict with
// any later main).
func mergesBundle(t *testing.T, dir string, merges int) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	data := func(s string) { fmt.Fprintf(&in, "data %d\n%s\n", len(s), s) }
	commit := func(ref string, mark int, msg string, from int, merge int, files map[string]string) {
		fmt.Fprintf(&in, "commit %s\nmark :%d\ncommitter t <t@example.com> %d +0000\n", ref, mark, 1700000000+mark)
		data(msg)
		if from > 0 {
			fmt.Fprintf(&in, "from :%d\n", from)
		}
		if merge > 0 {
			fmt.Fprintf(&in, "merge :%d\n", merge)
		}
		for _, p := range []string{"shared.txt", "README"} { // a fixed order for shared ones
			if c, ok := files[p]; ok {
				fmt.Fprintf(&in, "M 100644 inline %s\n", p)
				data(c)
				delete(files, p)
			}
		}
		for p, c := range files {
			fmt.Fprintf(&in, "M 100644 inline %s\n", p)
			data(c)
		}
		in.WriteString("\n")
	}
	commit("refs/heads/main", 1, "root", 0, 0, map[string]string{"shared.txt": "root\n", "README": "merges\n"})
	commit("refs/heads/main", 2, "main changes shared.txt", 1, 0, map[string]string{"shared.txt": "main\n"})
	prev := 2
	for i := 0; i < merges; i++ {
		side, m := 10+2*i, 11+2*i
		add := fmt.Sprintf("s%02d.txt", i)
		files := map[string]string{add: fmt.Sprintf("side %d\n", i)}
		if i%7 == 3 {
			files["shared.txt"] = fmt.Sprintf("side %d\n", i)
		}
		commit("refs/heads/side", side, fmt.Sprintf("side %d", i), 1, 0, files)
		commit("refs/heads/main", m, fmt.Sprintf("merge side %d", i), prev, side, map[string]string{add: fmt.Sprintf("side %d\n", i)})
		prev = m
	}
	git := func(stdin []byte, args ...string) {
		t.Helper()
		c := exec.Command("git", args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if stdin != nil {
			c.Stdin = bytes.NewReader(stdin)
		}
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git(nil, "init", "-q", "--bare", "-b", "main", ".")
	git(in.Bytes(), "fast-import", "--quiet")
	git(nil, "update-ref", "-d", "refs/heads/side")
	bundle := dir + ".bundle"
	git(nil, "bundle", "create", "-q", bundle, "--all")
	return bundle
}
