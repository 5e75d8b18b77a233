package e2ekit

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NPMTimeout bounds each npm command of [NPMPackage] and [NPM]: generous,
// for a loaded machine and a cold npm cache.
const NPMTimeout = 10 * time.Minute

var npmPackages sync.Map // source dir → *npmPackage

type npmPackage struct {
	once sync.Once
	dir  string
	err  error
}

// RequireNode skips the test when node or npm is not installed (the only
// reason a Node.js test may skip: CI has them).
func RequireNode(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found in PATH: install Node.js (20 or newer) to run the TypeScript tests", tool)
		}
	}
	out, err := exec.Command("node", "-p", "process.versions.node.split('.')[0]").Output()
	if err != nil {
		t.Fatalf("node -p process.versions.node: %v", err)
	}
	if major, err := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || major < 20 {
		t.Fatalf("node %s is too old: the TypeScript client and the recipes need Node.js 20 or newer", strings.TrimSpace(string(out)))
	}
}

// NPMPackage copies the npm package in src (without node_modules, dist and
// *.tgz) under TmpRoot and runs `npm ci` there, once per test binary and
// source directory; it returns the copy. npm's own cache serves the
// packages when it has them (--prefer-offline), so the install works
// without the registry once they were fetched.
func NPMPackage(t testing.TB, src string) string {
	t.Helper()
	RequireNode(t)
	abs, err := filepath.Abs(src)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := npmPackages.LoadOrStore(abs, &npmPackage{})
	p := v.(*npmPackage)
	p.once.Do(func() {
		p.dir = filepath.Join(TmpRoot, "npm-"+filepath.Base(abs))
		if p.err = copyPackage(abs, p.dir); p.err != nil {
			return
		}
		var out string
		out, p.err = RunNPM(p.dir, nil, "ci", "--prefer-offline", "--no-audit", "--no-fund")
		if p.err != nil {
			p.err = fmt.Errorf("npm ci in a copy of %s: %v\n%s", src, p.err, out)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.dir
}

// NPM runs npm with args in dir (extra environment added) and returns its
// combined output; the test fails when npm does.
func NPM(t testing.TB, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := RunNPM(dir, env, args...)
	if err != nil {
		t.Fatalf("npm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// RunNPM runs npm with args in dir (extra environment added, the rest
// from CleanEnv) within NPMTimeout and returns its combined output.
func RunNPM(dir string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), NPMTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", args...)
	cmd.Dir = dir
	cmd.Env = append(append(CleanEnv(), "npm_config_update_notifier=false"), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func copyPackage(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(d.Name(), ".tgz") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
