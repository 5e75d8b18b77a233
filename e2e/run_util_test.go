package e2e

import (
	"encoding/json"
	"os/exec"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func errOut(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
