package api

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// problemLine is a stylish-format problem: "  12:7  warning  rule  text".
var problemLine = regexp.MustCompile(`(?m)^\s*\d+:\d+\s+(warning|error)\s`)

// redoclyCLI is the pinned linter version (NOTES-libraries: 2.77.0 or 1.34.20).
const redoclyCLI = "@redocly/cli@2.77.0"

// TestRedoclyLint lints openapi.yaml with @redocly/cli's recommended rules
// (via npx; skipped when node is not installed — scripts/test installs it).
// Warnings count as failures: the document must lint clean.
func TestRedoclyLint(t *testing.T) {
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Skip("npx not found: install nodejs and npm to lint the OpenAPI document")
	}
	cmd := exec.Command(npx, "--yes", redoclyCLI, "lint", "--format=stylish", "--max-problems=50", "openapi.yaml")
	cmd.Env = append(cmd.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint openapi.yaml: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "Your API description is valid") || problemLine.MatchString(s) {
		t.Fatalf("redocly lint reported problems:\n%s", s)
	}
}

// TestJSON: the embedded YAML converts to the JSON the server serves.
func TestJSON(t *testing.T) {
	j, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"openapi":"3.1.0"`) {
		t.Fatalf("JSON() is not an OpenAPI 3.1 document: %.200s", j)
	}
}
