package gitstore

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

// TestRemoveStaleTemps: temp files a crash left (git's and ours) are removed
// once older than the grace period; young ones (a write in flight) and
// everything else stay.
func TestRemoveStaleTemps(t *testing.T) {
	n := MustOpen(t)
	now := time.Now()
	old := now.Add(-time.Hour)
	files := map[string]bool{ // path -> removed
		"objects/pack/tmp_pack_abc":          true,
		"objects/pack/tmp_idx_abc":           true,
		"objects/pack/.tmp-123-pack-x.pack":  true,
		"objects/.tmp_deadbeef_1":            true,
		"objects/ab/tmp_obj_xyz":             true,
		"lockstep/heads/.tmp_base_1":         true,
		"objects/pack/pack-1234.keep":        false,
		"objects/pack/tmp_pack_young":        false, // in flight
		"objects/info/tmp_pack_not_scanned":  false,
		"refs/namespaces/x/refs/heads/tmp_x": false, // a branch, not a temp file
	}
	for p := range files {
		full := filepath.Join(n.Dir(), p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, make([]byte, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		if p != "objects/pack/tmp_pack_young" {
			os.Chtimes(full, old, old)
		}
	}
	st := RemoveStaleTemps(n.Dir(), 10*time.Minute, now)
	if st.Files != 6 || st.Bytes != 600 {
		t.Fatalf("sweep = %+v, want 6 files, 600 bytes", st)
	}
	for p, removed := range files {
		_, err := os.Stat(filepath.Join(n.Dir(), p))
		if gone := os.IsNotExist(err); gone != removed {
			t.Errorf("%s: removed=%v, want %v", p, gone, removed)
		}
	}
}

// mountTmpfs mounts a tmpfs of size at dir, or skips the test when this
// process may not mount.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root or CAP_SYS_ADMIN): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// TestFullDiskIsUnavailable: a write that hits ENOSPC is unavailable (503
// with Retry-After), not internal, and leaves no temp file behind.
func TestFullDiskIsUnavailable(t *testing.T) {
	dir := mountTmpfs(t, "2m")
	n, err := Open(filepath.Join(dir, "net.git"), Options{Fsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	big := make([]byte, 3<<20)
	rand.Read(big)
	obj := n.Objects().NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, _ := obj.Writer()
	w.Write(big)
	w.Close()
	_, err = n.WriteObjects([]plumbing.EncodedObject{obj})
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("WriteObjects on a full disk = %v (code %s), want unavailable", err, lockstep.ErrorCode(err))
	}
	if st := RemoveStaleTemps(n.Dir(), -time.Hour, time.Now()); st.Files != 0 {
		t.Fatalf("a failed write left %d temp files", st.Files)
	}
}
