package merge

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// TestRenameScoreMatchesGit: for pairs of files (one deleted, one added in
// a commit) git diff -M pairs them exactly when our similarity estimate
// reaches 50%, and reports the same similarity percentage.
func TestRenameScoreMatchesGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := tempDir(t)
	r := rand.New(rand.NewSource(3))
	g := &scenarioGen{r: r, text: &textGen{r: rand.New(rand.NewSource(4)), vocab: 6}}
	im := &importer{blobs: map[string]int{}}
	type pair struct {
		src, dst []byte
		base     int
		next     int
	}
	n := 300
	pairs := make([]pair, n)
	for i := range pairs {
		var lines []string
		for k := 0; k < 5+r.Intn(40); k++ {
			lines = append(lines, g.text.line())
		}
		st := textStyle{crlf: r.Intn(5) == 0, noEOL: r.Intn(6) == 0}
		src := st.join(lines)
		if r.Intn(15) == 0 {
			src = append([]byte("bin\x00"), src...)
		}
		dst := src
		for k := r.Intn(6); k >= 0; k-- {
			dst = g.editText(dst)
		}
		if r.Intn(4) == 0 { // long lines: 64-byte chunks
			dst = bytes.ReplaceAll(dst, []byte("line"), []byte(strings.Repeat("long", 20)))
		}
		pairs[i] = pair{src: src, dst: dst}
		pairs[i].base = im.commit(fmt.Sprintf("refs/heads/p%d", i), 0, genTree{"old/x.txt": {mode: "100644", data: src}}, 1700000000+i)
		pairs[i].next = im.commit(fmt.Sprintf("refs/heads/p%d", i), pairs[i].base, genTree{"new/y.txt": {mode: "100644", data: dst}}, 1700000001+i)
	}
	marks := runImport(t, dir, im.buf.Bytes())
	var in bytes.Buffer
	for _, p := range pairs {
		fmt.Fprintf(&in, "%s\n", marks[p.next])
	}
	gitScore := map[string]int{} // commit -> similarity %, -1 when not paired
	var cur string
	for _, l := range strings.Split(string(gitRun(t, dir, in.Bytes(), "diff-tree", "--stdin", "-r", "-M", "--name-status")), "\n") {
		switch {
		case len(l) == 40:
			cur = l
			gitScore[cur] = -1
		case strings.HasPrefix(l, "R"):
			s, _ := strconv.Atoi(strings.Fields(l)[0][1:])
			gitScore[cur] = s
		}
	}
	st := filesystem.NewStorage(osfs.New(dir), cache.NewObjectLRUDefault())
	det := &renameDetector{m: &merger{ctx: context.Background(), s: st}, sizes: map[plumbing.Hash]int64{}, spans: map[plumbing.Hash]*spanCount{}}
	paired := 0
	for i, p := range pairs {
		src := entry{Mode: modeRegular, Hash: plumbing.ComputeHash(plumbing.BlobObject, p.src)}
		dst := entry{Mode: modeRegular, Hash: plumbing.ComputeHash(plumbing.BlobObject, p.dst)}
		score, err := det.similarity(&src, &dst, defaultRenameScore)
		if err != nil {
			t.Fatal(err)
		}
		want := gitScore[marks[p.next].String()]
		got := -1
		if src.Hash == dst.Hash {
			got = 100
		} else if score >= defaultRenameScore {
			got = int(float64(score) * 100 / maxScore)
		}
		if got != want {
			t.Errorf("pair %d: similarity %d%% (raw %d), git says %d%% (-1: not a rename); crlf %v binary %v sizes %d %d",
				i, got, score, want, bytes.Contains(p.src, []byte("\r\n")), isBinary(p.src) || isBinary(p.dst), len(p.src), len(p.dst))
		}
		if want >= 0 {
			paired++
		}
	}
	t.Logf("%d pairs, %d of them renames for git, every score equal", n, paired)
	if paired == 0 || paired == n {
		t.Errorf("pairs should fall on both sides of 50%%: %d of %d paired", paired, n)
	}
}
