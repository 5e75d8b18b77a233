//go:build lockstep_server

package main

import "context"

// The server build (-tags lockstep_server, installed as lockstep-server):
// the server commands run in this process.
func runServe(ctx context.Context, e *env, args []string) error   { return cmdServe(ctx, e, args) }
func runMigrate(ctx context.Context, e *env, args []string) error { return cmdMigrate(ctx, e, args) }
func runBench(ctx context.Context, e *env, args []string) error   { return cmdBench(ctx, e, args) }
func runLoad(ctx context.Context, e *env, args []string) error    { return cmdLoad(ctx, e, args) }
func runMCP(ctx context.Context, e *env, args []string) error     { return cmdMCP(ctx, e, args) }

// serverBuild reports whether this binary links the server.
const serverBuild = true
