package e2e

import (
	"crypto/sha1"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitTagChainPeeled: a tag of a tag of … (deeper than any small
// bound) is advertised peeled to the object at the end of the chain, as
// git peels it: ls-remote over both protocols lists what a plain git
// repository holding the same refs lists.
func TestGitTagChainPeeled(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent", "agent")
	s.CreateRepo(t, "tchain")
	s.Push(t, s.AdminKey, "tchain", zeroOID, map[string]string{"a.txt": "a\n"})
	s.fork(t, agent.Secret, "tchain", "ws-tchain")
	dir := s.clone(t, "ws-tchain", agent.Secret)
	prev := "HEAD"
	for i := 1; i <= 15; i++ {
		name := fmt.Sprintf("n%02d", i)
		e2ekit.Git(t, dir, "-c", "advice.nestedTag=false", "tag", "-a", name, "-m", name, prev)
		prev = name
	}
	e2ekit.Git(t, dir, "push", "-q", "--tags", "origin")
	want := e2ekit.Git(t, dir, "ls-remote", ".", "refs/tags/*")
	for _, v := range []string{"2", "0"} {
		got := e2ekit.Git(t, dir, "-c", "protocol.version="+v, "ls-remote", "origin", "refs/tags/*")
		if got != want {
			t.Errorf("ls-remote (protocol v%s):\n%s\nwant (git's own peeling):\n%s", v, got, want)
		}
	}
}

// TestGitPushDuplicateRef: a push naming one ref twice (git's client never
// sends it; git's ref transaction refuses it: "multiple updates for ref
// not allowed") moves the ref at most once, by the first command, and the
// report says which command applied: without atomic the first is ok and
// the second refused, with atomic both are refused and nothing moves.
func TestGitPushDuplicateRef(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "dupref")
	c1 := s.Push(t, s.AdminKey, "dupref", zeroOID, map[string]string{"a.txt": "a\n"}).Commit
	c2 := s.Push(t, s.AdminKey, "dupref", c1, map[string]string{"a.txt": "b\n"}).Commit
	emptyPack := "PACK\x00\x00\x00\x02\x00\x00\x00\x00" + string(sha1Sum("PACK\x00\x00\x00\x02\x00\x00\x00\x00"))
	push := func(caps string, cmds ...[3]string) string {
		var lines []string
		for i, c := range cmds {
			l := c[0] + " " + c[1] + " " + c[2]
			if i == 0 {
				l += "\x00" + caps
			}
			lines = append(lines, l+"\n")
		}
		body := pktLines(lines...) + "0000" + emptyPack
		r, err := s.Try("POST", "/git/dupref.git/git-receive-pack", s.AdminKey, []byte(body), "application/x-git-receive-pack-request")
		if err != nil || r.Status != 200 {
			t.Fatalf("receive-pack: %v %v", err, r)
		}
		return string(r.Body)
	}
	got := push("report-status", [3]string{zeroOID, c2, "refs/tags/d1"}, [3]string{zeroOID, c1, "refs/tags/d1"})
	if !strings.Contains(got, pktLines("ok refs/tags/d1\n")+pktLines("ng refs/tags/d1 multiple updates for ref 'refs/tags/d1' not allowed\n")) {
		t.Errorf("non-atomic duplicate: report %q, want the first ok and the second refused", got)
	}
	if ref := s.Refs(t, s.AdminKey, "dupref")["refs/tags/d1"]; ref != c2 {
		t.Errorf("refs/tags/d1 = %s, want %s (the first command)", ref, c2)
	}
	got = push("report-status atomic", [3]string{zeroOID, c2, "refs/tags/d2"}, [3]string{c2, c1, "refs/tags/d2"})
	if strings.Contains(got, "ok refs/tags/d2") {
		t.Errorf("atomic duplicate: report %q, want both refused", got)
	}
	if ref, ok := s.Refs(t, s.AdminKey, "dupref")["refs/tags/d2"]; ok {
		t.Errorf("refs/tags/d2 = %s after a refused atomic push", ref)
	}
}

func sha1Sum(s string) []byte {
	h := sha1.Sum([]byte(s))
	return h[:]
}

// TestGitAdvertisementFirstAnswerFromStore: the first v0 advertisement of
// a server (the one it learns git's capabilities from) lists the store's
// refs too, not the on-disk mirror's: a ref the mirror could not write is
// left out, and a stray on-disk ref the store does not have is not
// listed, on the first answer as on every later one.
func TestGitAdvertisementFirstAnswerFromStore(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "adv1")
	s.Push(t, s.AdminKey, "adv1", zeroOID, map[string]string{"a.txt": "a\n"})
	dir := s.clone(t, "adv1", s.AdminKey)
	head := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	// A stray ref file where the mirror must write refs/tags/mf: the
	// mirror of the pushed tag fails (a file/directory clash on disk).
	stray := filepath.Join(s.Data, "networks", "adv1.git", "refs", "namespaces", "adv1", "refs", "tags", "mf")
	if err := os.MkdirAll(stray, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stray, "x"), []byte(head+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e2ekit.Git(t, dir, "tag", "mf")
	e2ekit.Git(t, dir, "push", "-q", "origin", "mf")
	get := func() string {
		r, err := s.Try("GET", "/git/adv1.git/info/refs?service=git-upload-pack", s.AdminKey, nil, "")
		if err != nil || r.Status != 200 {
			t.Fatalf("info/refs: %v %v", err, r)
		}
		return string(r.Body)
	}
	first, second := get(), get()
	if first != second {
		t.Errorf("the first v0 advertisement differs from the next:\nfirst  %q\nsecond %q", first, second)
	}
	for _, adv := range []string{first, second} {
		if strings.Contains(adv, "refs/tags/mf") {
			t.Errorf("advertisement lists a ref the store lacks or the mirror does not hold:\n%q", adv)
		}
	}
}

// TestGitAtomicPushStaleReason: an atomic push refused because one ref
// lost its compare-and-swap reports that ref's reason on that ref only;
// the other refs of the push are "atomic push failed", not the stale
// ref's "expected …, actual …" (which named another ref's values).
func TestGitAtomicPushStaleReason(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "atomicr")
	c1 := s.Push(t, s.AdminKey, "atomicr", zeroOID, map[string]string{"a.txt": "a\n"}).Commit
	c2 := s.Push(t, s.AdminKey, "atomicr", c1, map[string]string{"a.txt": "b\n"}).Commit
	emptyPack := "PACK\x00\x00\x00\x02\x00\x00\x00\x00" + string(sha1Sum("PACK\x00\x00\x00\x02\x00\x00\x00\x00"))
	push := func(caps string, cmds ...[3]string) string {
		var lines []string
		for i, c := range cmds {
			l := c[0] + " " + c[1] + " " + c[2]
			if i == 0 {
				l += "\x00" + caps
			}
			lines = append(lines, l+"\n")
		}
		r, err := s.Try("POST", "/git/atomicr.git/git-receive-pack", s.AdminKey, []byte(pktLines(lines...)+"0000"+emptyPack), "application/x-git-receive-pack-request")
		if err != nil || r.Status != 200 {
			t.Fatalf("receive-pack: %v %v", err, r)
		}
		return string(r.Body)
	}
	if got := push("report-status", [3]string{zeroOID, c1, "refs/tags/taken"}); !strings.Contains(got, "ok refs/tags/taken") {
		t.Fatalf("create refs/tags/taken: %q", got)
	}
	got := push("report-status atomic", [3]string{zeroOID, c2, "refs/tags/fresh"}, [3]string{zeroOID, c2, "refs/tags/taken"})
	want := pktLines("ng refs/tags/fresh atomic push failed\n") +
		pktLines("ng refs/tags/taken stale info: ref moved (expected "+zeroOID+", actual "+c1+"); fetch first\n")
	if !strings.Contains(got, want) {
		t.Errorf("atomic push with a stale ref: report %q, want %q", got, want)
	}
	if ref, ok := s.Refs(t, s.AdminKey, "atomicr")["refs/tags/fresh"]; ok {
		t.Errorf("refs/tags/fresh = %s after a refused atomic push", ref)
	}
}

// TestGitTagOfSubtreeWithEscapingSymlink: a tree may be checked out as a
// root (`git restore --source=<tag> .`, `git archive`), so a tag naming a
// tree follows the rule of a commit's tree: no symlink in it may climb
// above it. d/l -> ../x is fine inside a commit (it names x at the top);
// a tag naming d itself, lightweight or annotated, is refused, and the
// annotated tag's object is not stored.
func TestGitTagOfSubtreeWithEscapingSymlink(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent", "agent")
	s.CreateRepo(t, "tsub")
	s.Push(t, s.AdminKey, "tsub", zeroOID, map[string]string{"x": "x\n"})
	s.fork(t, agent.Secret, "tsub", "ws-tsub")
	dir := s.clone(t, "ws-tsub", agent.Secret)
	if err := os.MkdirAll(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../x", filepath.Join(dir, "d", "l")); err != nil {
		t.Fatal(err)
	}
	e2ekit.Git(t, dir, "add", "-A")
	e2ekit.Git(t, dir, "commit", "-q", "-m", "link")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")
	sub := e2ekit.Git(t, dir, "rev-parse", "HEAD:d")
	e2ekit.Git(t, dir, "tag", "light", sub)
	e2ekit.Git(t, dir, "tag", "-a", "ann", "-m", "subtree", sub)
	ann := e2ekit.Git(t, dir, "rev-parse", "ann")
	for _, tag := range []string{"light", "ann"} {
		out, err := e2ekit.GitCmd(t, dir, "push", "origin", tag)
		if err == nil || !strings.Contains(out, "escapes the tree") {
			t.Errorf("push of tag %s (a tree whose symlink climbs above it): err %v\n%s", tag, err, out)
		}
	}
	refs := s.Refs(t, agent.Secret, "ws-tsub")
	for _, ref := range []string{"refs/tags/light", "refs/tags/ann"} {
		if oid, ok := refs[ref]; ok {
			t.Errorf("%s = %s after a refused push", ref, oid)
		}
	}
	if out, err := e2ekit.GitCmd(t, "", "--git-dir="+filepath.Join(s.Data, "networks", "tsub.git"), "cat-file", "-e", ann); err == nil {
		t.Errorf("the refused annotated tag %s was stored %s", ann, out)
	}
	// A tag of the whole commit, or of a tree whose links stay inside it,
	// is fine.
	e2ekit.Git(t, dir, "tag", "whole", "HEAD^{tree}")
	e2ekit.Git(t, dir, "push", "-q", "origin", "whole")
}
