//go:build lockstep_server

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/agentmcp"
	"github.com/lockstep-hq/lockstep/client"
)

// cmdMCP serves the MCP tools over stdio for an agent on this machine: the
// API tools act through LOCKSTEP_URL with LOCKSTEP_KEY, and push_directory
// and run_command run this binary's push and run on local directories.
func cmdMCP(ctx context.Context, e *env, args []string) error {
	cf, c, rest, err := setup("mcp", e, args, nil)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return lockstep.Errorf(lockstep.EINVALID, "usage: lockstep mcp [--url URL] [--key KEY | --key-file F] (speaks MCP on stdin/stdout)")
	}
	// Local tools run client commands: with the client build that started
	// this server build when there is one (it starts faster), else this one.
	self := e.getenv("LOCKSTEP_CLIENT_BINARY")
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return fmt.Errorf("find own binary: %w", err)
		}
	}
	srv := agentmcp.New(agentmcp.Options{
		Version: readVersion().short(),
		Client:  func(context.Context, *mcp.RequestExtra) (*client.Client, error) { return c, nil },
		Local: func(ctx context.Context, args []string) ([]byte, error) {
			return runSelf(ctx, self, cf.url, c.Key, args)
		},
	})
	err = srv.Run(ctx, &mcp.StdioTransport{})
	if err != nil && ctx.Err() != nil {
		return nil // stopped by a signal
	}
	return err
}

// runSelf runs this binary with args (a client command) against the same
// server and key, and returns its standard output. A failure with nothing
// on standard output becomes the *lockstep.Error it printed.
func runSelf(ctx context.Context, self, url, key string, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "LOCKSTEP_URL="+url, "LOCKSTEP_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("run lockstep %s: %w", args[0], err)
	}
	if err != nil && stdout.Len() == 0 {
		return nil, cliError(stderr.String(), ee.ExitCode())
	}
	out := stdout.Bytes()
	if err != nil {
		out = append(out, fmt.Sprintf("\n(exit status %d)", ee.ExitCode())...)
	}
	return out, nil
}

// cliError reads "lockstep: code: message" back into an error.
func cliError(stderr string, status int) error {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := strings.TrimPrefix(lines[len(lines)-1], "lockstep: ")
	if code, msg, ok := strings.Cut(last, ": "); ok && !strings.Contains(code, " ") {
		return &lockstep.Error{Code: code, Message: msg}
	}
	if last == "" {
		last = fmt.Sprintf("exit status %d", status)
	}
	return lockstep.Errorf(lockstep.EINTERNAL, "%s", last)
}
