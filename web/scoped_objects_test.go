package web_test

import (
	"bytes"
	"crypto/sha1"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/web"
)

// TestScopedKeyObjectOracle: a fork network stores all its workspaces'
// objects together; a key scoped to ws1 must not learn whether an object
// of another workspace (theirs) is stored: objects/missing reports it
// missing, and a write naming it without sending it (objects upload then
// PUT ?tree=, git receive-pack, a ref naming a foreign commit) is refused
// as an object that is not stored at all. Sending it is accepted (the
// content is the key's own then), and the legitimate flows keep working.
func TestScopedKeyObjectOracle(t *testing.T) {
	f := mustServerTweak(t, web.Config{}, nil, nil)
	f.want(t, "POST", "/api/v1/repos", f.admin, `{"name":"app"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.agent, `{"name":"ws1"}`, 201)
	f.want(t, "POST", "/api/v1/repos/app/forks", f.admin, `{"name":"theirs"}`, 201)
	sub := f.want(t, "POST", "/api/v1/keys", f.agent, `{"name":"sub","role":"agent","ttl":"1h","scope":{"workspace":"ws1"}}`, 201)["secret"].(string)

	g := gitT{t: t, home: t.TempDir()}
	u, _ := url.Parse(f.srv.URL)
	remote := func(key, repo string) string {
		pu := *u
		pu.User = url.UserPassword("x", key)
		return pu.String() + "/git/" + repo + ".git"
	}
	commitFile := func(dir, name, content, msg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		g.must(dir, nil, "add", name)
		g.must(dir, nil, "-c", "user.name=A", "-c", "user.email=a@example.com", "commit", "-q", "-m", msg)
	}
	const secret = "API_KEY=hunter2\n"
	their := t.TempDir()
	g.must(their, nil, "init", "-q", "-b", "main")
	commitFile(their, ".env", secret, "their secret")
	g.must(their, nil, "push", "-q", "--force", remote(f.admin, "theirs"), "main:refs/heads/main")
	theirCommit := g.must(their, nil, "rev-parse", "HEAD")
	theirTree := g.must(their, nil, "rev-parse", "HEAD^{tree}")

	work := t.TempDir()
	g.must(work, nil, "init", "-q", "-b", "main")
	commitFile(work, "mine.txt", "mine\n", "mine")
	g.must(work, nil, "push", "-q", "--force", remote(sub, "ws1"), "main:refs/heads/main")
	head := g.must(work, nil, "rev-parse", "HEAD")
	mine := g.must(work, nil, "rev-parse", "HEAD:mine.txt")
	secretBlob := g.must(work, []byte(secret), "hash-object", "-w", "--stdin") // the attacker's guess
	absent := g.must(work, []byte("API_KEY=wrong\n"), "hash-object", "--stdin")

	// 1. objects/missing: ws1's own blob is present, theirs is missing
	// to the scoped key (as is one stored nowhere); an unscoped key sees
	// the network as before.
	body := fmt.Sprintf(`{"oids":[%q,%q,%q]}`, mine, secretBlob, absent)
	got := fmt.Sprint(f.want(t, "POST", "/api/v1/repos/ws1/objects/missing", sub, body, 200)["missing"])
	if want := fmt.Sprint([]any{secretBlob, absent}); got != want {
		t.Errorf("scoped objects/missing: %s, want %s (their blob missing)", got, want)
	}
	got = fmt.Sprint(f.want(t, "POST", "/api/v1/repos/ws1/objects/missing", f.agent, body, 200)["missing"])
	if want := fmt.Sprint([]any{absent}); got != want {
		t.Errorf("agent objects/missing: %s, want %s", got, want)
	}

	// packOf packs the listed objects only (no closure).
	packOf := func(oids ...string) []byte {
		t.Helper()
		cmd := exec.Command("git", "pack-objects", "--stdout", "-q")
		cmd.Dir = work
		cmd.Env = []string{"HOME=" + g.home, "GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH")}
		cmd.Stdin = strings.NewReader(strings.Join(oids, "\n") + "\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pack-objects: %v", err)
		}
		return out
	}
	post := func(method, path, key, ctype string, b []byte) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, f.srv.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	// treeWith is ws1's tree plus .env naming blob.
	treeWith := func(blob string) string {
		return g.must(work, []byte(fmt.Sprintf("100644 blob %s\t.env\n100644 blob %s\tmine.txt\n", blob, mine)), "mktree", "--missing")
	}
	upload := func(key string, oids ...string) (int, string) {
		return post("POST", "/api/v1/repos/ws1/objects", key, "application/x-git-packfile", packOf(oids...))
	}

	// 2. A tree naming their blob, uploaded without it: refused exactly
	// as a tree naming a blob stored nowhere.
	stolen := treeWith(secretBlob)
	g.must(work, []byte("x"), "hash-object", "-w", "--stdin")
	nowhere := treeWith(absent)
	status, stolenErr := upload(sub, stolen)
	status2, nowhereErr := upload(sub, nowhere)
	if status != 400 || status2 != 400 ||
		strings.ReplaceAll(strings.ReplaceAll(stolenErr, secretBlob, "B"), stolen, "T") != strings.ReplaceAll(strings.ReplaceAll(nowhereErr, absent, "B"), nowhere, "T") {
		t.Errorf("scoped upload of a tree naming their blob: %d %s\nnaming a blob stored nowhere: %d %s\nwant the same refusal", status, stolenErr, status2, nowhereErr)
	}
	// Nor can it name their tree, or the tree it failed to upload.
	for _, tree := range []string{theirTree, stolen} {
		if status, out := post("PUT", "/api/v1/repos/ws1/worktree?branch=main&expect_oid="+head+"&tree="+tree, sub, "application/json", nil); status != 404 {
			t.Errorf("scoped PUT ?tree=%s: %d %s, want 404", tree, status, out)
		}
	}
	if status, out := post("GET", "/api/v1/repos/ws1/blob/main/.env", sub, "", nil); status != 404 {
		t.Fatalf("scoped key reads .env: %d %s", status, out)
	}

	// 3. git receive-pack, by hand (a git client sends what the server
	// lacks, by the refs it advertises): a commit whose tree names their
	// blob, the blob left out; then a ref naming their commit, no pack.
	stolenCommit := g.must(work, nil, "-c", "user.name=A", "-c", "user.email=a@example.com", "commit-tree", "-p", head, "-m", "steal", stolen)
	receive := func(cmd string, pack []byte) string {
		t.Helper()
		var b bytes.Buffer
		line := cmd + "\x00report-status\n"
		fmt.Fprintf(&b, "%04x%s0000", len(line)+4, line)
		b.Write(pack)
		_, out := post("POST", "/git/ws1.git/git-receive-pack", sub, "application/x-git-receive-pack-request", b.Bytes())
		return out
	}
	if out := receive(head+" "+stolenCommit+" refs/heads/main", packOf(stolenCommit, stolen)); !strings.Contains(out, "unpack ") || strings.Contains(out, "unpack ok") {
		t.Errorf("receive-pack of a commit naming their blob: %q, want an unpack error", out)
	}
	zero := strings.Repeat("0", 40)
	empty := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	sum := sha1.Sum(empty)
	if out := receive(zero+" "+theirCommit+" refs/heads/stolen", append(empty, sum[:]...)); !strings.Contains(out, "ng refs/heads/stolen "+theirCommit+" is not a commit in this repository") {
		t.Errorf("receive-pack of a ref naming their commit: %q, want ng (not a commit)", out)
	}
	if out := g.must(work, nil, "ls-remote", remote(sub, "ws1")); out != head+"\tHEAD\n"+head+"\trefs/heads/main" {
		t.Fatalf("ws1's refs after the refusals:\n%s", out)
	}

	// 4. Sending the blob is its own content: accepted, counted as
	// written (the answer does not tell it was stored), and pushed.
	status, out := upload(sub, stolen, secretBlob)
	if status != 200 || !strings.Contains(out, `"objects_written":2`) {
		t.Fatalf("scoped upload of the tree with the blob: %d %s", status, out)
	}
	res := f.want(t, "PUT", "/api/v1/repos/ws1/worktree?branch=main&expect_oid="+head+"&tree="+stolen, sub, "", 201)
	if status, out := post("GET", "/api/v1/repos/ws1/blob/main/.env", sub, "", nil); status != 200 || out != secret {
		t.Fatalf("scoped key reads its own .env: %d %q", status, out)
	}

	// 5. The legitimate git flows of a scoped key: a commit on its tip
	// (re-adding content stored elsewhere: git sends it), a rollback.
	g.must(work, nil, "fetch", "-q", remote(sub, "ws1"), "main")
	g.must(work, nil, "reset", "-q", "--hard", "FETCH_HEAD")
	if err := os.Remove(filepath.Join(work, ".env")); err != nil {
		t.Fatal(err)
	}
	g.must(work, nil, "add", "-A")
	g.must(work, nil, "-c", "user.name=A", "-c", "user.email=a@example.com", "commit", "-q", "-m", "drop .env")
	g.must(work, nil, "push", "-q", remote(sub, "ws1"), "main")
	commitFile(work, "again.env", secret, "re-add the content")
	commitFile(work, "more.txt", "more\n", "more")
	g.must(work, nil, "push", "-q", remote(sub, "ws1"), "main")
	tip := g.must(work, nil, "rev-parse", "HEAD")
	f.want(t, "POST", "/api/v1/repos/ws1/rollback", sub, `{"branch":"main","to":"`+res["commit"].(string)+`","expect_oid":"`+tip+`"}`, 201)
	if status, out := post("GET", "/api/v1/repos/ws1/blob/main/.env", sub, "", nil); status != 200 || out != secret {
		t.Fatalf("after the rollback: %d %q", status, out)
	}
}
