// Package buckettest is the contract every bucket.Bucket passes (go-git's
// storage/test): one suite, run on each backend (filebucket on a temp
// directory, s3packs on the real versitygw of internal/testenv).
package buckettest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/bucket"
)

// Pack is a real git pack and its index on disk.
type Pack struct {
	Hash, PackPath, IdxPath string
}

// MakePack builds a pack with the git CLI from a one-file repository
// whose file holds content.
func MakePack(t testing.TB, content string) Pack {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f.txt")
	git("commit", "-q", "-m", "x")
	git("repack", "-a", "-d", "-q")
	packs, _ := filepath.Glob(filepath.Join(dir, ".git", "objects", "pack", "pack-*.pack"))
	if len(packs) != 1 {
		t.Fatalf("git repack made %d packs", len(packs))
	}
	h := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(packs[0]), "pack-"), ".pack")
	return Pack{Hash: h, PackPath: packs[0], IdxPath: strings.TrimSuffix(packs[0], ".pack") + ".idx"}
}

// Run runs the contract on the bucket open returns; each call must give
// an empty bucket.
func Run(t *testing.T, open func(t *testing.T) bucket.Bucket) {
	ctx := context.Background()
	p1, p2 := MakePack(t, "one\n"), MakePack(t, "two\n")
	wantCode := func(t *testing.T, err error, code string) {
		t.Helper()
		if lockstep.ErrorCode(err) != code {
			t.Fatalf("got %v (%s), want %s", err, lockstep.ErrorCode(err), code)
		}
	}
	t.Run("PutGetList", func(t *testing.T) {
		b := open(t)
		if err := b.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		for _, p := range []Pack{p1, p2, p1} { // the second put of p1 leaves it as it is
			if err := b.PutPack(ctx, "net-1", p.Hash, p.PackPath, p.IdxPath); err != nil {
				t.Fatalf("put %s: %v", p.Hash, err)
			}
		}
		list, err := b.ListPacks(ctx, "net-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].Hash > list[1].Hash {
			t.Fatalf("listed %+v, want the two packs sorted by hash", list)
		}
		for _, pi := range list {
			p := p1
			if pi.Hash == p2.Hash {
				p = p2
			}
			ps, _ := os.Stat(p.PackPath)
			is, _ := os.Stat(p.IdxPath)
			if !pi.Complete() || pi.PackSize != ps.Size() || pi.IdxSize != is.Size() || pi.Modified.IsZero() {
				t.Errorf("pack %+v: want sizes %d/%d and a time", pi, ps.Size(), is.Size())
			}
		}
		dir := t.TempDir()
		pack, idx := filepath.Join(dir, "p.pack"), filepath.Join(dir, "p.idx")
		if err := b.GetPack(ctx, "net-1", p2.Hash, pack, idx); err != nil {
			t.Fatalf("get: %v", err)
		}
		for _, f := range [][2]string{{p2.PackPath, pack}, {p2.IdxPath, idx}} {
			want, _ := os.ReadFile(f[0])
			got, _ := os.ReadFile(f[1])
			if !bytes.Equal(want, got) {
				t.Errorf("%s: got %d bytes, not the %d put", f[1], len(got), len(want))
			}
		}
		nets, err := b.ListNetworks(ctx)
		if err != nil || len(nets) != 1 || nets[0] != "net-1" {
			t.Errorf("networks %v (%v), want [net-1]", nets, err)
		}
		if other, err := b.ListPacks(ctx, "net-2"); err != nil || len(other) != 0 {
			t.Errorf("an empty network lists %v (%v)", other, err)
		}
	})
	t.Run("Refusals", func(t *testing.T) {
		b := open(t)
		// The files of p1 under p2's name.
		wantCode(t, b.PutPack(ctx, "net-1", p2.Hash, p1.PackPath, p1.IdxPath), lockstep.EINVALID)
		wantCode(t, b.PutPack(ctx, "../escape", p1.Hash, p1.PackPath, p1.IdxPath), lockstep.EINVALID)
		wantCode(t, b.PutPack(ctx, "net-1", "not-a-hash", p1.PackPath, p1.IdxPath), lockstep.EINVALID)
		dir := t.TempDir()
		wantCode(t, b.GetPack(ctx, "net-1", p1.Hash, filepath.Join(dir, "p.pack"), filepath.Join(dir, "p.idx")), lockstep.ENOTFOUND)
		if _, err := os.Stat(filepath.Join(dir, "p.idx")); err == nil {
			t.Errorf("a failed get left the index")
		}
		if list, err := b.ListPacks(ctx, "net-1"); err != nil || len(list) != 0 {
			t.Errorf("refused puts stored %v (%v)", list, err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		b := open(t)
		if err := b.PutPack(ctx, "net-1", p1.Hash, p1.PackPath, p1.IdxPath); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // deleting a missing pack succeeds
			if err := b.DeletePack(ctx, "net-1", p1.Hash); err != nil {
				t.Fatalf("delete %d: %v", i, err)
			}
		}
		if list, err := b.ListPacks(ctx, "net-1"); err != nil || len(list) != 0 {
			t.Errorf("after delete: %v (%v)", list, err)
		}
		if nets, err := b.ListNetworks(ctx); err != nil || len(nets) != 0 {
			t.Errorf("after delete, networks %v (%v)", nets, err)
		}
		dir := t.TempDir()
		wantCode(t, b.GetPack(ctx, "net-1", p1.Hash, filepath.Join(dir, "p.pack"), filepath.Join(dir, "p.idx")), lockstep.ENOTFOUND)
	})
}
