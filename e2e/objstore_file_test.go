package e2e

import (
	"path/filepath"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestObjectStoreFileBucket: --object-store file:///dir (the file bucket,
// chosen by the URL's scheme) runs the object-storage mode without an S3
// server: two replicas on one database and one directory; what one
// pushes, the other clones complete, and the packs are files under
// DIR/networks/<network>/.
func TestObjectStoreFileBucket(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	w := &objWorld{
		dbURL: testenv.MustPostgresDB(t),
		// Inline packs off: every pack of these small writes goes to the
		// directory (the default keeps packs under 64 KiB in Postgres).
		env: []string{"LOCKSTEP_OBJECT_STORE=file://" + dir, "LOCKSTEP_SECRET_KEY_FILE=" + objSecretKeyFile(t), "LOCKSTEP_OBJECT_INLINE_MAX=0"},
	}
	w.add(t)
	w.add(t)
	r, admin := w.reps, w.adminKey
	r[0].CreateRepo(t, "files")
	c1 := r[0].push(t, admin, "files", zeroOID, map[string]string{"README": "in a directory\n"}).Commit
	c2 := r[1].push(t, admin, "files", c1, map[string]string{"README": "in a directory\n", "b.txt": "b\n"}).Commit
	cloneComplete(t, r[0], admin, "files", c2, c1, c2)
	cloneComplete(t, r[1], admin, "files", c2, c1, c2)
	packs, _ := filepath.Glob(filepath.Join(dir, "networks", "*", "pack-*.pack"))
	idxs, _ := filepath.Glob(filepath.Join(dir, "networks", "*", "pack-*.idx"))
	if len(packs) < 2 || len(idxs) != len(packs) {
		t.Errorf("the bucket directory holds %d packs and %d indexes, want one of each per write (at least 2)", len(packs), len(idxs))
	}
}
