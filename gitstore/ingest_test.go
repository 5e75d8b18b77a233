package gitstore

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/lockstep-hq/lockstep"
)

func TestIngestTarBadInput(t *testing.T) {
	lim := Limits{MaxUploadBytes: 64 << 10, MaxFileBytes: 1000, MaxFiles: 5}
	ok := tarEntry{Name: "ok.txt", Body: "ok\n"}
	good := makeTar(t, []tarEntry{ok})
	big := strings.Repeat("x", 900)
	tests := []struct {
		name string
		data []byte
		code string
		msg  string
	}{
		{"dotdot", makeTar(t, []tarEntry{{Name: "a/../../etc/passwd", Body: "x"}}), lockstep.EINVALID, `"a/../../etc/passwd"`},
		{"dotdot-only", makeTar(t, []tarEntry{{Name: "..", Type: tar.TypeDir}}), lockstep.EINVALID, "path traversal"},
		{"absolute", makeTar(t, []tarEntry{{Name: "/etc/passwd", Body: "x"}}), lockstep.EINVALID, "absolute"},
		{"dotgit", makeTar(t, []tarEntry{{Name: ".git/config", Body: "x"}}), lockstep.EINVALID, `".git" component`},
		{"dotgit-upper-nested", makeTar(t, []tarEntry{{Name: "sub/.GiT/hooks/pre-commit", Body: "x"}}), lockstep.EINVALID, `".GiT"`},
		{"dotgit-dir", makeTar(t, []tarEntry{{Name: "x/.git/", Type: tar.TypeDir}}), lockstep.EINVALID, `".git"`},
		{"nul", nulNameTar(t), lockstep.EINVALID, "tar"},
		{"bad-utf8", makeTar(t, []tarEntry{{Name: "bad\xff.txt", Body: "x", PAX: true}}), lockstep.EINVALID, "UTF-8"},
		{"double-slash", makeTar(t, []tarEntry{{Name: "a//b", Body: "x"}}), lockstep.EINVALID, "empty path component"},
		{"duplicate", makeTar(t, []tarEntry{ok, ok}), lockstep.EINVALID, `"ok.txt": duplicate`},
		{"duplicate-dot-slash", makeTar(t, []tarEntry{ok, {Name: "./ok.txt", Body: "y"}}), lockstep.EINVALID, "duplicate"},
		{"duplicate-dir", makeTar(t, []tarEntry{{Name: "d/", Type: tar.TypeDir}, {Name: "d/", Type: tar.TypeDir}}), lockstep.EINVALID, "duplicate"},
		{"char-device", makeTar(t, []tarEntry{{Name: "tty", Type: tar.TypeChar}}), lockstep.EINVALID, `"tty": device`},
		{"block-device", makeTar(t, []tarEntry{{Name: "sda", Type: tar.TypeBlock}}), lockstep.EINVALID, `"sda": device`},
		{"fifo", makeTar(t, []tarEntry{{Name: "pipe", Type: tar.TypeFifo}}), lockstep.EINVALID, `"pipe": fifos`},
		{"hardlink", makeTar(t, []tarEntry{ok, {Name: "hl", Type: tar.TypeLink, Linkname: "ok.txt"}}), lockstep.EINVALID, `"hl": hardlinks`},
		{"symlink-absolute", makeTar(t, []tarEntry{{Name: "l", Type: tar.TypeSymlink, Linkname: "/etc/passwd"}}), lockstep.EINVALID, "absolute target"},
		{"symlink-escape", makeTar(t, []tarEntry{{Name: "a/b/l", Type: tar.TypeSymlink, Linkname: "../../../x"}}), lockstep.EINVALID, `"a/b/l": symlink target "../../../x" escapes`},
		{"symlink-escape-chain", makeTar(t, []tarEntry{
			{Name: "p/q/up", Type: tar.TypeSymlink, Linkname: "../.."},
			{Name: "l", Type: tar.TypeSymlink, Linkname: "p/q/up/.."},
		}), lockstep.EINVALID, `"l": symlink target "p/q/up/.." escapes`},
		{"symlink-loop", makeTar(t, []tarEntry{
			{Name: "a", Type: tar.TypeSymlink, Linkname: "b/x"},
			{Name: "b", Type: tar.TypeSymlink, Linkname: "a/y"},
		}), lockstep.EINVALID, "too many levels"},
		{"gitmodules-symlink", makeTar(t, []tarEntry{ok, {Name: "sub/.GitModules", Type: tar.TypeSymlink, Linkname: "../ok.txt"}}), lockstep.EINVALID, `"sub/.GitModules": symlink "sub/.GitModules": .gitmodules must be a regular file`},
		{"file-then-dir", makeTar(t, []tarEntry{{Name: "a", Body: "x"}, {Name: "a/b", Body: "y"}}), lockstep.EINVALID, `"a" is a file, not a directory`},
		{"dir-then-file", makeTar(t, []tarEntry{{Name: "a/b", Body: "y"}, {Name: "a", Body: "x"}}), lockstep.EINVALID, `"a": file where a directory`},
		{"file-then-direntry", makeTar(t, []tarEntry{{Name: "a", Body: "x"}, {Name: "a/", Type: tar.TypeDir}}), lockstep.EINVALID, `"a": directory where a file`},
		{"truncated-tar", good[:700], lockstep.EINVALID, "truncated tar"},
		{"corrupt-tar", append([]byte("this is not a tar header at all"), bytes.Repeat([]byte{1}, 1000)...), lockstep.EINVALID, "tar"},
		{"truncated-gzip", gzipBytes(good)[:30], lockstep.EINVALID, "truncated"},
		{"corrupt-gzip", func() []byte { b := gzipBytes(good); b[len(b)-6] ^= 0xff; return b }(), lockstep.EINVALID, "gzip"},
		{"file-too-large", makeTar(t, []tarEntry{{Name: "big", Body: strings.Repeat("x", 1001)}}), lockstep.ETOOLARGE, `"big": file is 1001 bytes`},
		{"upload-too-large", makeTar(t, func() []tarEntry {
			var es []tarEntry
			for i := 0; i < 5; i++ {
				es = append(es, tarEntry{Name: strings.Repeat("f", i+1), Body: big + strings.Repeat("y", 14000)[:0]})
			}
			return es
		}()), lockstep.ETOOLARGE, "", /* see below */
		},
		{"too-many-files", makeTar(t, []tarEntry{{Name: "1", Body: "x"}, {Name: "2", Body: "x"}, {Name: "3", Body: "x"}, {Name: "4", Body: "x"}, {Name: "5", Body: "x"}, {Name: "6", Body: "x"}}), lockstep.ETOOLARGE, "more than 5 entries"},
	}
	// upload-too-large: 5 files of 900 bytes fit MaxFileBytes; shrink the
	// upload limit below the stream size instead.
	for i := range tests {
		if tests[i].name == "upload-too-large" {
			tests[i].msg = "upload is larger than 4000 bytes"
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := MustOpen(t)
			l := lim
			if tc.name == "upload-too-large" {
				l.MaxUploadBytes = 4000
			}
			before := storeFiles(t, n)
			in, err := IngestTar(context.Background(), bytes.NewReader(tc.data), l)
			if err == nil {
				// Nothing may reach the store: ingest does not write.
				t.Fatalf("accepted, tree %s", in.Tree)
			}
			if got := lockstep.ErrorCode(err); got != tc.code {
				t.Fatalf("code %q, want %q (err: %v)", got, tc.code, err)
			}
			if !strings.Contains(lockstep.ErrorMessage(err), tc.msg) {
				t.Fatalf("message %q does not contain %q", lockstep.ErrorMessage(err), tc.msg)
			}
			if after := storeFiles(t, n); len(after) != len(before) {
				t.Fatalf("store changed: %v", after)
			}
		})
	}
}

func TestIngestTarAccepts(t *testing.T) {
	lim := Limits{}
	data := makeTar(t, []tarEntry{
		{Name: "./", Type: tar.TypeDir},
		{Name: "./a.txt", Body: "a\n"},
		{Name: "empty/", Type: tar.TypeDir},
		{Name: "deep/er/", Type: tar.TypeDir},
		{Name: "d/", Type: tar.TypeDir},
		{Name: "d/x", Body: "x"},
		{Name: "d/link", Type: tar.TypeSymlink, Linkname: "../a.txt"},
		{Name: "d/dangling", Type: tar.TypeSymlink, Linkname: "nowhere/../still-inside"},
		{Name: strings.Repeat("long/", 30) + "name.txt", Body: "gnu/pax long name"},
		{Name: ".gitignore", Body: "*.o\n"},
		{Name: ".github/workflows/ci.yml", Body: "on: push\n"},
	})
	for _, gz := range []bool{false, true} {
		b := data
		if gz {
			b = gzipBytes(data)
		}
		in, err := IngestTar(context.Background(), bytes.NewReader(b), lim)
		if err != nil {
			t.Fatalf("gzip=%v: %v", gz, err)
		}
		if in.Files != 7 {
			t.Fatalf("files %d", in.Files)
		}
	}
}

// TestIngestTarMatchesGit checks that the tree oid equals what
// `git add -A && git write-tree` computes on the same files.
func TestIngestTarMatchesGit(t *testing.T) {
	entries := []tarEntry{
		{Name: "README.md", Body: "# hi\n"},
		{Name: "run.sh", Body: "#!/bin/sh\necho hi\n", Mode: 0o755},
		{Name: "owner-exec", Body: "x", Mode: 0o700},
		{Name: "src/main.go", Body: "package main\n"},
		{Name: "src/main.go.orig", Body: "old\n"},
		{Name: "src/main", Body: "bin\x00ary"},
		{Name: "src-x/y", Body: "y"},
		{Name: "src.txt", Body: "dot"},
		{Name: "a/b/c/d/e.txt", Body: "deep"},
		{Name: "a/b/link", Type: tar.TypeSymlink, Linkname: "c/d/e.txt"},
		{Name: "a/up", Type: tar.TypeSymlink, Linkname: "../README.md"},
		{Name: "ünïcødé/日本語.txt", Body: "utf8\n"},
		{Name: "Zeta", Body: "upper"},
		{Name: "empty.txt", Body: ""},
		{Name: "dup1", Body: "same"},
		{Name: "dup2", Body: "same"},
	}
	in, err := IngestTar(context.Background(), bytes.NewReader(makeTar(t, entries)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(e.Name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if e.Type == tar.TypeSymlink {
			if err := os.Symlink(e.Linkname, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if e.Mode != 0 {
			mode = os.FileMode(e.Mode)
		}
		if err := os.WriteFile(p, []byte(e.Body), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	os.MkdirAll(filepath.Join(dir, "empty-dir/sub"), 0o755)
	git(t, dir, nil, "init", "-q")
	git(t, dir, nil, "add", "-A")
	want := strings.TrimSpace(git(t, dir, nil, "write-tree"))
	if in.Tree.String() != want {
		t.Fatalf("tree %s, git write-tree %s", in.Tree, want)
	}

	// And the objects we write are what git reads.
	n := MustOpen(t)
	st, err := n.WriteObjects(in.Objects)
	if err != nil {
		t.Fatal(err)
	}
	if st.Objects != len(in.Objects) || st.Bytes == 0 {
		t.Fatalf("stats %+v for %d objects", st, len(in.Objects))
	}
	st2, err := n.WriteObjects(in.Objects)
	if err != nil || st2.Objects != 0 {
		t.Fatalf("second write: %+v %v", st2, err)
	}
	lsTree := git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "ls-tree", "-r", in.Tree.String())
	wantLs := git(t, dir, nil, "ls-tree", "-r", want)
	if lsTree != wantLs {
		t.Fatalf("ls-tree differs:\n%s\nwant\n%s", lsTree, wantLs)
	}
	git(t, n.Dir(), nil, "--git-dir="+n.Dir(), "fsck", "--strict", "--no-dangling")
}

func TestValidatePath(t *testing.T) {
	good := []string{"a", "a/b", ".gitignore", ".github/x", "x.git", "git", "日本", "a..b", "...", ".git-foo"}
	bad := []string{"", "/a", "a/", "a//b", "./a", "a/./b", "..", "a/../b", ".git", "x/.GIT/y", ".git.", ".git ", "GIT~1", "a\x00", "\xff", strings.Repeat("a", MaxPathBytes+1)}
	for _, p := range good {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v", p, err)
		}
	}
	for _, p := range bad {
		err := ValidatePath(p)
		var le *lockstep.Error
		if !errors.As(err, &le) || le.Code != lockstep.EINVALID {
			t.Errorf("ValidatePath(%q) = %v, want invalid_argument", p, err)
		}
	}
}

// nulNameTar hand-writes a PAX header whose path holds a NUL byte (the Go
// tar writer refuses to).
func nulNameTar(t *testing.T) []byte {
	rec := "path=a\x00b\n"
	rec = fmt.Sprintf("%d %s", len(rec)+3, rec)
	var buf bytes.Buffer
	buf.Write(rawHeader("PaxHeader", 'x', int64(len(rec))))
	buf.WriteString(rec)
	buf.Write(make([]byte, 512-len(rec)))
	var rest bytes.Buffer
	tw := tar.NewWriter(&rest)
	tw.WriteHeader(&tar.Header{Name: "placeholder", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	tw.Write([]byte("x"))
	tw.Close()
	buf.Write(rest.Bytes())
	return buf.Bytes()
}

// rawHeader builds a ustar header block by hand.
func rawHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:], name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// Found by FuzzIngestTar: links that each name the next one twice
// (l0 -> "l1/../l1", l1 -> "l2/../l2", ...) made the symlink check
// exponential: every name was resolved again wherever it appeared. Like
// the kernel, at most maxSymlinkDepth links are followed per check in
// total.
func TestIngestTarSymlinkExpansionBounded(t *testing.T) {
	var entries []tarEntry
	for i := 0; i < 30; i++ {
		entries = append(entries, tarEntry{Name: fmt.Sprintf("l%d", i), Type: tar.TypeSymlink, Linkname: fmt.Sprintf("l%d/../l%d", i+1, i+1)})
	}
	entries = append(entries, tarEntry{Name: "l30", Body: "x"})
	_, err := IngestTar(context.Background(), bytes.NewReader(makeTar(t, entries)), Limits{})
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "too many levels of symlinks") {
		t.Fatalf("err %v", err)
	}
	// A chain within the budget is still followed.
	entries = []tarEntry{{Name: "a", Type: tar.TypeSymlink, Linkname: "b/../b"}, {Name: "b", Type: tar.TypeSymlink, Linkname: "c"}, {Name: "c", Body: "x"}}
	if _, err := IngestTar(context.Background(), bytes.NewReader(makeTar(t, entries)), Limits{}); err != nil {
		t.Fatal(err)
	}
}

// A server-built commit is checked like a pushed one: an author name with
// '<' (accepted by net/mail when quoted) would make git fsck fail.
func TestWriteCommitRefusesWhatFsckFlags(t *testing.T) {
	n := MustOpen(t)
	_, tree := mustPush(t, n, []tarEntry{{Name: "a", Body: "x"}}, nil, 1700000000)
	for _, sig := range []object.Signature{
		{Name: "a<b", Email: "x@example.com", When: testSig.When},
		{Name: "ok", Email: "x>y@example.com", When: testSig.When},
		{Name: "new\nline", Email: "x@example.com", When: testSig.When},
	} {
		_, _, err := n.WriteCommit(CommitSpec{Tree: tree, Author: sig, Committer: testSig, Message: "m"})
		if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(lockstep.ErrorMessage(err), "git fsck") {
			t.Errorf("author %q <%s>: err %v", sig.Name, sig.Email, err)
		}
	}
	if _, _, err := n.WriteCommit(CommitSpec{Tree: tree, Author: testSig, Committer: testSig, Message: "m"}); err != nil {
		t.Fatal(err)
	}
}
