// Package e2erun drives the built lockstep binary through the checkpoint
// story: a workspace with a Postgres branch, a transactional tool run that
// fails, and the proof that code, data and files came back together.
package e2erun

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockstep-e2erun-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "lockstep")
	out, err := exec.Command("go", "build", "-o", binary, "../cmd/lockstep").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build lockstep: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type server struct {
	url, admin, data string
}

func startServer(t *testing.T, env ...string) *server {
	t.Helper()
	data := t.TempDir()
	port := testenv.FreePort(t)
	cmd := exec.Command(binary, "serve", "--data", data, "--addr", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Env = append(os.Environ(), env...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	s := &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), data: data}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not start:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(data, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	s.admin = strings.TrimSpace(string(b))
	return s
}

func (s *server) api(t *testing.T, key, method, path string, body any, want int) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+"/api/v1"+path, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s (want %d)", method, path, resp.StatusCode, b, want)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

// cli runs the lockstep binary as a client.
func (s *server) cli(t *testing.T, key string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "LOCKSTEP_URL="+s.url, "LOCKSTEP_KEY="+key, "XDG_CACHE_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// dropPrefix removes every database and role a test's server created.
func dropPrefix(t *testing.T, adminURL, prefix string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE $1`, prefix+"\\_%")
	dbs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	// Templates cannot be dropped; an invalid database (a drop cut short)
	// cannot be altered, only dropped.
	conn.Exec(ctx, `UPDATE pg_database SET datistemplate = false WHERE datname LIKE $1`, prefix+"\\_%")
	for _, d := range dbs {
		if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{d}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("cleanup drop %s: %v", d, err)
		}
	}
	rows, _ = conn.Query(ctx, `SELECT rolname FROM pg_roles WHERE rolname LIKE $1`, prefix+"\\_%")
	roles, _ := pgx.CollectRows(rows, pgx.RowTo[string])
	for _, r := range roles {
		if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+pgx.Identifier{r}.Sanitize()); err != nil {
			t.Errorf("cleanup drop role %s: %v", r, err)
		}
	}
}
