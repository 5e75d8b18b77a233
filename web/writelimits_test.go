package web_test

import (
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/web"
)

// uploadPacks lists this process's `git upload-pack` children (the server
// runs in the test process).
func uploadPacks(t *testing.T) []int {
	t.Helper()
	me := os.Getpid()
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so after ")".
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != me {
			continue
		}
		cmdline, _ := os.ReadFile(d + "/cmdline")
		if strings.Contains(string(cmdline), "upload-pack") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			out = append(out, pid)
		}
	}
	return out
}

// A client that never reads a large answer (a blob, an archive, a git
// fetch) is disconnected once --write-timeout passes without progress, and
// the fetch's git upload-pack is gone (issue 21, item 6).
func TestStalledReaderDisconnected(t *testing.T) {
	w := mustUIWorld(t, func(s *web.Server) { s.Config.WriteTimeout, s.Config.WriteMinRate = time.Second, 1<<20 })
	big := make([]byte, 32<<20) // more than the loopback socket buffers hold
	rand.Read(big)
	tip := w.push(t, "empty", w.admin, lockstep.ZeroOID, "big", map[string]string{"big.bin": string(big)}, 201)
	if tip == "" {
		t.Fatal("no commit")
	}

	var mu sync.Mutex
	closed := map[string]bool{}
	srv := httptest.NewUnstartedServer(w.handler)
	srv.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			mu.Lock()
			closed[c.RemoteAddr().String()] = true
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()

	wantBody := "0032want " + tip + "\n0000" + "0009done\n"
	for _, req := range []string{
		"GET /api/v1/repos/empty/blob/main/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + w.admin + "\r\n\r\n",
		"GET /api/v1/repos/empty/archive/main HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + w.admin + "\r\n\r\n",
		"POST /git/empty.git/git-upload-pack HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + w.admin + "\r\nContent-Type: application/x-git-upload-pack-request\r\n" +
			fmt.Sprintf("Content-Length: %d\r\n\r\n", len(wantBody)) + wantBody,
	} {
		name := strings.SplitN(req, " HTTP", 2)[0]
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		// Never read. Wait (generously, not a timing assertion) until the
		// server has closed the connection.
		gone := false
		for i := 0; i < 12000 && !gone; i++ {
			mu.Lock()
			gone = closed[conn.LocalAddr().String()]
			mu.Unlock()
			if !gone {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if !gone {
			t.Fatalf("%s: a client that never reads was still connected after 2 minutes", name)
		}
		if strings.HasPrefix(name, "POST /git/") {
			var left []int
			for i := 0; i < 6000; i++ {
				if left = uploadPacks(t); len(left) == 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Fatalf("%s: git upload-pack still running (pids %v) after its client was disconnected", name, left)
			}
		}
	}
}
