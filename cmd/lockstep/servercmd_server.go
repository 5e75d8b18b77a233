//go:build lockstep_server

package main

import (
	"context"
	"os"

	"github.com/lockstep-hq/lockstep/egress/egressproc"
)

// The server build (-tags lockstep_server, installed as lockstep-server):
// the server commands run in this process.
func runServe(ctx context.Context, e *env, args []string) error   { return cmdServe(ctx, e, args) }
func runMigrate(ctx context.Context, e *env, args []string) error { return cmdMigrate(ctx, e, args) }
func runBench(ctx context.Context, e *env, args []string) error   { return cmdBench(ctx, e, args) }
func runLoad(ctx context.Context, e *env, args []string) error    { return cmdLoad(ctx, e, args) }
func runMCP(ctx context.Context, e *env, args []string) error     { return cmdMCP(ctx, e, args) }

// serverBuild reports whether this binary links the server.
const serverBuild = true

// maybeEgress runs `lockstep-server __egress …` as lockstep-egress does
// (a run's egress proxy, egressproc.Main) and exits; the client build
// uses it when lockstep-egress is not installed.
func maybeEgress() {
	if len(os.Args) > 1 && os.Args[1] == "__egress" {
		os.Exit(egressproc.Main(os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
	}
}
