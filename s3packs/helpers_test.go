package s3packs

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// mustStore opens a Store on a fresh bucket of the test S3 server.
func mustStore(tb testing.TB) (*Store, testenv.S3Server, string) {
	tb.Helper()
	srv, bucket := testenv.MustS3Bucket(tb)
	s, err := Open(context.Background(), configFor(srv, bucket, "lockstep/test"))
	if err != nil {
		tb.Fatalf("open: %v", err)
	}
	return s, srv, bucket
}

func configFor(srv testenv.S3Server, bucket, prefix string) Config {
	return Config{
		Bucket: bucket, Prefix: prefix, Endpoint: srv.Endpoint, Region: "us-east-1",
		Insecure: !srv.Secure, Timeout: 5 * time.Second,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	}
}

// makePack writes a real git pack holding one blob of size random bytes
// per size given (random: incompressible, so the pack is as large), with
// its index, and returns its hash and paths.
func makePack(tb testing.TB, sizes ...int) (hash, packPath, idxPath string) {
	tb.Helper()
	git := testenv.GitBinary(tb)
	dir := tb.TempDir()
	run := func(stdin []byte, args ...string) string {
		tb.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Stdin = bytes.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tb.Fatalf("git %v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	run(nil, "init", "-q", "--bare", ".")
	var ids []string
	for i, n := range sizes {
		f := filepath.Join(dir, fmt.Sprintf("blob%d", i))
		data := make([]byte, n)
		rand.Read(data)
		if err := os.WriteFile(f, data, 0o644); err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, run(nil, "hash-object", "-w", f))
		os.Remove(f)
	}
	hash = run([]byte(strings.Join(ids, "\n")+"\n"), "pack-objects", "-q", filepath.Join(dir, "out"))
	return hash, filepath.Join(dir, "out-"+hash+".pack"), filepath.Join(dir, "out-"+hash+".idx")
}
