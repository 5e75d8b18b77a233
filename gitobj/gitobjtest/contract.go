// Package gitobjtest is the contract every gitobj.Store passes (go-git's
// storage/test, bucket/buckettest): one suite, run on each
// implementation (gitstore.Network on a temp directory; replica.Network on a
// file bucket with SQLite, and on the real versitygw with Postgres).
// It checks what the services rely on: reads of what was written, the
// error codes of the contract, the pack list, and git's view of the ref
// mirror (read with the git CLI from Dir).
package gitobjtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/gitobj"
)

// Run runs the contract on the stores open returns; each call must give
// an empty network (open is called once per subtest).
func Run(t *testing.T, open func(t *testing.T) gitobj.Store) {
	t.Run("WriteAndRead", func(t *testing.T) { testWriteAndRead(t, open(t)) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, open(t)) })
	t.Run("IngestTar", func(t *testing.T) { testIngestTar(t, open(t)) })
	t.Run("ReceivePack", func(t *testing.T) { testReceivePack(t, open(t)) })
	t.Run("Compact", func(t *testing.T) { testCompact(t, open(t)) })
	t.Run("Mirror", func(t *testing.T) { testMirror(t, open(t)) })
}

var sig = gitobj.Signature{Name: "t", Email: "t@example.com", When: time.Unix(1700000000, 0).UTC()}

// commit writes the edits on parent's tree (ZeroHash: none) and a commit.
func commit(t *testing.T, n gitobj.Store, parent gitobj.Hash, msg string, edits ...gitobj.TreeEdit) gitobj.Hash {
	t.Helper()
	base := gitobj.ZeroHash
	var parents []gitobj.Hash
	if !parent.IsZero() {
		ci, err := n.Commit(parent)
		if err != nil {
			t.Fatal(err)
		}
		base, parents = ci.Tree, []gitobj.Hash{parent}
	}
	tree, objs, err := n.EditTree(base, edits, gitobj.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WriteObjects(objs); err != nil {
		t.Fatal(err)
	}
	h, _, err := n.WriteCommit(gitobj.CommitSpec{Tree: tree, Parents: parents, Author: sig, Committer: sig, Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func file(path, content string) gitobj.TreeEdit {
	return gitobj.TreeEdit{Path: path, Content: []byte(content)}
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if err == nil || lockstep.ErrorCode(err) != code {
		t.Fatalf("%s: got %v (code %q), want %s", what, err, lockstep.ErrorCode(err), code)
	}
}

func testWriteAndRead(t *testing.T, n gitobj.Store) {
	ctx := context.Background()
	c1 := commit(t, n, gitobj.ZeroHash, "one\n", file("a.txt", "a\n"), file("dir/b.txt", "b\n"))
	c2 := commit(t, n, c1, "two\n", file("a.txt", "a2\n"), gitobj.TreeEdit{Path: "dir/b.txt", Delete: true}, file("c.txt", "c\n"))
	if !n.Has(c1) || !n.Has(c2) {
		t.Fatal("Has: a written commit is missing")
	}
	absent := gitobj.ComputeHash(gitobj.BlobObject, []byte("never written\n"))
	if got := n.Missing([]gitobj.Hash{c1, absent}); len(got) != 1 || got[0] != absent {
		t.Fatalf("Missing = %v, want [%s]", got, absent)
	}
	ci, err := n.Commit(c2)
	if err != nil {
		t.Fatal(err)
	}
	if ci.Hash != c2 || ci.Message != "two\n" || len(ci.Parents) != 1 || ci.Parents[0] != c1 || ci.Author.Email != sig.Email {
		t.Fatalf("Commit(c2) = %+v", ci)
	}
	if _, err := n.Objects().EncodedObject(gitobj.CommitObject, c2); err != nil {
		t.Fatalf("Objects().EncodedObject(c2): %v", err)
	}
	log, err := n.Log(c2, 10, gitobj.ZeroHash)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].Hash != c2 || log[1].Hash != c1 {
		t.Fatalf("Log(c2) = %v, want c2, c1", log)
	}
	if ahead, behind, err := n.AheadBehind(c2, c1); err != nil || ahead != 1 || behind != 0 {
		t.Fatalf("AheadBehind(c2, c1) = %d, %d, %v; want 1, 0", ahead, behind, err)
	}
	entries, err := n.TreeEntries(c1, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+":"+e.Type)
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "a.txt:blob,dir:tree" {
		t.Fatalf("TreeEntries(c1) = %v", names)
	}
	info, rc, err := n.Blob(c2, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "a2\n" || info.Size != 3 || info.Mode != "100644" {
		t.Fatalf("Blob(c2, a.txt) = %+v %q %v", info, b, err)
	}
	changes, err := n.Compare(c1, c2, gitobj.CompareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.Path+":"+c.Status)
	}
	if strings.Join(got, ",") != "a.txt:modified,c.txt:added,dir/b.txt:deleted" {
		t.Fatalf("Compare(c1, c2) = %v", got)
	}
	if exp := n.ExpandPrefix(c2.String()[:gitobj.MinAbbrev+4], 2); len(exp) != 1 || exp[0] != c2 {
		t.Fatalf("ExpandPrefix(%s) = %v", c2.String()[:8], exp)
	}
	var buf bytes.Buffer
	if err := n.Archive(ctx, &buf, c2); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&buf)
	var files []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files = append(files, h.Name)
		}
	}
	sort.Strings(files)
	if strings.Join(files, ",") != "a.txt,c.txt" {
		t.Fatalf("Archive(c2) files = %v", files)
	}
	ci2, _ := n.Commit(c2)
	if err := n.CheckRootTree(ci2.Tree); err != nil {
		t.Fatalf("CheckRootTree: %v", err)
	}
	if err := n.CheckClosure(ci2.Tree, gitobj.ZeroHash); err != nil {
		t.Fatalf("CheckClosure of a complete tree: %v", err)
	}
}

func testErrors(t *testing.T, n gitobj.Store) {
	c1 := commit(t, n, gitobj.ZeroHash, "one\n", file("a.txt", "a\n"))
	absent := gitobj.ComputeHash(gitobj.CommitObject, []byte("tree 0000\n"))
	_, err := n.Commit(absent)
	wantCode(t, "Commit of a missing object", err, lockstep.ENOTFOUND)
	_, err = n.Log(absent, 5, gitobj.ZeroHash)
	wantCode(t, "Log of a missing commit", err, lockstep.ENOTFOUND)
	_, err = n.TreeEntries(c1, "nope")
	wantCode(t, "TreeEntries of a missing path", err, lockstep.ENOTFOUND)
	_, _, err = n.Blob(c1, "nope.txt")
	wantCode(t, "Blob of a missing path", err, lockstep.ENOTFOUND)
	_, _, err = n.WriteCommit(gitobj.CommitSpec{Tree: absent, Author: sig, Committer: sig, Message: "x\n"})
	wantCode(t, "WriteCommit on a missing tree", err, lockstep.ENOTFOUND)
	if _, err := n.Objects().EncodedObject(gitobj.AnyObjectType, absent); !errors.Is(err, gitobj.ErrObjectNotFound) {
		t.Fatalf("Objects().EncodedObject of a missing object: %v, want ErrObjectNotFound", err)
	}
	_, _, err = n.EditTree(gitobj.ZeroHash, []gitobj.TreeEdit{file("../x", "x")}, gitobj.Limits{})
	wantCode(t, "EditTree of a path climbing out", err, lockstep.EINVALID)
	// A tree naming a blob that was never written: refused, nothing
	// written (objects before refs holds for every object, not only the
	// ones a ref names).
	tree, objs, err := n.EditTree(gitobj.ZeroHash, []gitobj.TreeEdit{file("lost.txt", "lost\n")}, gitobj.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var trees []gitobj.EncodedObject
	for _, o := range objs {
		if o.Type() == gitobj.TreeObject {
			trees = append(trees, o)
		}
	}
	_, err = n.WriteObjects(trees)
	wantCode(t, "WriteObjects of a tree lacking its blob", err, lockstep.EUNAVAILABLE)
	if n.Has(tree) {
		t.Fatal("WriteObjects refused a tree lacking its blob but stored it")
	}
}

func tarOf(t *testing.T, files map[string]string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, files[name])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func testIngestTar(t *testing.T, n gitobj.Store) {
	ctx := context.Background()
	in, err := n.IngestTar(ctx, tarOf(t, map[string]string{"x/y.txt": "y\n", "z.txt": "z\n"}), gitobj.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Files != 2 {
		t.Errorf("Ingest.Files = %d, want 2", in.Files)
	}
	if _, err := n.WriteObjects(in.Objects); err != nil {
		t.Fatal(err)
	}
	in.Close()
	_, rc, err := n.Blob(in.Tree, "x/y.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "y\n" {
		t.Fatalf("Blob(x/y.txt) of the ingested tree = %q", b)
	}
	_, err = n.IngestTar(ctx, tarOf(t, map[string]string{"big.txt": strings.Repeat("x", 100)}), gitobj.Limits{MaxFileBytes: 10})
	wantCode(t, "IngestTar of a file over MaxFileBytes", err, lockstep.ETOOLARGE)
	_, err = n.IngestTar(ctx, strings.NewReader("not a tar at all, not even close"), gitobj.Limits{})
	wantCode(t, "IngestTar of garbage", err, lockstep.EINVALID)
}

// gitCLI runs git in dir and returns its trimmed output.
func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t",
		"GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("git %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}

func testReceivePack(t *testing.T, n gitobj.Store) {
	dir := t.TempDir()
	gitCLI(t, dir, "init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("from git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitCLI(t, dir, "add", "f.txt")
	gitCLI(t, dir, "commit", "-q", "-m", "x")
	head := gitCLI(t, dir, "rev-parse", "HEAD")
	cmd := exec.Command("git", "pack-objects", "--stdout", "--revs")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(head + "\n")
	pack, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	st, err := n.ReceivePack(bytes.NewReader(pack), gitobj.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != 3 {
		t.Errorf("ReceivePack stats = %+v, want 3 objects", st)
	}
	ci, err := n.Commit(gitobj.NewHash(head))
	if err != nil || ci.Message != "x\n" {
		t.Fatalf("Commit of the received commit: %+v %v", ci, err)
	}
	_, err = n.ReceivePack(bytes.NewReader([]byte("PACK but not really")), gitobj.Limits{})
	wantCode(t, "ReceivePack of a broken pack", err, lockstep.EINVALID)

	// ReceivePackFor: a commit on head whose tree names the stored blob
	// without sending it is refused, as for an object stored nowhere,
	// when the blob is not present for the writer; the same pack with
	// the blob is accepted and counted whole.
	blob := gitCLI(t, dir, "rev-parse", "HEAD:f.txt")
	tree := gitCLI(t, dir, "rev-parse", "HEAD^{tree}")
	next := gitCLI(t, dir, "commit-tree", "-p", head, "-m", "y", tree)
	packOf := func(oids ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", "pack-objects", "--stdout")
		cmd.Dir = dir
		cmd.Stdin = strings.NewReader(strings.Join(oids, "\n") + "\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	notBlob := func(h gitobj.Hash) bool { return h.String() != blob }
	_, err = n.ReceivePackFor(bytes.NewReader(packOf(next, tree)), gitobj.Limits{}, gitobj.ReceiveOptions{Present: notBlob})
	wantCode(t, "ReceivePackFor naming a stored blob that is not present", err, lockstep.EINVALID)
	if n.Has(gitobj.NewHash(next)) {
		t.Fatal("ReceivePackFor stored a refused pack")
	}
	st, err = n.ReceivePackFor(bytes.NewReader(packOf(next, tree, blob)), gitobj.Limits{}, gitobj.ReceiveOptions{Present: notBlob})
	if err != nil || st.Objects != 3 || !n.Has(gitobj.NewHash(next)) {
		t.Fatalf("ReceivePackFor with the blob sent: %+v %v, want 3 objects stored", st, err)
	}
}

func testCompact(t *testing.T, n gitobj.Store) {
	var commits []gitobj.Hash
	prev := gitobj.ZeroHash
	for i := 0; i < 4; i++ {
		prev = commit(t, n, prev, "c\n", file("f.txt", strings.Repeat("x", i+1)))
		commits = append(commits, prev)
	}
	before := n.PackCount()
	if before < 1 {
		t.Fatalf("PackCount after four writes = %d", before)
	}
	if err := n.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if after := n.PackCount(); after > 1 || after > before {
		t.Fatalf("PackCount after Compact = %d (before %d), want at most 1", after, before)
	}
	for _, c := range commits {
		if _, err := n.Commit(c); err != nil {
			t.Fatalf("Commit %s after Compact: %v", c, err)
		}
	}
}

// refs lists repo's mirrored refs as git sees them ("name oid" lines).
func refs(t *testing.T, n gitobj.Store, repo string) string {
	t.Helper()
	prefix := "refs/namespaces/" + repo + "/"
	out := gitCLI(t, n.Dir(), "for-each-ref", "--format=%(refname) %(objectname)", prefix)
	return strings.ReplaceAll(out, prefix, "")
}

func testMirror(t *testing.T, n gitobj.Store) {
	c1 := commit(t, n, gitobj.ZeroHash, "one\n", file("a.txt", "a\n"))
	c2 := commit(t, n, c1, "two\n", file("a.txt", "b\n"))
	if err := n.MirrorRef("app", "refs/heads/main", c1); err != nil {
		t.Fatal(err)
	}
	if got, want := refs(t, n, "app"), "refs/heads/main "+c1.String(); got != want {
		t.Fatalf("after MirrorRef: %q, want %q", got, want)
	}
	wantCode(t, "MirrorRef of a bad name", n.MirrorRef("app", "refs/heads/a..b", c1), lockstep.EINVALID)
	err := n.SyncMirror("app", map[string]gitobj.Hash{"refs/heads/main": c2, "refs/heads/dev": c1, "refs/heads/bad..name": c1})
	var me *gitobj.MirrorError
	if !errors.As(err, &me) || len(me.Problems) != 1 || me.Problems[0].Ref != "refs/heads/bad..name" {
		t.Fatalf("SyncMirror with one bad ref: %v, want a *MirrorError naming it", err)
	}
	want := "refs/heads/dev " + c1.String() + "\nrefs/heads/main " + c2.String()
	if got := refs(t, n, "app"); got != want {
		t.Fatalf("after SyncMirror: %q, want %q", got, want)
	}
	if err := n.MirrorHEAD("app", "dev"); err != nil {
		t.Fatal(err)
	}
	if got := gitCLI(t, n.Dir(), "symbolic-ref", "refs/namespaces/app/HEAD"); got != "refs/namespaces/app/refs/heads/dev" {
		t.Fatalf("HEAD after MirrorHEAD(dev) = %q", got)
	}
	if err := n.MirrorRef("app", "refs/heads/dev", gitobj.ZeroHash); err != nil {
		t.Fatal(err)
	}
	if got, want := refs(t, n, "app"), "refs/heads/main "+c2.String(); got != want {
		t.Fatalf("after deleting dev: %q, want %q", got, want)
	}
	// MirrorRefs: main (packed) is deleted before main/x is written
	// although listed after it, dev comes back and HEAD with it, a bad
	// name is skipped and named.
	gitCLI(t, n.Dir(), "pack-refs", "--all")
	err = n.MirrorRefs("app", []gitobj.RefValue{
		{Ref: "refs/heads/main/x", OID: c1},
		{Ref: "refs/heads/bad..name", OID: c1},
		{Ref: "refs/heads/main", OID: gitobj.ZeroHash},
		{Ref: "refs/heads/dev", OID: c2},
	})
	if !errors.As(err, &me) || len(me.Problems) != 1 || me.Problems[0].Ref != "refs/heads/bad..name" {
		t.Fatalf("MirrorRefs with one bad ref: %v, want a *MirrorError naming it", err)
	}
	want = "HEAD " + c2.String() + "\nrefs/heads/dev " + c2.String() + "\nrefs/heads/main/x " + c1.String()
	if got := refs(t, n, "app"); got != want {
		t.Fatalf("after MirrorRefs: %q, want %q", got, want)
	}
	if got := gitCLI(t, n.Dir(), "symbolic-ref", "refs/namespaces/app/HEAD"); got != "refs/namespaces/app/refs/heads/dev" {
		t.Fatalf("HEAD after MirrorRefs created dev = %q", got)
	}
	if got := refs(t, n, "other"); got != "" {
		t.Fatalf("another repository's namespace holds %q", got)
	}
}
