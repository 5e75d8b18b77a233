package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lockstep-hq/lockstep"
)

// How the client build runs the server build (servercmd_client.go). This
// file is in both builds so its tests run in either.

// serverBinaryName is the server build's file name, next to lockstep.
const serverBinaryName = "lockstep-server"

// modulePath is this module's path, recognised in a go.mod when the
// server build is made from source.
const modulePath = "github.com/lockstep-hq/lockstep"

// execServer is a server command of the client build: it finds the server
// build (findServer) and runs it with the command and its arguments. On
// the process's own streams it replaces this process (the server gets
// the pid and the signals directly); otherwise (in tests) it runs it as a
// child with the env's streams.
func execServer(ctx context.Context, e *env, name string, args []string) error {
	bin, err := findServer(e)
	if err != nil {
		return err
	}
	argv := append([]string{bin, name}, args...)
	environ := os.Environ()
	if self, err := os.Executable(); err == nil {
		// The server build runs client commands (bench's scenarios,
		// mcp's tools) with the client build it came from.
		environ = append(environ, "LOCKSTEP_CLIENT_BINARY="+self)
	}
	if e.stdin == os.Stdin && e.stdout == os.Stdout && e.stderr == os.Stderr {
		err := syscall.Exec(bin, argv, environ)
		return fmt.Errorf("run the server build %s: %w", bin, err)
	}
	cmd := exec.CommandContext(ctx, bin, argv[1:]...)
	cmd.Env = environ
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() >= 0 {
			return exitError(ee.ExitCode())
		}
		return fmt.Errorf("run the server build %s: %w", bin, err)
	}
	return nil
}

// findServer is the server build this client runs, the first of:
// LOCKSTEP_SERVER_BINARY; lockstep-server in this executable's directory
// (symbolic links resolved); lockstep-server on PATH; and, inside a
// checkout of this module with the Go toolchain on PATH (`go run
// ./cmd/lockstep serve`), one built from that source into the user cache
// directory (go build: compiled and linked again only when the source
// changed).
func findServer(e *env) (string, error) {
	if p := strings.TrimSpace(e.getenv("LOCKSTEP_SERVER_BINARY")); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return "", lockstep.Errorf(lockstep.EINVALID, "LOCKSTEP_SERVER_BINARY=%s: not an executable file", p)
		}
		return p, nil
	}
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		p := filepath.Join(filepath.Dir(self), serverBinaryName)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(serverBinaryName); err == nil {
		return p, nil
	}
	root := moduleRoot()
	goBin, goErr := exec.LookPath("go")
	if root == "" || goErr != nil {
		return "", lockstep.Errorf(lockstep.ENOTCONFIGURED,
			"this lockstep is the client build: the server commands (serve, migrate, mcp, bench, load) run %s, which is not next to it, on PATH or in LOCKSTEP_SERVER_BINARY; "+
				"build it with `go build -tags lockstep_server -o %s ./cmd/lockstep` (or use the release archive or image, which hold both)", serverBinaryName, serverBinaryName)
	}
	return buildServer(e, goBin, root)
}

// buildServer builds the server from the module at root into the user
// cache directory, keyed by root.
func buildServer(e *env, goBin, root string) (string, error) {
	return buildFromSource(e, goBin, root, "server-", serverBinaryName, []string{"-tags", "lockstep_server"}, "./cmd/lockstep")
}

// buildFromSource builds pkg of the module at root (go build with flags)
// as name into the user cache directory, in a directory keyed by prefix
// and root.
func buildFromSource(e *env, goBin, root, prefix, name string, flags []string, pkg string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	out := filepath.Join(cache, "lockstep", prefix+hex.EncodeToString(sum[:6]), name)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	fmt.Fprintf(e.stderr, "lockstep: no %s found; building it from %s (go %s) into %s\n", name, root, strings.Join(args, " "), out)
	cmd := exec.Command(goBin, args...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = e.stderr, e.stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), root, err)
	}
	return out, nil
}

// moduleRoot is the directory above the working directory whose go.mod
// declares this module, or "".
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			match := false
			for sc.Scan() {
				if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
					match = strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "module ")), `"`) == modulePath
					break
				}
			}
			f.Close()
			if match {
				return dir
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}
