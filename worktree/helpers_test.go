package worktree_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// genSpec describes a generated working tree.
type genSpec struct {
	Files, Dirs int
	AvgSize     int   // average file size in bytes
	Seed        int64 // same seed, same tree
	Exotic      bool  // exec bits, symlinks, empty dirs and files, unicode names
}

// genTree fills root as spec says and returns the regular files created
// (slash-separated, relative to root), sorted.
func genTree(tb testing.TB, root string, spec genSpec) []string {
	tb.Helper()
	rng := rand.New(rand.NewSource(spec.Seed))
	names := []string{"src", "pkg", "internal", "cmd", "docs", "lib", "a", "a.b", "a-", "a0", "test", "util"}
	if spec.Exotic {
		names = append(names, "café", "日本語", "naïve dir", "emoji-😀", "Ünïcode", "z z", "x=y", "a+")
	}
	dirs := []string{""}
	depth := map[string]int{"": 0}
	for i := 1; i < spec.Dirs; i++ {
		parent := dirs[rng.Intn(len(dirs))]
		if depth[parent] >= 7 {
			parent = ""
		}
		d := fmt.Sprintf("%s%d", names[rng.Intn(len(names))], i)
		if parent != "" {
			d = parent + "/" + d
		}
		mustMkdir(tb, filepath.Join(root, d))
		dirs = append(dirs, d)
		depth[d] = depth[parent] + 1
	}
	var files []string
	exts := []string{".go", ".md", "", ".txt", ".b", "-x", "0"}
	buf := make([]byte, 2*spec.AvgSize+1)
	for i := 0; i < spec.Files; i++ {
		d := dirs[rng.Intn(len(dirs))]
		name := fmt.Sprintf("%s%d%s", names[rng.Intn(len(names))], i, exts[rng.Intn(len(exts))])
		rel := name
		if d != "" {
			rel = d + "/" + name
		}
		size := rng.Intn(2*spec.AvgSize + 1)
		rng.Read(buf[:size])
		mode := os.FileMode(0o644)
		if spec.Exotic && rng.Intn(10) == 0 {
			mode = 0o755
		}
		if spec.Exotic && rng.Intn(20) == 0 {
			size = 0
		}
		mustWrite(tb, filepath.Join(root, rel), buf[:size], mode)
		files = append(files, rel)
	}
	if spec.Exotic {
		for i := 0; i < spec.Files/20+1; i++ {
			d := dirs[rng.Intn(len(dirs))]
			to := files[rng.Intn(len(files))]
			rel := fmt.Sprintf("link%d", i)
			if d != "" {
				rel = d + "/" + rel
			}
			target, err := filepath.Rel(filepath.Join(root, d), filepath.Join(root, to))
			if err != nil {
				tb.Fatal(err)
			}
			if i%7 == 3 {
				target = "does-not-exist" // dangling but inside: git stores it
			}
			mustSymlink(tb, target, filepath.Join(root, rel))
		}
		mustMkdir(tb, filepath.Join(root, "empty"))
		mustMkdir(tb, filepath.Join(root, "nested-empty", "a", "b"))
	}
	sort.Strings(files)
	return files
}

func mustMkdir(tb testing.TB, p string) {
	tb.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		tb.Fatal(err)
	}
}

func mustWrite(tb testing.TB, p string, data []byte, mode os.FileMode) {
	tb.Helper()
	mustMkdir(tb, filepath.Dir(p))
	if err := os.WriteFile(p, data, mode); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // WriteFile keeps an existing file's mode
		tb.Fatal(err)
	}
}

func mustSymlink(tb testing.TB, target, p string) {
	tb.Helper()
	mustMkdir(tb, filepath.Dir(p))
	if err := os.Symlink(target, p); err != nil {
		tb.Fatal(err)
	}
}

// gitRepo is a bare git directory used with GIT_WORK_TREE to ask the real
// git what it makes of a directory.
type gitRepo struct {
	tb     testing.TB
	gitDir string
}

func newGitRepo(tb testing.TB) *gitRepo {
	tb.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		tb.Skip("git not installed")
	}
	g := &gitRepo{tb: tb, gitDir: filepath.Join(tb.TempDir(), "repo.git")}
	g.run("", nil, "init", "-q", "--bare", g.gitDir)
	// What Scan skips, git must skip too for the oids to be comparable.
	mustWrite(tb, filepath.Join(g.gitDir, "info", "exclude"), []byte(".lockstep/\n"), 0o644)
	return g
}

// run runs git with workTree (if any) and returns its stdout.
func (g *gitRepo) run(workTree string, stdin []byte, args ...string) string {
	g.tb.Helper()
	out, err := g.try(workTree, stdin, args...)
	if err != nil {
		g.tb.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func (g *gitRepo) try(workTree string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+g.gitDir,
		"GIT_DIR="+g.gitDir,
		"GIT_INDEX_FILE="+filepath.Join(g.gitDir, "index"),
	)
	if workTree != "" {
		cmd.Env = append(cmd.Env, "GIT_WORK_TREE="+workTree)
		cmd.Dir = workTree
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// writeTree is `git add -A && git write-tree` on dir.
func (g *gitRepo) writeTree(dir string) string {
	g.tb.Helper()
	g.run(dir, nil, "-c", "core.bare=false", "-c", "core.fileMode=true", "-c", "core.symlinks=true", "add", "-A")
	return strings.TrimSpace(g.run(dir, nil, "-c", "core.bare=false", "write-tree"))
}
