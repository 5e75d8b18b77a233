package testenv

import (
	"net"
	"os/exec"
	"testing"
)

// GitBinary returns the path of the git executable, or fails the test with
// instructions. Lockstep shells out to git for smart HTTP (upload-pack,
// receive-pack), and tests compare its layout against the plain git CLI.
func GitBinary(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("git")
	if err != nil {
		tb.Fatalf("testenv: git not found in PATH: %v\n"+
			"install it (apt-get install -y git) or run the tests through scripts/test", err)
	}
	return p
}

// chromiumNames are the executable names chromium goes by across distributions.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"}

// Chromium returns the path of a chromium (or Chrome) executable for browser
// tests of the web UI, or fails the test with instructions.
func Chromium(tb testing.TB) string {
	tb.Helper()
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	tb.Fatalf("testenv: chromium not found in PATH (looked for %v)\n"+
		"install it (apt-get install -y chromium) or run the tests through scripts/test", chromiumNames)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free when asked. Another
// process can take it before the caller binds it; prefer listening on ":0"
// directly when the code under test accepts a listener.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testenv: find free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
