package repositories_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/servicetest"
	"github.com/lockstep-hq/lockstep/repositories"
)

// BenchmarkGitPushRefs measures what a full-history git push costs after
// its pack is stored: the refs of a corpus bundle (echo, ~150 branches
// and tags; $LOCKSTEP_CORPUS) created in one GitPush whose objects are
// already in the network (each ref's objects checked, the ref
// transaction, the log entry, the on-disk mirror). Every iteration
// deletes them first, outside the timer.
func BenchmarkGitPushRefs(b *testing.B) {
	ctx := context.Background()
	dir := os.Getenv("LOCKSTEP_CORPUS")
	if dir == "" {
		b.Skip("LOCKSTEP_CORPUS not set")
	}
	bundle := filepath.Join(dir, "echo.bundle")
	data, err := os.ReadFile(bundle)
	if err != nil {
		b.Skip(err)
	}
	heads, err := exec.Command("git", "bundle", "list-heads", bundle).Output()
	if err != nil {
		b.Fatal(err)
	}
	w := servicetest.MustWorld(b, servicetest.Options{})
	w.MustRepo(b, "app", map[string]string{"a.txt": "a\n"})
	var create, remove []repositories.RefCommand
	sc := bufio.NewScanner(bytes.NewReader(heads))
	for sc.Scan() {
		oid, ref, ok := strings.Cut(sc.Text(), " ")
		if !ok || ref == "refs/heads/main" || !strings.HasPrefix(ref, "refs/heads/") && !strings.HasPrefix(ref, "refs/tags/") {
			continue
		}
		create = append(create, repositories.RefCommand{Ref: ref, Old: lockstep.ZeroOID, New: oid})
		remove = append(remove, repositories.RefCommand{Ref: ref, Old: oid, New: lockstep.ZeroOID})
	}
	push := func(cmds []repositories.RefCommand, pack []byte) {
		var r *bytes.Reader
		if pack != nil {
			r = bytes.NewReader(pack)
		}
		var unpackErr error
		var res []repositories.RefResult
		if r != nil {
			unpackErr, res, err = w.Repos.GitPush(ctx, w.Admin, "app", cmds, true, r)
		} else {
			unpackErr, res, err = w.Repos.GitPush(ctx, w.Admin, "app", cmds, true, nil)
		}
		if err != nil || unpackErr != nil {
			b.Fatal(err, unpackErr)
		}
		for _, x := range res {
			if x.Err != nil {
				b.Fatalf("%s: %v", x.Ref, x.Err)
			}
		}
	}
	push(create, data[bytes.Index(data, []byte("\n\nPACK"))+2:])
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var self time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		push(remove, nil)
		b.StartTimer()
		t0 := cpu()
		push(create, nil)
		self += cpu() - t0
	}
	b.ReportMetric(float64(self.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(len(create)), "refs")
}
