package web_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestScopedKeyGitNegotiation: a scoped key is served git protocol v0,
// whose upload-pack gives out only what its repository's refs reach —
// but git trusts the rest of the request: a "shallow <oid>" line with
// "deepen 2147483647" (what `git fetch --unshallow` sends) makes git
// add the parents of that commit to the wants unchecked, a "have <oid>"
// is ACKed when the network stores it, "deepen-not" resolves a ref of
// any repository, and "filter sparse:oid=<oid>" reads any blob as
// patterns, and a want of a blob or tree is served whoever stores it.
// None of them may reach another workspace's objects.
func TestScopedKeyGitNegotiation(t *testing.T) {
	f := mustServer(t)
	sub := scopedWorkspaces(t, f)
	g := gitT{t: t, home: t.TempDir()}
	u, _ := url.Parse(f.srv.URL)
	push := func(key, repo, file, content string) (mid, tip string) {
		t.Helper()
		return pushThree(t, g, u, key, repo, file, content)
	}
	mineMid, mine := push(sub, "ws1", "mine.txt", "mine\n")
	theirMid, theirs := push(f.admin, "theirs", "secret.txt", "their secret\n")
	secretBlob := g.must(t.TempDir(), []byte("their secret\n"), "hash-object", "--stdin")

	pkt := func(lines ...string) string {
		var b strings.Builder
		for _, l := range lines {
			if l == "0000" {
				b.WriteString(l)
				continue
			}
			fmt.Fprintf(&b, "%04x%s\n", len(l)+5, l)
		}
		return b.String()
	}
	uploadPack := func(key, body string) []byte {
		t.Helper()
		req, _ := http.NewRequest("POST", f.srv.URL+"/git/ws1.git/git-upload-pack", strings.NewReader(body))
		req.SetBasicAuth("x", key)
		req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return b
	}
	// holds indexes the pack of an answer into a new repository and
	// reports whether it holds oid.
	holds := func(answer []byte, oid string) bool {
		t.Helper()
		i := bytes.Index(answer, []byte("PACK"))
		if i < 0 {
			return false
		}
		dir := t.TempDir()
		g.must(dir, nil, "init", "-q")
		g.must(dir, answer[i:], "index-pack", "--stdin")
		_, err := g.run(dir, nil, "cat-file", "-e", oid)
		return err == nil
	}

	// The unshallow trick: want its own tip, claim their tip as a shallow
	// boundary, deepen fully.
	ans := uploadPack(sub, pkt("want "+mine+" ofs-delta shallow no-progress", "shallow "+theirs, "deepen 2147483647", "0000", "done"))
	if !holds(ans, mine) {
		t.Fatalf("the fetch of its own tip did not serve it:\n%q", ans)
	}
	if holds(ans, theirMid) || holds(ans, secretBlob) || bytes.Contains(ans, []byte("unshallow "+theirs)) {
		t.Errorf("a scoped key's shallow line for another workspace's commit %s fetched its history:\n%q", theirs, ans)
	}

	// A want of their blob or commit by id: git refuses a commit its refs
	// do not reach but served any blob or tree; refused alike, and alike
	// for an object stored nowhere (no oracle).
	nowhere := "0123456789abcdef0123456789abcdef01234567"
	for _, oid := range []string{secretBlob, theirMid, strings.ToUpper(secretBlob), nowhere} {
		ans := uploadPack(sub, pkt("want "+oid+" ofs-delta no-progress", "0000", "done"))
		if holds(ans, strings.ToLower(oid)) || !bytes.Contains(ans, []byte("ERR upload-pack: not our ref "+strings.ToLower(oid))) {
			t.Errorf("a scoped key's want of %s: %q, want git's refusal", oid, ans)
		}
	}
	// Its own blob by id still is served.
	myBlob := g.must(t.TempDir(), []byte("mine\n"), "hash-object", "--stdin")
	if ans := uploadPack(sub, pkt("want "+myBlob+" ofs-delta no-progress", "0000", "done")); !holds(ans, myBlob) {
		t.Errorf("a scoped key's want of its own blob %s: %q", myBlob, ans)
	}

	// The have oracle: git ACKs a have the network stores.
	if ans := uploadPack(sub, pkt("want "+mine, "0000", "have "+mineMid, "done")); !bytes.Contains(ans, []byte("ACK "+mineMid)) {
		t.Fatalf("have of its own commit: %q, want an ACK", ans)
	}
	if ans := uploadPack(sub, pkt("want "+mine, "0000", "have "+theirs, "done")); bytes.Contains(ans, []byte("ACK "+theirs)) {
		t.Errorf("have of another workspace's commit was ACKed to a scoped key: %q", ans)
	}
	// An unscoped key reads the network (reads are open): its have is ACKed.
	if ans := uploadPack(f.agent, pkt("want "+mine, "0000", "have "+theirs, "done")); !bytes.Contains(ans, []byte("ACK "+theirs)) {
		t.Fatalf("have of an unscoped key: %q, want an ACK", ans)
	}

	// deepen-not names a ref of the whole network (git resolves it
	// outside the namespace): refused, with git's ERR line.
	ans = uploadPack(sub, pkt("want "+mine+" ofs-delta shallow no-progress", "deepen-not refs/namespaces/theirs/refs/heads/main", "0000", "done"))
	if !bytes.Contains(ans, []byte("ERR ")) || !bytes.Contains(ans, []byte("deepen-not")) || bytes.Contains(ans, []byte("PACK")) {
		t.Errorf("deepen-not of a scoped key: %q, want an ERR refusal", ans)
	}

	// sparse:oid reads any blob of the network as patterns (its error or
	// its selection tells what the blob holds). A scoped key is served
	// protocol v0, where no filter is offered (partial clone is v2 only):
	// every filter is refused, sparse:oid too (and it is off for scoped
	// keys in any case).
	for _, filter := range []string{"sparse:oid=" + secretBlob, "combine:blob:none+sparse%3Aoid%3D" + secretBlob, "blob:none"} {
		ans = uploadPack(sub, pkt("want "+mine+" ofs-delta no-progress filter", "filter "+filter, "0000", "done"))
		if bytes.Contains(ans, []byte("PACK")) || !bytes.Contains(ans, []byte("ERR ")) {
			t.Errorf("filter %s of a scoped key: %q, want a refusal", filter, ans)
		}
	}
	// And a real shallow clone, deepened, over the git CLI.
	pu := *u
	pu.User = url.UserPassword("x", sub)
	dir := t.TempDir()
	g.must(dir, nil, "clone", "-q", "--depth", "1", pu.String()+"/git/ws1.git", "c")
	g.must(filepath.Join(dir, "c"), nil, "fetch", "-q", "--unshallow")
	if got := g.must(filepath.Join(dir, "c"), nil, "rev-parse", "HEAD~1"); got != mineMid {
		t.Fatalf("after --unshallow HEAD~1 = %s, want %s", got, mineMid)
	}
}
