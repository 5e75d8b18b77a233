package gitstore

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestListQuarantineMatchesCatFile: the list of a quarantined pack that
// loadQuarantine takes from prescan's table and the .idx (ids, types,
// sizes, in pack order) is the one `git cat-file --batch-all-objects
// --unordered --batch-check` gives, for packs of OFS deltas, of REF
// deltas within the pack, and thin packs whose stored bases index-pack
// appended (--fix-thin), on a real history when the corpus is there.
func TestListQuarantineMatchesCatFile(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, nil, "init", "-q")
	big := strings.Repeat("line of text that deltas well\n", 400)
	var commits []string
	for i := range 8 {
		files := map[string]string{"a/big.txt": big + strings.Repeat("more\n", i), fmt.Sprintf("d%d/f", i%3): big[:100*(i+1)], "README": fmt.Sprint("v", i, "\n")}
		if i == 2 {
			files["a/link"] = "->big.txt"
		}
		commits = append(commits, clientCommit(t, dir, files))
	}
	git(t, dir, nil, "tag", "-a", "-m", "t", "v1", commits[3])
	tag := strings.TrimSpace(git(t, dir, nil, "rev-parse", "v1"))
	gd := filepath.Join(dir, ".git")
	head, mid := commits[7], commits[4]

	type pack struct {
		name  string
		data  []byte
		first []byte // stored before (the thin pack's bases)
	}
	packs := []pack{
		{name: "ofs", data: packObjects(t, gd, head+"\n"+tag+"\n", "--revs", "--delta-base-offset")},
		{name: "ref", data: packObjects(t, gd, head+"\n"+tag+"\n", "--revs")},
		{name: "thin", data: packObjects(t, gd, head+"\n^"+mid+"\n", "--revs", "--thin"), first: packObjects(t, gd, mid+"\n", "--revs")},
		{name: "thin-ofs", data: packObjects(t, gd, head+"\n^"+mid+"\n", "--revs", "--thin", "--delta-base-offset"), first: packObjects(t, gd, mid+"\n", "--revs")},
	}
	src := filepath.Join(os.Getenv("LOCKSTEP_CORPUS"), "testify.bundle")
	if _, err := os.Stat(src); os.Getenv("LOCKSTEP_CORPUS") != "" && err == nil {
		cd := filepath.Join(t.TempDir(), "testify.git")
		if out, err := exec.Command("git", "clone", "-q", "--mirror", src, cd).CombinedOutput(); err != nil {
			t.Fatalf("clone: %v %s", err, out)
		}
		refs := git(t, cd, nil, "--git-dir="+cd, "for-each-ref", "--format=%(objectname)", "refs/heads", "refs/tags")
		packs = append(packs, pack{name: "testify", data: packObjects(t, cd, refs, "--revs", "--thin", "--delta-base-offset")})
	}
	for _, p := range packs {
		t.Run(p.name, func(t *testing.T) {
			n := MustOpen(t)
			if p.first != nil {
				if _, err := n.ReceivePack(bytes.NewReader(p.first), Limits{}); err != nil {
					t.Fatal(err)
				}
			}
			lim := Limits{}.WithDefaults()
			up := &uploadReader{r: bytes.NewReader(p.data), left: lim.MaxUploadBytes, limit: lim.MaxUploadBytes}
			q, err := n.indexReceived(up, up, lim)
			if err != nil {
				t.Fatal(err)
			}
			defer q.remove()
			idx, err := readIdx(q.path("idx"))
			if err != nil {
				t.Fatal(err)
			}
			listed, err := q.tab.listQuarantine(idx, q.path("pack"))
			if err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			for _, l := range listed {
				fmt.Fprintf(&got, "%s %s %d\n", l.h, l.t, l.size)
			}
			cmd := exec.Command("git", "cat-file", "--batch-all-objects", "--unordered", "--batch-check=%(objectname) %(objecttype) %(objectsize)")
			cmd.Dir, cmd.Env = n.dir, gitEnv("GIT_DIR="+n.dir, "GIT_OBJECT_DIRECTORY="+q.dir)
			want, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Fatalf("listed:\n%s\ncat-file:\n%s", got.String(), want)
			}
			if p.first != nil && len(listed) <= countObjects(t, p.data) {
				t.Fatalf("thin pack: %d objects listed, %d sent: no base appended", len(listed), countObjects(t, p.data))
			}
		})
	}
}

// countObjects is the object count of a pack's header.
func countObjects(t *testing.T, pack []byte) int {
	t.Helper()
	if len(pack) < 12 {
		t.Fatal("short pack")
	}
	return int(pack[8])<<24 | int(pack[9])<<16 | int(pack[10])<<8 | int(pack[11])
}
