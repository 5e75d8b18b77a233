package repositories_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// badTrees are trees that no write path may land: each breaks one of the
// content rules of an upload (git fsck --strict's, plus the 255-byte
// component limit).
var badTrees = []struct {
	name  string
	files map[string]string
}{
	{"gitmodules url option", map[string]string{".gitmodules": "[submodule \"x\"]\n\tpath = x\n\turl = -oProxyCommand=touch /tmp/pwned\n"}},
	{"gitmodules update command", map[string]string{".gitmodules": "[submodule \"x\"]\n\tpath = x\n\turl = https://example.com/x.git\n\tupdate = !sh -c id\n"}},
	{"gitattributes long line", map[string]string{".gitattributes": strings.Repeat("a", 3000) + " text\n"}},
	{"git path alias", map[string]string{"sub/.GIT/config": "[core]\n"}},
	{"git ntfs short name", map[string]string{"GIT~1/hooks/post-checkout": "#!/bin/sh\n"}},
	{"component over 255 bytes", map[string]string{strings.Repeat("n", 256) + "/f.txt": "x\n"}},
}

func gitIn(t *testing.T, gitDir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_DIR="+gitDir, "GIT_AUTHOR_NAME=old", "GIT_AUTHOR_EMAIL=old@example.com",
		"GIT_COMMITTER_NAME=old", "GIT_COMMITTER_EMAIL=old@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %v: %v: %s", args, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// gitCommit writes files as a tree with git's plumbing (which checks no
// names or contents) into gitDir and commits it on parent ("" for a root
// commit). It returns the commit and its tree.
func gitCommit(t *testing.T, gitDir string, files map[string]string, parent string) (string, string) {
	t.Helper()
	type dir struct {
		files map[string]string
		dirs  map[string]*dir
	}
	newDir := func() *dir { return &dir{files: map[string]string{}, dirs: map[string]*dir{}} }
	root := newDir()
	for p, content := range files {
		d := root
		comps := strings.Split(p, "/")
		for _, c := range comps[:len(comps)-1] {
			if d.dirs[c] == nil {
				d.dirs[c] = newDir()
			}
			d = d.dirs[c]
		}
		d.files[comps[len(comps)-1]] = content
	}
	var write func(d *dir) string
	write = func(d *dir) string {
		var lines []string
		for name, content := range d.files {
			blob := gitIn(t, gitDir, content, "hash-object", "-w", "--stdin")
			lines = append(lines, fmt.Sprintf("100644 blob %s\t%s", blob, name))
		}
		for name, sub := range d.dirs {
			lines = append(lines, fmt.Sprintf("040000 tree %s\t%s", write(sub), name))
		}
		sort.Strings(lines)
		return gitIn(t, gitDir, strings.Join(lines, "\n")+"\n", "mktree")
	}
	tree := write(root)
	args := []string{"commit-tree", tree, "-m", "old"}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	return gitIn(t, gitDir, "", args...), tree
}

// TestEveryWritePathRefusesBadTrees enumerates the ways a tree enters the
// store or a branch — tar push, object pack upload (+ push of the tree),
// git push (a pack; an existing commit on a branch and on a tag), edits,
// rollback, checkpoint restore, merge (fast-forward, merge commit,
// squash, conflict markers on the side branch), workspace sync, landing
// (promote) — and shows that each refuses every bad tree with
// invalid_argument and moves no ref. The old commit they are offered is
// written into the network with git's plumbing, as a commit stored
// before the rules (or by a path that skipped them) would be.
func TestEveryWritePathRefusesBadTrees(t *testing.T) {
	ctx := context.Background()
	w := servicetest.MustWorld(t, servicetest.Options{})
	base := w.MustRepo(t, "app", map[string]string{"a.txt": "a\n"})
	r, err := w.Repos.Repo(ctx, "app")
	if err != nil {
		t.Fatal(err)
	}
	n, err := w.Repos.Network(r.Network)
	if err != nil {
		t.Fatal(err)
	}
	// A diverged branch, for a merge that writes a tree of its own.
	div, err := w.Repos.EditFiles(ctx, w.Admin, "app", []repositories.Edit{{Path: "d.txt", Content: []byte("d\n")}},
		repositories.WriteOptions{Branch: "div", ExpectOID: lockstep.ZeroOID, From: base.Commit})
	if err != nil {
		t.Fatal(err)
	}
	// A branch that changes a.txt too, for a merge with conflict markers.
	conf, err := w.Repos.EditFiles(ctx, w.Admin, "app", []repositories.Edit{{Path: "a.txt", Content: []byte("ours\n")}},
		repositories.WriteOptions{Branch: "conf", ExpectOID: lockstep.ZeroOID, From: base.Commit})
	if err != nil {
		t.Fatal(err)
	}
	// A workspace, for a sync that would bring a bad base commit in.
	if _, err := w.Workspaces.Fork(ctx, w.Admin, "app", "app-ws", ""); err != nil {
		t.Fatal(err)
	}
	setRef := func(repo *lockstep.Repo, ref, old, new string) {
		t.Helper()
		if err := w.Store.UpdateRefs(ctx, []lockstep.RefUpdate{{RepoID: repo.ID, Repo: repo.Name, Name: ref, Old: old, New: new}}, nil, nil,
			&lockstep.OpEntry{KeyID: w.Admin.ID, KeyName: w.Admin.Name, Op: "push", Repo: repo.Name}); err != nil {
			t.Fatal(err)
		}
	}
	refs := func() string {
		t.Helper()
		var b strings.Builder
		for _, name := range []string{"app", "app-ws"} {
			rs, err := w.Repos.Refs(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range rs {
				fmt.Fprintf(&b, "%s %s=%s\n", name, ref.Name, ref.OID)
			}
		}
		return b.String()
	}

	for i, bad := range badTrees {
		files := map[string]string{"a.txt": "theirs\n", "ok.txt": "ok\n"}
		for p, c := range bad.files {
			files[p] = c
		}
		// The same tree as a client-built pack (a root commit)...
		scratch := t.TempDir()
		gitIn(t, scratch, "", "init", "-q", "--bare", scratch)
		packFiles := map[string]string{"pack.txt": "new trees, not the stored ones below\n"}
		for p, c := range files {
			packFiles[p] = c
		}
		packCommit, _ := gitCommit(t, scratch, packFiles, "")
		pack := func() []byte {
			cmd := exec.Command("git", "pack-objects", "--revs", "--stdout")
			cmd.Env = append(os.Environ(), "GIT_DIR="+scratch)
			cmd.Stdin = strings.NewReader(packCommit + "\n")
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			return out
		}()
		// ...and as a commit already stored on top of main.
		oldCommit, oldTree := gitCommit(t, n.Dir(), files, base.Commit)
		oldRef := fmt.Sprintf("refs/heads/old%d", i)
		setRef(r, oldRef, lockstep.ZeroOID, oldCommit)
		var edits []repositories.Edit
		for p, c := range files {
			edits = append(edits, repositories.Edit{Path: p, Content: []byte(c)})
		}
		gitPush := func(ref, commit string, pack []byte) error {
			cmds := []repositories.RefCommand{{Ref: ref, Old: lockstep.ZeroOID, New: commit}}
			var body io.Reader // a nil interface when there is no pack
			if pack != nil {
				body = bytes.NewReader(pack)
			}
			unpackErr, res, err := w.Repos.GitPush(ctx, w.Admin, "app", cmds, false, body)
			switch {
			case err != nil:
				return err
			case unpackErr != nil:
				return unpackErr
			case res[0].Err != nil:
				return res[0].Err
			}
			return nil
		}
		force := repositories.WriteOptions{Branch: "main", Force: true}
		paths := []struct {
			name  string
			write func() error
		}{
			{"tar push", func() error {
				_, err := w.Repos.PushTar(ctx, w.Admin, "app", servicetest.Tar(t, files), force)
				return err
			}},
			{"object pack upload", func() error {
				_, err := w.Repos.UploadPack(ctx, w.Admin, "app", bytes.NewReader(pack))
				return err
			}},
			{"push of a stored tree", func() error {
				_, err := w.Repos.PushTree(ctx, w.Admin, "app", oldTree, force)
				return err
			}},
			{"git push with a pack", func() error { return gitPush(fmt.Sprintf("refs/heads/gp%d", i), packCommit, pack) }},
			{"git push of a stored commit", func() error { return gitPush(fmt.Sprintf("refs/heads/gs%d", i), oldCommit, nil) }},
			{"git push of a tag", func() error { return gitPush(fmt.Sprintf("refs/tags/t%d", i), oldCommit, nil) }},
			{"edits", func() error {
				_, err := w.Repos.EditFiles(ctx, w.Admin, "app", edits, force)
				return err
			}},
			{"edits on a new branch", func() error {
				_, err := w.Repos.EditFiles(ctx, w.Admin, "app", edits, repositories.WriteOptions{Branch: fmt.Sprintf("e%d", i), ExpectOID: lockstep.ZeroOID})
				return err
			}},
			{"rollback", func() error {
				_, err := w.Repos.Rollback(ctx, w.Admin, "app", oldCommit, force)
				return err
			}},
			{"checkpoint restore", func() error {
				_, err := w.Repos.RestoreTree(ctx, w.Admin, "app", "main", oldCommit, "", "", map[string]any{"checkpoint": "c"}, nil)
				return err
			}},
			{"fast-forward merge", func() error {
				_, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "main", Theirs: oldRef, Materialize: true})
				return err
			}},
			{"merge commit", func() error {
				_, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "div", Theirs: oldRef, Materialize: true, ExpectOID: div.Commit})
				return err
			}},
			{"squash merge", func() error {
				_, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "main", Theirs: oldRef, Materialize: true, Mode: "squash"})
				return err
			}},
			{"merge with conflict markers", func() error {
				res, err := w.Repos.Merge(ctx, w.Admin, "app", repositories.MergeRequest{Ours: "conf", Theirs: oldRef, Materialize: true,
					ExpectOID: conf.Commit, OnConflict: "markers"})
				if err == nil && res.SideRef == "" {
					return fmt.Errorf("no conflict: %+v", res)
				}
				return err
			}},
			{"workspace sync", func() error {
				// The base's main holds the old commit (as if it had been
				// stored there before the rules): a sync would bring it in.
				setRef(r, "refs/heads/main", base.Commit, oldCommit)
				defer setRef(r, "refs/heads/main", oldCommit, base.Commit)
				_, err := w.Workspaces.Sync(ctx, w.Admin, "app-ws", "", "")
				return err
			}},
			{"land on a new branch (promote)", func() error {
				_, err := w.Repos.LandCommit(ctx, w.Admin, r, fmt.Sprintf("land%d", i), plumbing.NewHash(oldCommit), plumbing.NewHash(oldTree),
					"merge", "", repositories.Reason{Op: "promote", Start: time.Now()})
				return err
			}},
		}
		for _, p := range paths {
			before := refs()
			err := p.write()
			if code := lockstep.ErrorCode(err); code != lockstep.EINVALID {
				t.Errorf("%s / %s: got %v (%s), want invalid_argument", bad.name, p.name, err, code)
			}
			if after := refs(); after != before {
				t.Errorf("%s / %s: refs moved:\nbefore\n%safter\n%s", bad.name, p.name, before, after)
			}
		}
	}
}
