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

// cmdVersion prints the version; --json as {"version": …} like every
// other command's answer, -h its usage.
func cmdVersion(_ context.Context, e *env, args []string) error {
	f := newFlagger("version", e)
	asJSON := f.fs.Bool("json", false, "print JSON (for agents and scripts)")
	if err := f.parse(args); err != nil {
		return err
	}
	if len(f.pos) > 0 {
		f.fs.Usage()
		return exitError(2)
	}
	if *asJSON {
		return writeJSON(e.stdout, map[string]string{"version": version()})
	}
	_, err := fmt.Fprintln(e.stdout, "lockstep", version())
	return err
}
