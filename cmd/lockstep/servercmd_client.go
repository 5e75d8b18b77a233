//go:build !lockstep_server

package main

import "context"

// The client build (`go build ./cmd/lockstep`): the server commands are
// run by the server build, lockstep-server, with the same arguments.
func runServe(ctx context.Context, e *env, args []string) error {
	return execServer(ctx, e, "serve", args)
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	return execServer(ctx, e, "migrate", args)
}

func runBench(ctx context.Context, e *env, args []string) error {
	return execServer(ctx, e, "bench", args)
}

func runLoad(ctx context.Context, e *env, args []string) error {
	return execServer(ctx, e, "load", args)
}

func runMCP(ctx context.Context, e *env, args []string) error {
	return execServer(ctx, e, "mcp", args)
}

// serverBuild reports whether this binary links the server.
const serverBuild = false

// maybeEgress: the client build is never the egress proxy (it does not
// link it); lockstep-egress or lockstep-server __egress is.
func maybeEgress() {}
