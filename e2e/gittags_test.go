package e2e

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestGitTags: lightweight and annotated tags are pushed, listed, fetched,
// moved only when forced (git's client rule; the server checks the old
// value) and deleted, as on a git host; a refused tag leaves no object.
func TestGitTags(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	agent := s.CreateKey(t, "agent", "agent")
	s.CreateRepo(t, "tg")
	s.Push(t, s.AdminKey, "tg", zeroOID, map[string]string{"a.txt": "a\n"})
	s.fork(t, agent.Secret, "tg", "ws-tags")
	dir := s.clone(t, "ws-tags", agent.Secret)
	commit := func(name string) string {
		writeFile(t, filepath.Join(dir, name), name+"\n")
		e2ekit.Git(t, dir, "add", name)
		e2ekit.Git(t, dir, "commit", "-q", "-m", name)
		return e2ekit.Git(t, dir, "rev-parse", "HEAD")
	}
	c1 := commit("one.txt")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")

	// A lightweight tag by name, then an annotated one with --tags.
	e2ekit.Git(t, dir, "tag", "v1")
	e2ekit.Git(t, dir, "push", "-q", "origin", "v1")
	e2ekit.Git(t, dir, "tag", "-a", "v2", "-m", "release 2")
	v2 := e2ekit.Git(t, dir, "rev-parse", "v2")
	e2ekit.Git(t, dir, "push", "-q", "--tags", "origin")
	refs := s.Refs(t, agent.Secret, "ws-tags")
	if refs["refs/tags/v1"] != c1 || refs["refs/tags/v2"] != v2 {
		t.Fatalf("API refs after tag pushes: %v, want v1=%s v2=%s (the tag object)", refs, c1, v2)
	}

	// ls-remote (both protocols) lists them with the annotated tag peeled;
	// a fresh clone has both.
	for _, v := range []string{"2", "0"} {
		out := e2ekit.Git(t, dir, "-c", "protocol.version="+v, "ls-remote", "origin") + "\n"
		for _, want := range []string{c1 + "\trefs/tags/v1\n", v2 + "\trefs/tags/v2\n", c1 + "\trefs/tags/v2^{}\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("ls-remote (protocol v%s) lacks %q:\n%s", v, want, out)
			}
		}
	}
	clone := s.clone(t, "ws-tags", agent.Secret)
	if got := e2ekit.Git(t, clone, "tag", "-l"); got != "v1\nv2" {
		t.Errorf("tags of a fresh clone: %q", got)
	}
	if got := e2ekit.Git(t, clone, "cat-file", "-t", "v2"); got != "tag" {
		t.Errorf("v2 in the clone is a %s, want an annotated tag", got)
	}

	// Moving a tag: git refuses without --force; forced, the server moves it
	// by compare-and-swap and logs it.
	c2 := commit("two.txt")
	e2ekit.Git(t, dir, "push", "-q", "origin", "main")
	e2ekit.Git(t, dir, "tag", "-f", "v1")
	out, err := e2ekit.GitCmd(t, dir, "push", "origin", "v1")
	if err == nil || !strings.Contains(out, "! [rejected]        v1 -> v1 (already exists)") {
		t.Errorf("unforced tag move: err %v\n%s", err, out)
	}
	if got := s.Refs(t, agent.Secret, "ws-tags")["refs/tags/v1"]; got != c1 {
		t.Errorf("v1 moved to %s without --force", got)
	}
	e2ekit.Git(t, dir, "push", "-q", "--force", "origin", "v1")
	if got := s.Refs(t, agent.Secret, "ws-tags")["refs/tags/v1"]; got != c2 {
		t.Errorf("v1 after a forced push %s, want %s", got, c2)
	}
	e2ekit.Git(t, clone, "fetch", "-q", "--force", "--tags", "origin")
	if got := e2ekit.Git(t, clone, "rev-parse", "v1"); got != c2 {
		t.Errorf("a fetch sees v1 at %s, want %s", got, c2)
	}

	// Delete.
	e2ekit.Git(t, dir, "push", "-q", "--delete", "origin", "v2")
	if _, ok := s.Refs(t, agent.Secret, "ws-tags")["refs/tags/v2"]; ok {
		t.Errorf("v2 still exists after a delete push")
	}
	if out := e2ekit.Git(t, dir, "ls-remote", "--tags", "origin"); strings.Contains(out, "v2") {
		t.Errorf("ls-remote still lists v2:\n%s", out)
	}

	// A name git's check-ref-format accepts but the server does not (an
	// invisible character): refused with the reason, and the annotated
	// tag's object, refused before the pack was read, is not stored.
	bad := "v3\u200b"
	e2ekit.Git(t, dir, "tag", "-a", bad, "-m", "invisible")
	badObj := e2ekit.Git(t, dir, "rev-parse", bad)
	out, err = e2ekit.GitCmd(t, dir, "push", "origin", "refs/tags/"+bad)
	if err == nil || !strings.Contains(out, "[remote rejected]") || !strings.Contains(out, "is not printable") {
		t.Errorf("push of tag %q: err %v\n%s", bad, err, out)
	}
	if _, err := e2ekit.GitCmd(t, "", "--git-dir="+s.networkDir("tg"), "cat-file", "-e", badObj); err == nil {
		t.Errorf("the refused tag object %s was stored", badObj)
	}

	// Every tag move is in the operations log.
	var moves []string
	for _, e := range s.Oplog(t, url.Values{"repo": {"ws-tags"}, "op": {"git.push"}}) {
		for _, m := range e.Refs {
			if strings.HasPrefix(m.Ref, "refs/tags/") {
				moves = append(moves, m.Ref+" "+short(m.Old)+"→"+short(m.New))
			}
		}
	}
	want := []string{"refs/tags/v1 000000000000→" + short(c1), "refs/tags/v2 000000000000→" + short(v2),
		"refs/tags/v1 " + short(c1) + "→" + short(c2), "refs/tags/v2 " + short(v2) + "→000000000000"}
	if strings.Join(moves, "\n") != strings.Join(want, "\n") {
		t.Errorf("tag moves in the oplog:\n got %v\nwant %v", moves, want)
	}
	if v := s.Verify(t); !v.OK {
		t.Errorf("oplog verify: %+v", v)
	}
}

// TestGitPushOplogCountsPackOnce: a non-atomic push of several refs that
// all apply is one transaction and one entry with every move, carrying the
// pack's objects once (repositories.TestGitPushWholeThenRefByRef covers a
// push with a refused ref: an entry per ref, the pack on the first).
func TestGitPushOplogCountsPackOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "pk")
	s.Push(t, s.AdminKey, "pk", zeroOID, map[string]string{"a.txt": "a\n"})
	dir := s.clone(t, "pk", s.AdminKey)
	main := e2ekit.Git(t, dir, "rev-parse", "HEAD")
	// Three branches, one new commit each: 3 commits, 3 trees, 3 blobs.
	for _, b := range []string{"b1", "b2", "b3"} {
		e2ekit.Git(t, dir, "checkout", "-q", "-b", b, main)
		writeFile(t, filepath.Join(dir, b+".txt"), b+"\n")
		e2ekit.Git(t, dir, "add", ".")
		e2ekit.Git(t, dir, "commit", "-q", "-m", b)
	}
	e2ekit.Git(t, dir, "push", "-q", "origin", "b1", "b2", "b3")
	entries := s.Oplog(t, url.Values{"repo": {"pk"}, "op": {"git.push"}})
	if len(entries) != 1 || len(entries[0].Refs) != 3 {
		t.Fatalf("%d git.push entries, want one with the 3 moves: %+v", len(entries), entries)
	}
	objects, withPack := 0, 0
	var bytes int64
	for _, e := range entries {
		objects += e.Objects
		bytes += e.Bytes
		if e.Objects > 0 {
			withPack++
		}
	}
	if objects != 9 || withPack != 1 || bytes <= 0 {
		t.Errorf("git.push entries: %d objects summed over %d entries carrying the pack, %d bytes; want 9 on exactly 1", objects, withPack, bytes)
	}
}

// TestGitAdvertisementFromStore: the v0 ref advertisement and v2's
// ls-refs are served from the store, byte for byte what git upload-pack
// answers from the on-disk refs.
func TestGitAdvertisementFromStore(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverOpts{})
	s.CreateRepo(t, "adv")
	s.Push(t, s.AdminKey, "adv", zeroOID, map[string]string{"a.txt": "a\n"})
	dir := s.clone(t, "adv", s.AdminKey)
	e2ekit.Git(t, dir, "tag", "-a", "v1", "-m", "one")
	e2ekit.Git(t, dir, "tag", "light")
	e2ekit.Git(t, dir, "push", "-q", "origin", "HEAD:refs/heads/feature", "--tags")
	get := func() string {
		r, err := s.Try("GET", "/git/adv.git/info/refs?service=git-upload-pack", s.AdminKey, nil, "")
		if err != nil || r.Status != 200 {
			t.Fatalf("info/refs: %v %v", err, r)
		}
		return string(r.Body)
	}
	fromGit, fromStore := gitAdvertisement(t, s, "adv", "adv"), get()
	if first := get(); first != fromStore {
		t.Errorf("v0 advertisements differ:\nfirst  %q\nsecond %q", first, fromStore)
	}
	if fromGit != fromStore {
		t.Errorf("v0 advertisement from the store differs from git's:\n git %q\nours %q", fromGit, fromStore)
	}
	for _, want := range []string{" HEAD\x00", "symref=HEAD:refs/heads/main", " refs/tags/v1^{}\n", " refs/tags/light\n", " refs/heads/feature\n"} {
		if !strings.Contains(fromStore, want) {
			t.Errorf("advertisement lacks %q:\n%q", want, fromStore)
		}
	}
	// v2 ls-refs, as git asks it for ls-remote and for a clone.
	lsRefs := func(args ...string) string {
		var b strings.Builder
		pkt := func(l string) { fmt.Fprintf(&b, "%04x%s", len(l)+4, l) }
		pkt("command=ls-refs\n")
		pkt("object-format=sha1\n")
		b.WriteString("0001")
		for _, a := range args {
			pkt(a + "\n")
		}
		b.WriteString("0000")
		r, err := s.Try("POST", "/git/adv.git/git-upload-pack", s.AdminKey, []byte(b.String()), "application/x-git-upload-pack-request", "Git-Protocol", "version=2")
		if err != nil || r.Status != 200 {
			t.Fatalf("ls-refs: %v %v", err, r)
		}
		return string(r.Body)
	}
	all := lsRefs("symrefs", "peel", "unborn")
	main := s.Head(t, "adv")
	v1 := e2ekit.Git(t, dir, "rev-parse", "v1")
	want := pktLines(main+" HEAD symref-target:refs/heads/main\n", main+" refs/heads/feature\n", main+" refs/heads/main\n",
		main+" refs/tags/light\n", v1+" refs/tags/v1 peeled:"+main+"\n") + "0000"
	if all != want {
		t.Errorf("ls-refs symrefs peel unborn:\n got %q\nwant %q", all, want)
	}
	if got, want := lsRefs("ref-prefix refs/tags/"), pktLines(main+" refs/tags/light\n", v1+" refs/tags/v1\n")+"0000"; got != want {
		t.Errorf("ls-refs ref-prefix refs/tags/:\n got %q\nwant %q", got, want)
	}
	// An empty repository: HEAD is unborn.
	s.CreateRepo(t, "adv-empty")
	var b strings.Builder
	for _, l := range []string{"command=ls-refs\n"} {
		fmt.Fprintf(&b, "%04x%s", len(l)+4, l)
	}
	b.WriteString("0001000csymrefs\n000bunborn\n0000")
	r, err := s.Try("POST", "/git/adv-empty.git/git-upload-pack", s.AdminKey, []byte(b.String()), "application/x-git-upload-pack-request", "Git-Protocol", "version=2")
	if err != nil || r.Status != 200 || string(r.Body) != pktLines("unborn HEAD symref-target:refs/heads/main\n")+"0000" {
		t.Errorf("ls-refs of an empty repository: %v %q", err, r.Body)
	}
}

func pktLines(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%04x%s", len(l)+4, l)
	}
	return b.String()
}

// gitAdvertisement is git's own v0 ref advertisement of repository repo
// (network base), as http-backend would serve it: git upload-pack run on
// the server's on-disk mirror in the repository's namespace, with the
// server's v0 setting (no filter: see TestPartialCloneEveryProtocol).
func gitAdvertisement(t *testing.T, s *server, base, repo string) string {
	t.Helper()
	cmd := exec.Command("git", "-c", "uploadpack.allowFilter=false", "upload-pack", "--stateless-rpc", "--advertise-refs", filepath.Join(s.Data, "networks", base+".git"))
	cmd.Env = append(os.Environ(), "GIT_NAMESPACE="+repo, "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git upload-pack --advertise-refs: %v", err)
	}
	return pktLines("# service=git-upload-pack\n") + "0000" + string(out)
}
