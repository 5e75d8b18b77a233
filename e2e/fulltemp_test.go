package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// TestFullTempDir: issue 21 item 13. A keyed request whose body is spooled
// to the server's temp directory (over 4 MiB) meets a full temp directory:
// 503 unavailable with Retry-After and a message that names no path (this
// was a 400 carrying the temp file's path). Nothing is remembered for the
// key: the same request succeeds once there is room.
func TestFullTempDir(t *testing.T) {
	t.Parallel()
	tmp := mountTmpfs(t, "8m")
	filler := filepath.Join(tmp, "filler")
	fill(t, filler)
	s := startServer(t, serverOpts{Env: []string{"TMPDIR=" + tmp}})
	s.CreateRepo(t, "tmpfull")
	p := s.Push(t, s.AdminKey, "tmpfull", "", map[string]string{"a.txt": "a\n"})

	tarball := e2ekit.TarOf(t, map[string]string{"big.txt": randomText(3, 5<<20)})
	push := func() *e2ekit.Response {
		r, err := s.Try("PUT", "/api/v1/repos/tmpfull/worktree"+e2ekit.PushQuery("main", p.Commit), s.AdminKey, tarball,
			"application/x-tar", "Idempotency-Key", "full-temp-1")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := push()
	want503(t, "keyed push with a full temp directory", r)
	var env struct{ Error struct{ Message string } }
	json.Unmarshal(r.Body, &env)
	if strings.Contains(env.Error.Message, tmp) || strings.Contains(env.Error.Message, "/") {
		t.Errorf("the message names a path: %q", env.Error.Message)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if r := push(); r.Status != http.StatusCreated {
		t.Fatalf("the same keyed push with room again: %s", r)
	}
}
