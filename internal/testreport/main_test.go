package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportListsSkipsAndKeepsClosingLines runs a real `go test -json` of
// a small module with a passing, a skipped and a failing test through the
// reporter: go test's own closing lines stay (CI parsers read them), the
// failure's output is shown, passing tests' chatter is not, and the skip
// is listed at the end with its reason.
func TestReportListsSkipsAndKeepsClosingLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/r\n\ngo 1.21\n")
	write("r_test.go", `package r

import "testing"

func TestPasses(t *testing.T) { t.Log("quiet when passing") }

func TestSkips(t *testing.T) { t.Skip("shared/corpus not found: oracle skipped") }

func TestFails(t *testing.T) { t.Error("boom") }
`)
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local")
	js, _ := cmd.Output() // exits 1: TestFails
	var out strings.Builder
	code := report(strings.NewReader(string(js)), &out)
	got := out.String()
	if code != 1 {
		t.Errorf("exit %d, want 1 (a test failed)\n%s", code, got)
	}
	for _, want := range []string{
		"--- FAIL: TestFails",
		"r_test.go:9: boom",
		"FAIL\texample.com/r\t",
		"skipped: 1 tests (not run, so not proven by this run):",
		"  example.com/r TestSkips: r_test.go:7: shared/corpus not found: oracle skipped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"=== RUN", "quiet when passing", "--- PASS", "\"Action\""} {
		if strings.Contains(got, not) {
			t.Errorf("report shows %q, which plain go test hides:\n%s", not, got)
		}
	}
}

func TestReportPassingPackage(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`
	var out strings.Builder
	if code := report(strings.NewReader(in), &out); code != 0 || out.String() != "ok  \tp\t0.01s\n" {
		t.Errorf("exit %d, output %q; want 0 and only the ok line", code, out.String())
	}
}
