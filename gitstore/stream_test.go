package gitstore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/lockstep-hq/lockstep"
)

// streamPack is a small real pack with deltas (two versions of a file).
func streamPack(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	clientCommit(t, dir, map[string]string{"a": strings.Repeat("0123456789\n", 300), "b/c": "c\n"})
	c2 := clientCommit(t, dir, map[string]string{"a": strings.Repeat("0123456789\n", 300) + "more\n"})
	return packObjects(t, filepath.Join(dir, ".git"), c2+"\n", "--revs", "--delta-base-offset")
}

// recorder records what the gate passes on to git index-pack.
type recorder struct{ bytes.Buffer }

// The pack is streamed, not spooled, so prescan's read-ahead must not
// reach git: when prescan refuses the last object, git has been given
// no byte past the objects prescan consumed, never the trailer, even
// when the client sent bytes after it (a naive tee of what prescan reads
// would pass the trailer on with its read-ahead, and git could resolve
// deltas before the limits are checked). Accepted, every byte is passed
// on, in order.
func TestPrescanGateWithholdsTrailer(t *testing.T) {
	pack := streamPack(t)
	junk := bytes.Repeat([]byte("junk"), 64)
	sent := append(append([]byte{}, pack...), junk...)

	// The smallest total-inflated limit the pack passes: one less
	// refuses it at its last object, after all of it was inflated.
	lo, hi := int64(1), int64(1<<30)
	for lo < hi {
		mid := (lo + hi) / 2
		if prescan(bytes.NewReader(pack), Limits{MaxUploadBytes: mid}.WithDefaults()) == nil {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	var rec recorder
	err := prescanGated(bytes.NewReader(sent), Limits{MaxUploadBytes: lo - 1}.WithDefaults(), &gate{w: &rec}, nil)
	if lockstep.ErrorCode(err) != lockstep.ETOOLARGE || !strings.Contains(lockstep.ErrorMessage(err), "inflates to more than") {
		t.Fatalf("limit %d: %v", lo-1, err)
	}
	if rec.Len() > len(pack)-20 || !bytes.HasPrefix(pack, rec.Bytes()) {
		t.Fatalf("refused pack: git was given %d bytes of %d (objects end at %d)", rec.Len(), len(sent), len(pack)-20)
	}

	for _, r := range []io.Reader{bytes.NewReader(sent), iotest.OneByteReader(bytes.NewReader(sent)), iotest.HalfReader(bytes.NewReader(sent))} {
		rec.Reset()
		if err := prescanGated(r, Limits{MaxUploadBytes: lo}.WithDefaults(), &gate{w: &rec}, nil); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Bytes(), sent) {
			t.Fatalf("accepted pack: git was given %d bytes, not the %d sent", rec.Len(), len(sent))
		}
	}
}

// ReceivePack reads the pack as it arrives and never spools it: while
// the client has sent all but the trailer, nothing under objects/ holds
// the pack but git index-pack's own quarantine; once the trailer
// arrives, the push completes. Before streaming, the upload was copied
// whole into objects/pack/tmp_pack_recv_* first.
func TestReceivePackStreams(t *testing.T) {
	n := MustOpen(t)
	pack := streamPack(t)
	pr, pw := io.Pipe()
	type result struct {
		st  WriteStats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := n.ReceivePack(pr, Limits{})
		done <- result{st, err}
	}()
	// io.Pipe's Write returns once the reader has read every byte.
	if _, err := pw.Write(pack[:len(pack)-20]); err != nil {
		t.Fatal(err)
	}
	for _, f := range storeFiles(t, n) {
		rel, _ := filepath.Rel(filepath.Join(n.Dir(), "objects"), f)
		if !strings.HasPrefix(rel, quarantinePrefix) {
			t.Errorf("while receiving: %s outside a quarantine", rel)
		}
	}
	pw.Write(pack[len(pack)-20:])
	pw.Close()
	r := <-done
	if r.err != nil || r.st.Objects != 8 {
		t.Fatalf("ReceivePack = %+v, %v; want 8 objects", r.st, r.err)
	}
}

// An upload that breaks off mid-pack is reported as the reader's error
// (a *lockstep.Error as it is: the HTTP layer's upload limit), git
// index-pack is stopped, and nothing is stored.
func TestReceivePackUploadBreaksOff(t *testing.T) {
	n := MustOpen(t)
	pack := streamPack(t)
	cut := len(pack) / 2
	for _, tc := range []struct {
		err  error
		code string
		msg  string
	}{
		{lockstep.Errorf(lockstep.ETOOLARGE, "upload over the limit"), lockstep.ETOOLARGE, "upload over the limit"},
		{errors.New("connection reset"), "", "connection reset"},
	} {
		r := io.MultiReader(bytes.NewReader(pack[:cut]), iotest.ErrReader(tc.err))
		_, err := n.ReceivePack(r, Limits{})
		if err == nil || lockstep.ErrorCode(err) != tc.code && tc.code != "" || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("broken off with %v: %v", tc.err, err)
		}
		if tc.code == "" && lockstep.ErrorCode(err) == lockstep.EINVALID {
			t.Errorf("broken off with %v: reported as a bad pack: %v", tc.err, err)
		}
	}
	if files := storeFiles(t, n); len(files) != 0 {
		t.Fatalf("store changed: %v", files)
	}
	ents, _ := os.ReadDir(filepath.Join(n.Dir(), "objects"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), quarantinePrefix) {
			t.Errorf("quarantine %s left behind", e.Name())
		}
	}
}
