package gitstore

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/lockstep-hq/lockstep"
)

// TestReceivePackForPresence: ReceivePackFor refuses a thin pack whose
// delta base is stored but not present for the writer, with the error
// of a base stored nowhere; objects of a pack that were stored before
// are validated and counted as sent ones (the answer does not tell that
// they were stored).
func TestReceivePackForPresence(t *testing.T) {
	n := MustOpen(t)
	dir := t.TempDir()
	gitRun(t, dir, nil, "", "init", "-q")
	body := strings.Repeat("a line of the file that a delta can reuse\n", 200)
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, nil, "", "add", "-A")
	gitRun(t, dir, nil, "", "commit", "-q", "-m", "base")
	base := strings.TrimSpace(gitRun(t, dir, nil, "", "rev-parse", "HEAD"))
	blob := plumbing.NewHash(strings.TrimSpace(gitRun(t, dir, nil, "", "rev-parse", "HEAD:big.txt")))
	if err := os.WriteFile(filepath.Join(dir, "big.txt"), []byte(body+"one more\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, dir, nil, "", "commit", "-q", "-am", "change")
	head := strings.TrimSpace(gitRun(t, dir, nil, "", "rev-parse", "HEAD"))
	pack := func(revs string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", append([]string{"pack-objects", "--stdout", "-q", "--revs"}, args...)...)
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(revs)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	full, thin := pack(base+"\n"), pack(head+"\n^"+base+"\n", "--thin")

	// The full pack: stored; again, for a writer that may name nothing
	// stored, it is complete, accepted and counted whole.
	st, err := n.ReceivePack(bytes.NewReader(full), Limits{})
	if err != nil || st.Objects != 3 {
		t.Fatalf("ReceivePack(full) = %+v, %v", st, err)
	}
	none := func(plumbing.Hash) bool { return false }
	var sent []plumbing.Hash
	st, err = n.ReceivePackFor(bytes.NewReader(full), Limits{}, ReceiveOptions{Present: none, Sent: func(h plumbing.Hash, _ plumbing.ObjectType) { sent = append(sent, h) }})
	if err != nil || st.Objects != 3 || len(sent) != 3 {
		t.Fatalf("ReceivePackFor(full, nothing present) = %+v, %v, sent %v; want 3 objects", st, err, sent)
	}
	if st, err := n.ReceivePack(bytes.NewReader(full), Limits{}); err != nil || st.Objects != 0 {
		t.Fatalf("ReceivePack(full) again = %+v, %v; want 0 objects", st, err)
	}

	// The thin pack: its delta base is the stored blob.
	notBlob := func(h plumbing.Hash) bool { return h != blob }
	_, err = n.ReceivePackFor(bytes.NewReader(thin), Limits{}, ReceiveOptions{Present: notBlob})
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "neither in the pack nor stored") {
		t.Fatalf("ReceivePackFor(thin, base not present) = %v, want invalid_argument as for a base stored nowhere", err)
	}
	if n.Has(plumbing.NewHash(head)) {
		t.Fatal("the refused pack was stored")
	}
	if _, err := n.ReceivePackFor(bytes.NewReader(thin), Limits{}, ReceiveOptions{Present: func(plumbing.Hash) bool { return true }}); err != nil {
		t.Fatalf("ReceivePackFor(thin, all present): %v", err)
	}
	if !n.Has(plumbing.NewHash(head)) {
		t.Fatal("the accepted pack was not stored")
	}
}
