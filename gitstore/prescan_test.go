package gitstore

import (
	"bytes"
	"io"
	"math/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/lockstep-hq/lockstep"
)

// prescanScanner is prescan as it was written on go-git's
// packfile.Scanner, kept to check that prescan accepts and refuses the
// same packs, with the same errors.
func prescanScanner(data io.Reader, lim Limits) error {
	s := packfile.NewScanner(data)
	_, count, err := s.Header()
	if err != nil {
		return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile: %v", err)
	}
	var total int64
	var delta bytes.Buffer
	for i := uint32(0); i < count; i++ {
		oh, err := s.NextObjectHeader()
		if err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile (object %d): %v", i, err)
		}
		size := oh.Length
		if oh.Length > lim.MaxFileBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack object %d is %d bytes, over the %d-byte limit", i, oh.Length, lim.MaxFileBytes)
		}
		if oh.Type.IsDelta() {
			delta.Reset()
			if _, _, err := s.NextObject(&delta); err != nil {
				return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile (object %d): %v", i, err)
			}
			d := delta.Bytes()
			_, d = deltaVarint(d)
			size, _ = deltaVarint(d)
		} else if _, _, err := s.NextObject(io.Discard); err != nil {
			return lockstep.Errorf(lockstep.EINVALID, "corrupt packfile (object %d): %v", i, err)
		}
		if size > lim.MaxFileBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack object %d inflates to %d bytes, over the %d-byte limit", i, size, lim.MaxFileBytes)
		}
		if total += size; total > lim.MaxUploadBytes {
			return lockstep.Errorf(lockstep.ETOOLARGE, "pack inflates to more than %d bytes", lim.MaxUploadBytes)
		}
	}
	return nil
}

// TestPrescanMatchesScanner runs prescan and prescanScanner on a real
// pack (with deltas) and on thousands of corruptions of it (bytes
// flipped, truncated), under several limits: same result every time.
func TestPrescanMatchesScanner(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found")
	}
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	var c string
	for i := 0; i < 3; i++ {
		c = clientCommit(t, dir, map[string]string{"a/b.txt": strings.Repeat("text line\n", 50+i), "l": "->a/b.txt", "c": strings.Repeat("x", 5000+i)})
	}
	pack := packObjects(t, dir+"/.git", c+"\n", "--revs")
	limits := []Limits{{}, {MaxFileBytes: 4000}, {MaxUploadBytes: 6000}}
	for i := range limits {
		limits[i] = limits[i].WithDefaults()
	}
	dictCases := 0
	check := func(data []byte) {
		body := data
		if len(body) >= 20 {
			body = body[:len(body)-20] // prescan reads the pack without its trailer
		}
		for _, lim := range limits {
			got, want := prescan(bytes.NewReader(body), lim), prescanScanner(bytes.NewReader(body), lim)
			if (got == nil) != (want == nil) {
				t.Fatalf("pack %x:\nprescan: %v\nScanner: %v", data, got, want)
			}
			if got != nil && got.Error() != want.Error() {
				// The Scanner inflates with a 16 KiB preset dictionary (a
				// pooled buffer, zeros when new), so a corrupt stream that
				// copies from before its start inflates there; prescan, like
				// git's zlib, calls it corrupt. Both refuse the pack.
				if !strings.Contains(got.Error(), "flate: corrupt input") || lockstep.ErrorCode(got) != lockstep.EINVALID {
					t.Fatalf("pack %x:\nprescan: %v\nScanner: %v", data, got, want)
				}
				dictCases++
			}
		}
	}
	check(pack)
	check(nil)
	check([]byte("PACK\x00\x00\x00\x03\x00\x00\x00\x01" + strings.Repeat("\x00", 20)))
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		p := bytes.Clone(pack)
		switch i % 3 {
		case 0:
			p[rng.Intn(len(p))] ^= byte(1 + rng.Intn(255))
		case 1:
			p = p[:rng.Intn(len(p))]
		default:
			for k := 0; k < 3; k++ {
				p[12+rng.Intn(len(p)-12)] = byte(rng.Intn(256))
			}
		}
		check(p)
	}
	t.Logf("%d corruptions refused by both with different reasons (preset dictionary)", dictCases)
}
