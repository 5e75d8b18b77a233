package gitstore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// TestCommitLinksMatchGoGit: whenever checkCommitLinks accepts a commit
// (fsck's rules), the tree and parents it returns are those
// object.Commit.Decode reads, which every later reader of the commit
// (ancestry walks, merges) goes by; validateObjects checks those exist.
func TestCommitLinksMatchGoGit(t *testing.T) {
	const (
		tr = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
		p1 = "abcdefabcdefabcdefabcdefabcdefabcdef1111"
		p2 = "2222222222222222222222222222222222222222"
		p3 = "3333333333333333333333333333333333333333"
	)
	id := "A U Thor <a@example.com> 1700000000 +0000\n"
	bodies := []string{
		"tree " + tr + "\nauthor " + id + "committer " + id + "\nroot\n",
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id + "\nmsg\n",
		"tree " + tr + "\nparent " + p1 + "\nparent " + p2 + "\nparent " + p3 + "\nauthor " + id + "committer " + id + "\noctopus\n",
		// Out of place: a later parent or tree header is not a link (git and go-git).
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id + "parent " + p2 + "\ntree " + p3 + "\n\nmsg\n",
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id + "gpgsig -----BEGIN PGP SIGNATURE-----\n parent " + p2 + "\n -----END PGP SIGNATURE-----\n\nsigned\n",
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id + "mergetag object " + p2 + "\n type commit\n tag v1\n\nmerge\n",
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id + "encoding ISO-8859-1\n\nparent " + p3 + "\n",
		"tree " + tr + "\nparent " + p1 + "\nauthor " + id + "committer " + id, // no message, no blank line
		// Refused by fsck (no links are trusted then).
		"tree " + strings.ToUpper(tr) + "\nauthor " + id + "committer " + id + "\n",
		"tree " + tr + "\nparent " + strings.ToUpper(p1) + "\nauthor " + id + "committer " + id + "\n",
		"tree " + tr + "\nparent " + p1[:39] + "\nauthor " + id + "committer " + id + "\n",
		"parent " + p1 + "\ntree " + tr + "\nauthor " + id + "committer " + id + "\n",
		"tree " + tr + "\r\nauthor " + id + "committer " + id + "\n",
		"tree " + tr + "\nauthor " + id + "\n",
	}
	accepted := 0
	for i, body := range bodies {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			tree, parents, err := checkCommitLinks([]byte(body), nil)
			if wantErr := checkCommitObject([]byte(body)); (err == nil) != (wantErr == nil) {
				t.Fatalf("checkCommitLinks: %v, checkCommitObject: %v", err, wantErr)
			}
			if err != nil {
				return
			}
			accepted++
			obj := &plumbing.MemoryObject{}
			obj.SetType(plumbing.CommitObject)
			obj.Write([]byte(body))
			var c object.Commit
			if err := c.Decode(obj); err != nil {
				t.Fatalf("fsck accepts what go-git cannot decode: %v", err)
			}
			if tree != c.TreeHash || !slices.Equal(parents, c.ParentHashes) {
				t.Fatalf("links %s %v, go-git %s %v", tree, parents, c.TreeHash, c.ParentHashes)
			}
		})
	}
	if accepted != 8 {
		t.Fatalf("%d bodies accepted, want 8", accepted)
	}
}

// TestValidateCommitsAllocs counts the allocations of validateObjects
// over a received pack's commits: their headers are parsed once, in
// place (checkCommitLinks), not copied (rawObject) and decoded again by
// Commit.Decode (a bufio.Reader, a line, names, emails and the message
// each: a dozen allocations per commit, and most of the receive's
// garbage on a full-history push).
func TestValidateCommitsAllocs(t *testing.T) {
	n := MustOpen(t)
	const commits = 200
	emptyTree := plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904")
	tree := &quarantinedObject{h: emptyTree, t: plumbing.TreeObject, data: []byte{}}
	objs := map[plumbing.Hash]plumbing.EncodedObject{emptyTree: tree}
	order := []plumbing.EncodedObject{tree}
	prev := ""
	for i := 0; i < commits; i++ {
		body := "tree " + emptyTree.String() + "\n"
		if prev != "" {
			body += "parent " + prev + "\n"
		}
		body += fmt.Sprintf("author A U Thor <a@example.com> %d +0000\ncommitter C O Mitter <c@example.com> %d +0000\n\ncommit %d\n\nwith a body\n", 1700000000+i, 1700000000+i, i)
		h := plumbing.ComputeHash(plumbing.CommitObject, []byte(body))
		o := &quarantinedObject{h: h, t: plumbing.CommitObject, size: int64(len(body)), data: []byte(body)}
		objs[h], order = o, append(order, o)
		prev = h.String()
	}
	validate := func() {
		ov := &overlay{n: n, objs: objs, order: order}
		if err := n.validateObjects(ov); err != nil {
			t.Fatal(err)
		}
	}
	validate()
	allocs := testing.AllocsPerRun(5, validate)
	// Constant: the overlay, the maps and slices of validateObjects, the
	// tree's ascent. Before: ~16 per commit.
	if allocs > commits/4 {
		t.Fatalf("validateObjects: %.0f allocations for %d commits, want < %d", allocs, commits, commits/4)
	}
	t.Logf("%.0f allocations for %d commits", allocs, commits)
}

// TestReceivePackAllocsPerObject counts the allocations of receiving a
// pack of commits (one tree): per object, the listing and the
// cat-file reads parse their lines in place and small contents share
// blocks, and validation decodes each commit once without copies. Main
// before this: ~45 per commit (strings per line and field, a buffer per
// content, Commit.Decode's); after, under 5.
func TestReceivePackAllocsPerObject(t *testing.T) {
	const commits = 1000
	gd := filepath.Join(t.TempDir(), "client.git")
	git(t, "", nil, "init", "-q", "--bare", gd)
	var fi strings.Builder
	for i := 0; i < commits; i++ {
		msg := fmt.Sprintf("commit %d\n", i)
		fmt.Fprintf(&fi, "commit refs/heads/main\ncommitter C O Mitter <c@example.com> %d +0000\ndata %d\n%s\n", 1700000000+i, len(msg), msg)
	}
	gitIn(t, gd, fi.String(), "--git-dir="+gd, "fast-import", "--quiet")
	pack := packObjects(t, gd, "main\n", "--revs")
	var nets []*Network
	for range 3 {
		nets = append(nets, MustOpen(t))
	}
	i := 0
	allocs := testing.AllocsPerRun(1, func() { // AllocsPerRun runs it once more first
		st, err := nets[i].ReceivePack(bytes.NewReader(pack), Limits{})
		if err != nil || st.Objects != commits+1 {
			t.Fatalf("receive: %+v %v", st, err)
		}
		i++
	})
	t.Logf("%.0f allocations for %d objects", allocs, commits+1)
	if allocs > 6*commits {
		t.Fatalf("receive: %.0f allocations for %d objects, want < %d", allocs, commits+1, 6*commits)
	}
}
