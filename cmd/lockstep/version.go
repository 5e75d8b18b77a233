package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// revision may be set at link time (-ldflags "-X main.revision=$(git
// rev-parse HEAD)") where the toolchain cannot stamp it (a Docker build
// without .git, -buildvcs=false).
var revision string

// buildVersion is what `lockstep version` reports.
type buildVersion struct {
	Version  string `json:"version"`            // module version, or "(devel)"
	Revision string `json:"revision,omitempty"` // VCS commit
	Time     string `json:"time,omitempty"`     // commit time
	Modified bool   `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go       string `json:"go,omitempty"`       // toolchain
}

// readVersion is the version of this binary: its module version and the
// VCS revision, commit time and dirty flag the Go toolchain embedded
// (runtime/debug.ReadBuildInfo).
func readVersion() buildVersion {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{Version: "(devel)", Revision: revision}
	if bi == nil {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	v.Go = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// String is one line: "lockstep v1.2.0 (commit 3f1c2a9b8d7e, 2026-12-05T10:00:00Z) go1.26".
func (v buildVersion) String() string {
	var b strings.Builder
	b.WriteString(v.Version)
	switch {
	case v.Revision != "":
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		b.WriteString(" (commit " + rev)
		if v.Modified {
			b.WriteString(" with uncommitted changes")
		}
		if v.Time != "" {
			b.WriteString(", " + v.Time)
		}
		b.WriteString(")")
	default:
		b.WriteString(" (no VCS revision recorded: built outside a git checkout or with -buildvcs=false)")
	}
	if v.Go != "" {
		b.WriteString(" " + v.Go)
	}
	return b.String()
}

// version is the one-line version (also the MCP server's and load's).
func version() string { return readVersion().String() }

// cmdVersion prints the version; --json as {"version": …, "revision": …}
// like every other command's answer, -h its usage.
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
		return writeJSON(e.stdout, readVersion())
	}
	_, err := fmt.Fprintln(e.stdout, "lockstep", version())
	return err
}

// short is the version for protocol handshakes (MCP serverInfo):
// "v1.2.0" or "(devel)-3f1c2a9b8d7e".
func (v buildVersion) short() string {
	if v.Revision == "" {
		return v.Version
	}
	rev := v.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if v.Modified {
		rev += "-dirty"
	}
	return v.Version + "-" + rev
}
