package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/internal/e2ekit"
)

// dropProxy forwards TCP to target and, with probability p per chunk of
// answer, cuts the connection after relaying only part of it: the request
// reached the server, the answer is lost.
type dropProxy struct {
	ln      net.Listener
	target  string
	p       float64
	dropped atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func startProxy(t *testing.T, target string, p float64) *dropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &dropProxy{ln: ln, target: target, p: p, conns: map[net.Conn]bool{}}
	px.wg.Add(1)
	go func() {
		defer px.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			px.mu.Lock()
			px.conns[c] = true
			px.mu.Unlock()
			px.wg.Add(1)
			go func() {
				defer px.wg.Done()
				px.handle(c)
				px.mu.Lock()
				delete(px.conns, c)
				px.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		px.mu.Lock()
		for c := range px.conns {
			c.Close() // idle keep-alive connections of the clients
		}
		px.mu.Unlock()
		px.wg.Wait()
	})
	return px
}

func (px *dropProxy) URL() string { return "http://" + px.ln.Addr().String() }

func (px *dropProxy) handle(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", px.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		io.Copy(s, c)
		s.(*net.TCPConn).CloseWrite()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if rand.Float64() < px.p {
				c.Write(buf[:rand.IntN(n+1)]) // none, part or all of this chunk, then gone
				px.dropped.Add(1)
				return
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestDroppedAnswers: 1,000 writes through a proxy that drops about one
// answer in five, 952 through the Go client (check posts, a push every
// fifth) and 48 CLI pushes: every call succeeds, none ran twice, none was
// lost.
func TestDroppedAnswers(t *testing.T) {
	t.Parallel()
	// No background compaction: it races loose-object writes (a separate
	// bug, reported) and is not what this test is about.
	w := newWorld(t, e2ekit.ServerOpts{Args: []string{"--compact-packs", "0"}})
	s := w.s
	px := startProxy(t, s.HostPort, 0.2)
	retry := client.RetryPolicy{MaxAttempts: 40, BaseDelay: 2 * time.Millisecond, MaxDelay: 40 * time.Millisecond}
	newClient := func(key string) *client.Client {
		c := client.New(px.URL(), key)
		c.Retry = retry
		return c
	}
	ctx := context.Background()
	agent, ci := newClient(w.agent.Secret), newClient(w.ci.Secret)

	// Mostly check posts (one row and one log entry each) with a push
	// every fifth operation, so 1,000 operations stay quick under -race.
	const goWorkers, goOps = 4, 238
	const cliWorkers, cliOps = 2, 24
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, goWorkers*goOps+cliWorkers*cliOps)
	pushes := make([]int, goWorkers)
	checked := make([][]string, goWorkers)
	for i := 0; i < goWorkers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ws := fmt.Sprintf("go-%d", i)
			f, err := agent.Fork(ctx, "shop", ws)
			if err != nil {
				errs <- fmt.Errorf("fork %s: %w", ws, err)
				return
			}
			prev := f.BaseCommit
			for op := 0; op < goOps; op++ {
				if op%5 != 0 {
					var out struct {
						ID int64 `json:"id"`
					}
					_, err := ci.Request(ctx, http.MethodPost, "/api/v1/repos/"+ws+"/commits/"+prev+"/checks", nil,
						map[string]string{"name": fmt.Sprintf("c%d", op), "status": "success"}, "", &out)
					if err != nil || out.ID == 0 {
						errs <- fmt.Errorf("%s op %d: check: %v (id %d)", ws, op, err, out.ID)
						return
					}
					checked[i] = append(checked[i], prev+"\x00"+fmt.Sprintf("c%d", op))
					continue
				}
				tarball := e2ekit.TarOf(t, map[string]string{"README": "shop\n", "n.txt": fmt.Sprintf("%s %d\n", ws, op)})
				res, err := agent.PushTar(ctx, ws, bytes.NewReader(tarball), client.WriteOptions{ExpectOID: prev})
				if err != nil {
					errs <- fmt.Errorf("%s op %d: push: %w", ws, op, err)
					return
				}
				if !res.Changed || res.Parent != prev {
					errs <- fmt.Errorf("%s op %d: push answered %+v, want a new commit on %s", ws, op, res, prev)
					return
				}
				prev = res.Commit
				pushes[i]++
			}
			t.Logf("%s done after %s", ws, time.Since(t0))
		}(i)
	}

	cliPushes := make([]int, cliWorkers)
	for i := 0; i < cliWorkers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ws := fmt.Sprintf("cli-%d", i)
			if _, err := agent.Fork(ctx, "shop", ws); err != nil {
				errs <- fmt.Errorf("fork %s: %w", ws, err)
				return
			}
			dir, cache := t.TempDir(), t.TempDir()
			os.WriteFile(filepath.Join(dir, "README"), []byte("shop\n"), 0o644)
			for op := 0; op < cliOps; op++ {
				os.WriteFile(filepath.Join(dir, "n.txt"), []byte(fmt.Sprintf("%s %d\n", ws, op)), 0o644)
				cmd := exec.Command(e2ekit.Binary, "push", dir, "--repo", ws, "--branch", "main", "--expect-current", "--json")
				cmd.Env = append(e2ekit.CleanEnv(), "LOCKSTEP_URL="+px.URL(), "LOCKSTEP_KEY="+w.agent.Secret,
					"XDG_CACHE_HOME="+cache, "LOCKSTEP_RETRIES=40", "LOCKSTEP_RETRY_DELAY=2ms")
				var out, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &stderr
				if err := cmd.Run(); err != nil {
					errs <- fmt.Errorf("%s op %d: lockstep push: %v\nstdout %s\nstderr %s", ws, op, err, out.String(), stderr.String())
					return
				}
				// One JSON report, naming the commit the push made.
				dec := json.NewDecoder(&out)
				var rep struct {
					Commit  string `json:"commit"`
					Changed bool   `json:"changed"`
				}
				if err := dec.Decode(&rep); err != nil || !rep.Changed || len(rep.Commit) != 40 || dec.More() {
					errs <- fmt.Errorf("%s op %d: push printed %q (%v), want one report of a new commit", ws, op, out.String(), err)
					return
				}
				cliPushes[i]++
			}
			t.Logf("%s done after %s", ws, time.Since(t0))
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d answers dropped by the proxy", px.dropped.Load())
	if px.dropped.Load() < 50 {
		t.Fatalf("only %d answers dropped: the proxy did not test anything", px.dropped.Load())
	}

	es := oplog(t, s)
	count := func(op, repo string) (n int) {
		for _, e := range es {
			if e.Op == op && e.Repo == repo && e.Result == "ok" {
				n++
			}
		}
		return n
	}
	total := 0
	for i := 0; i < goWorkers; i++ {
		ws := fmt.Sprintf("go-%d", i)
		if n := count("push", ws); n != pushes[i] {
			t.Errorf("%s: %d push entries, %d pushes answered", ws, n, pushes[i])
		}
		if n := count("check", ws); n != len(checked[i]) {
			t.Errorf("%s: %d check entries, %d checks answered", ws, n, len(checked[i]))
		}
		if n := len(s.Commits(t, ws, "", 1000)); n != pushes[i]+1 {
			t.Errorf("%s: %d commits, want %d", ws, n, pushes[i]+1)
		}
		total += pushes[i] + len(checked[i])
	}
	for i := 0; i < cliWorkers; i++ {
		ws := fmt.Sprintf("cli-%d", i)
		if n := count("push", ws); n != cliPushes[i] {
			t.Errorf("%s: %d push entries, %d CLI pushes", ws, n, cliPushes[i])
		}
		if n := len(s.Commits(t, ws, "", 1000)); n != cliPushes[i]+1 {
			t.Errorf("%s: %d commits, want %d", ws, n, cliPushes[i]+1)
		}
		total += cliPushes[i]
	}
	if total != goWorkers*goOps+cliWorkers*cliOps {
		t.Errorf("%d operations done, want %d", total, goWorkers*goOps+cliWorkers*cliOps)
	}
	replays := 0
	for _, e := range es {
		replays += e.Replays
	}
	t.Logf("%d replays recorded in the operations log", replays)
	if v := s.Verify(t); !v.OK {
		t.Fatalf("oplog chain: %+v", v)
	}
}

var _ = lockstep.ZeroOID
