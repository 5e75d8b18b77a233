package bench

// Fleet rows of lockstep bench: the routes an agent fleet leans on, with
// 0, 1,000 and 10,000 workspaces forked from one repository. Self-contained
// (plain HTTP against the bench server) so that it moves with bench.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// ParseFleetSizes reads the --fleet flag: comma-separated ascending workspace
// counts from 0 to 100,000.
func ParseFleetSizes(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n > 100000 || len(out) > 0 && n <= out[len(out)-1] {
			return nil, lockstep.Errorf(lockstep.EINVALID, "bench: --fleet %q: want ascending workspace counts from 0 to 100000, such as 0,1000,10000", v)
		}
		out = append(out, n)
	}
	return out, nil
}

// FleetRowNames are the fleet rows, one per route and size.
func FleetRowNames(sizes []int) []string {
	var out []string
	for _, n := range sizes {
		for _, r := range []string{"list-page-100", "refs", "fork", "git-advertise", "git-ls-refs", "preflight"} {
			out = append(out, fmt.Sprintf("fleet-%s@%d", r, n))
		}
	}
	return out
}

// benchFleet creates one repository, then grows its fork network to each
// size through the API (POST …/forks, 8 at a time: ~1 ms each) and
// measures, on one workspace: a page of 100 of the listing, its refs, a
// fork, its git ref advertisement (v0 info/refs and v2 ls-refs), and a
// preflight of the base's main into it. Every route should cost the same
// at every size.
func (b *bencher) benchFleet() error {
	s, err := b.server(true)
	if err != nil {
		return err
	}
	base := b.name("fleet")
	call := func(method, path, body string) error {
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(b.ctx, method, s.url+path, rd)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+s.key)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if strings.HasSuffix(path, "/git-upload-pack") {
			req.Header.Set("Content-Type", "application/x-git-upload-pack-request")
			req.Header.Set("Git-Protocol", "version=2")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
		}
		return nil
	}
	if err := call("POST", "/api/v1/repos", fmt.Sprintf(`{"name":%q}`, base)); err != nil {
		return err
	}
	if err := call("POST", "/api/v1/repos/"+base+"/edits", `{"branch":"main","force":true,"edits":[{"op":"write","path":"README.md","content":"fleet\n"}]}`); err != nil {
		return err
	}
	lsRefs := "0014command=ls-refs\n0001000csymrefs\n0009peel\n0000"
	created := 0
	for _, size := range b.o.fleetSizes {
		t0 := time.Now()
		if err := b.fleetGrow(call, base, created, size); err != nil {
			return err
		}
		if size > created {
			b.logf("fleet: %d workspaces forked through the API in %s", size-created, time.Since(t0).Round(time.Millisecond))
			created = size
		}
		target := base
		if size > 0 {
			target = fmt.Sprintf("%s-ws-%05d", base, 0)
		}
		forks := 0
		for _, x := range []struct {
			row  string
			note string
			f    func() error
		}{
			{"list-page-100", "GET /repos/{base}/workspaces?limit=100", func() error {
				return call("GET", "/api/v1/repos/"+base+"/workspaces?limit=100", "")
			}},
			{"refs", "GET /repos/{ws}/refs", func() error { return call("GET", "/api/v1/repos/"+target+"/refs", "") }},
			{"fork", "POST /repos/{base}/forks", func() error {
				forks++
				return call("POST", "/api/v1/repos/"+base+"/forks", fmt.Sprintf(`{"name":"%s-b%d-%d"}`, base, size, forks))
			}},
			{"git-advertise", "GET /git/{ws}.git/info/refs?service=git-upload-pack (protocol v0)", func() error {
				return call("GET", "/git/"+target+".git/info/refs?service=git-upload-pack", "")
			}},
			{"git-ls-refs", "POST /git/{ws}.git/git-upload-pack command=ls-refs (protocol v2)", func() error {
				return call("POST", "/git/"+target+".git/git-upload-pack", lsRefs)
			}},
			{"preflight", "POST /repos/{ws}/merges preflight of base:main", func() error {
				return call("POST", "/api/v1/repos/"+target+"/merges", fmt.Sprintf(`{"ours":"main","theirs":"%s:main","preflight":true}`, base))
			}},
		} {
			name := fmt.Sprintf("fleet-%s@%d", x.row, size)
			var hf []float64
			d, err := b.measure(name, 3, b.o.iters*2, func(int) (time.Duration, error) { return timed(s, &hf, x.f) })
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			r := b.add(&benchRow{Name: name, Size: fmt.Sprintf("%d workspaces", size), LS: d, Target: "< 5 ms; flat across sizes"})
			r.check("≥ 5 ms", d.Median < 5)
			r.note("%s; %s", x.note, handlerNote(hf, 3))
		}
	}
	return nil
}

// fleetGrow forks workspaces from..to-1 of base, 8 requests at a time.
func (b *bencher) fleetGrow(call func(method, path, body string) error, base string, from, to int) error {
	jobs := make(chan int)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := call("POST", "/api/v1/repos/"+base+"/forks", fmt.Sprintf(`{"name":"%s-ws-%05d"}`, base, i)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop || b.ctx.Err() != nil {
			break
		}
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return first
	}
	return b.ctx.Err()
}
