package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is the module version of this binary, with the VCS revision it
// was built from when the build recorded one.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " (" + rev + dirty + ")"
	}
	return v
}

func cmdVersion(_ context.Context, e *env, _ []string) error {
	_, err := fmt.Fprintln(e.stdout, "lockstep", version())
	return err
}
