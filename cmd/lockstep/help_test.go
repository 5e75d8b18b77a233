package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func cli(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

// TestHelpLikeGh: -h says what the command does, prints flags with two
// dashes, keeps backquoted text as text (the flag package made `lockstep
// snapshot take` a value name), names the client flags in one line and
// shows examples; migrate lists only its own flags.
func TestHelpLikeGh(t *testing.T) {
	out, errs, err := cli(t, "checkpoint", "-h")
	if err != exitError(0) || errs != "" {
		t.Fatalf("checkpoint -h: %v, stderr %q", err, errs)
	}
	for _, want := range []string{
		"Record a checkpoint of a workspace",
		"usage: lockstep checkpoint WORKSPACE",
		"  --fs-snapshot string",
		"taken with `lockstep snapshot take`",
		"client flags: --url --key",
		"examples:\n  lockstep checkpoint task-1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("checkpoint -h lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"-fs-snapshot lockstep", "\n  -f", "--url string", "--retry-delay duration"} {
		if strings.Contains(out, not) {
			t.Errorf("checkpoint -h shows %q:\n%s", not, out)
		}
	}
	if help, _, _ := cli(t, "help", "checkpoint"); help != out {
		t.Errorf("help checkpoint differs from checkpoint -h:\n%s", help)
	}
	client, _, err := cli(t, "help", "client")
	if err != nil || !strings.Contains(client, "--retry-delay duration") || !strings.Contains(client, "LOCKSTEP_URL") {
		t.Errorf("help client: %v\n%s", err, client)
	}

	if !serverBuild {
		return // migrate runs the server build (TestClientBuildRunsServer)
	}
	mig, _, _ := cli(t, "migrate", "-h")
	if !strings.Contains(mig, "--database-url") || !strings.Contains(mig, "--data ") {
		t.Errorf("migrate -h lacks its flags:\n%s", mig)
	}
	if n := strings.Count(mig, "\n  --"); n != 2 || strings.Contains(mig, "--redis-url") {
		t.Errorf("migrate -h lists %d flags, want 2 (--data, --database-url):\n%s", n, mig)
	}
}

// TestSuggestions: a mistyped command or flag gets the nearest in a line
// or two and status 2, not the whole list.
func TestSuggestions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pusj"}, `unknown command "pusj" (did you mean push?)`},
		{[]string{"chekout"}, "did you mean checkout?"},
		{[]string{"workspce"}, "did you mean workspace or workspaces?"},
		{[]string{"push", "d", "--exepct", "x"}, "unknown flag --exepct (did you mean --expect?)"},
		{[]string{"log", "app", "--limt", "3"}, "did you mean --limit?"},
	} {
		out, errs, err := cli(t, c.args...)
		if _, ok := err.(flagError); !ok || out != "" {
			t.Errorf("%v: err %v (%T), stdout %q; want a flagError (status 2)", c.args, err, err, out)
		}
		if !strings.Contains(errs, c.want) {
			t.Errorf("%v: stderr lacks %q:\n%s", c.args, c.want, errs)
		}
		if n := strings.Count(errs, "\n"); n > 3 {
			t.Errorf("%v: %d lines on stderr, want at most 3:\n%s", c.args, n, errs)
		}
	}
	_, errs, _ := cli(t, "frobnicate")
	if strings.Contains(errs, "did you mean") {
		t.Errorf("frobnicate got a suggestion: %s", errs)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"push", "pusj", 1}, {"push", "psuh", 1}, {"expect", "exepct", 1}, {"", "abc", 3}, {"merge", "merge", 0}, {"kitten", "sitting", 3}} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
}

// TestVersionFromBuildInfo: the version names the module version and the
// VCS revision, time and dirty flag the toolchain recorded, and says so
// when none was recorded (it printed "lockstep dev").
func TestVersionFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/lockstep-hq/lockstep", Version: "v1.4.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "3f1c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"}, {Key: "vcs.time", Value: "2026-12-05T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	v := versionOf(bi)
	got := v.String()
	for _, want := range []string{"v1.4.0", "commit 3f1c2a9b8d7e", "uncommitted changes", "2026-12-05T10:00:00Z", "go1.26.0"} {
		if !strings.Contains(got, want) {
			t.Errorf("version %q lacks %q", got, want)
		}
	}
	if v.short() != "v1.4.0-3f1c2a9b8d7e-dirty" {
		t.Errorf("short = %q", v.short())
	}
	bare := versionOf(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}).String()
	if !strings.Contains(bare, "no VCS revision recorded") {
		t.Errorf("version without VCS info: %q", bare)
	}
	out, _, err := cli(t, "version", "--json")
	if err != nil || !strings.Contains(out, `"version": `) {
		t.Errorf("version --json: %v %s", err, out)
	}
}

// TestProgressInAPipe: with stderr not a terminal, progress writes no
// carriage returns and one final line with totals in human units.
func TestProgressInAPipe(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := newProgress(&env{stderr: f}, false, "uploading")
	p.total = 40
	for i := 1; i <= 40; i++ {
		p.update(i, int64(i)*512<<10)
	}
	p.end()
	b, _ := os.ReadFile(f.Name())
	if got, want := string(b), "uploading: 40/40 objects, 20.0 MiB, done\n"; got != want {
		t.Errorf("progress in a file: %q, want %q", got, want)
	}
	if newProgress(&env{stderr: f}, true, "x") != nil {
		t.Error("quiet progress is not nil")
	}
	for n, want := range map[int64]string{512: "512 B", 20023396: "19.1 MiB", 3 << 10: "3.0 KiB", 5 << 30: "5.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
