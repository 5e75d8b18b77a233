package s3packs

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/internal/testenv"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_SESSION_TOKEN": "TOK"}
	getenv := func(k string) string { return env[k] }
	c, err := ParseConfig("s3://packs/a/b/?endpoint=127.0.0.1:7070&region=eu-west-1&insecure=1&path_style=true&timeout=2s", getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Bucket: "packs", Prefix: "a/b", Endpoint: "127.0.0.1:7070", Region: "eu-west-1", Insecure: true,
		PathStyle: true, Timeout: 2 * time.Second, AccessKey: "AK", SecretKey: "SK", SessionToken: "TOK"}
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	c, err = ParseConfig("s3://packs", getenv)
	if err != nil || c.Endpoint != "s3.amazonaws.com" || c.Region != "us-east-1" || c.Insecure || c.Prefix != "" || c.Timeout != DefaultTimeout {
		t.Fatalf("defaults: %+v, %v", c, err)
	}

	for _, tc := range []struct{ raw, want string }{
		{"http://packs/x", `not scheme "http"`},
		{"s3://", "no bucket"},
		{"s3://Packs", "lowercase"},
		{"s3://ab", "3 to 63"},
		{"s3://packs/a//b", "empty, . or .. segment"},
		{"s3://packs/a/../b", "empty, . or .. segment"},
		{"s3://packs?endpoint=http://host:9000", "without scheme"},
		{"s3://packs?endpoint=host:99999", "bad port"},
		{"s3://packs?insecure=maybe", "want 1 or 0"},
		{"s3://packs?timeout=-1s", "positive duration"},
		{"s3://packs?bucket=x", `unknown query key "bucket"`},
		{"s3://packs?region=a&region=b", "given 2 times"},
		{"s3://AK:SK@packs", "credentials do not belong in the URL"},
		{"s3://packs/%zz", "not a URL"},
	} {
		_, err := ParseConfig(tc.raw, getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), Setting) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseConfig(%q) = %v, want one line starting %s and containing %q", tc.raw, err, Setting, tc.want)
		}
	}
	delete(env, "AWS_SECRET_ACCESS_KEY")
	if _, err := ParseConfig("s3://packs", getenv); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("missing secret: %v", err)
	}
}

// TestOpenFailures checks each start-up failure against a real server and
// its one-line message naming what to fix.
func TestOpenFailures(t *testing.T) {
	srv, bucket := testenv.MustS3Bucket(t)
	ctx := context.Background()
	good := configFor(srv, bucket, "p")
	if _, err := Open(ctx, good); err != nil {
		t.Fatalf("good config: %v", err)
	}

	unreachable := good
	unreachable.Endpoint = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	wrongKeys := good
	wrongKeys.SecretKey = "not-the-secret"
	unknownKey := good
	unknownKey.AccessKey = "nobody"
	noBucket := good
	noBucket.Bucket = "lockstep-no-such-bucket"
	// A server that accepts connections and never answers: Open must
	// give up after the timeout, not hang.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hangs := good
	hangs.Endpoint = silent.Addr().String()
	hangs.Timeout = time.Second

	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"unreachable", unreachable, []string{Setting, "unreachable within 5s", unreachable.Endpoint}},
		{"never answers", hangs, []string{Setting, "unreachable within 1s", hangs.Endpoint}},
		{"wrong secret", wrongKeys, []string{Setting, "rejected the credentials", "AWS_SECRET_ACCESS_KEY"}},
		{"unknown access key", unknownKey, []string{Setting, "rejected the credentials", "AWS_ACCESS_KEY_ID"}},
		{"missing bucket", noBucket, []string{Setting, `bucket "lockstep-no-such-bucket" does not exist`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(ctx, tc.cfg)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("message has several lines: %q", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
		})
	}

	t.Run("no write permission", func(t *testing.T) {
		own := testenv.StartS3(t)
		own.MakeBucket(t, "readonly-bucket")
		own.Restart(t, "--readonly")
		cfg := configFor(own.S3Server, "readonly-bucket", "p")
		_, err := Open(ctx, cfg)
		if err == nil {
			t.Fatal("Open on a read-only server succeeded")
		}
		msg := err.Error()
		for _, w := range []string{Setting, "no write permission", "write probe object"} {
			if !strings.Contains(msg, w) {
				t.Errorf("message %q lacks %q", msg, w)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("message has several lines: %q", msg)
		}
	})
}

// TestRoundTripBoundedHeap uploads and downloads a 50 MB pack and checks
// that neither holds it in memory.
func TestRoundTripBoundedHeap(t *testing.T) {
	s, _, _ := mustStore(t)
	ctx := context.Background()
	const size = 50 << 20
	h, packPath, idxPath := makePack(t, size)

	peak := func(f func() error) (uint64, error) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var max atomic.Uint64
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			var m runtime.MemStats
			for {
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > base && m.HeapAlloc-base > max.Load() {
					max.Store(m.HeapAlloc - base)
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}()
		err := f()
		close(stop)
		<-done
		return max.Load(), err
	}

	up, err := peak(func() error { return s.PutPack(ctx, "net1", h, packPath, idxPath) })
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	dst := t.TempDir()
	gotPack, gotIdx := filepath.Join(dst, "pack-"+h+".pack"), filepath.Join(dst, "pack-"+h+".idx")
	down, err := peak(func() error { return s.GetPack(ctx, "net1", h, gotPack, gotIdx) })
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	t.Logf("heap growth: put %d MiB, get %d MiB (pack %d MiB)", up>>20, down>>20, size>>20)
	const bound = 30 << 20 // part buffers (2 × 8 MiB) and client internals, well under the pack
	if up > bound || down > bound {
		t.Errorf("heap grew by put %d / get %d bytes, over %d: the pack was held in memory", up, down, bound)
	}
	for _, pair := range [][2]string{{packPath, gotPack}, {idxPath, gotIdx}} {
		a, _ := os.ReadFile(pair[0])
		b, err := os.ReadFile(pair[1])
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs from what was uploaded (%v)", pair[1], err)
		}
	}
}

func TestPutGetListDelete(t *testing.T) {
	s, srv, bucket := mustStore(t)
	ctx := context.Background()
	h1, p1, i1 := makePack(t, 4096)
	h2, p2, i2 := makePack(t, 100, 200)
	for _, p := range [][3]string{{h1, p1, i1}, {h2, p2, i2}} {
		if err := s.PutPack(ctx, "net-a", p[0], p[1], p[2]); err != nil {
			t.Fatalf("put %s: %v", p[0], err)
		}
	}
	// Written once: a second put of the same pack is a no-op, not an error.
	if err := s.PutPack(ctx, "net-a", h1, p1, i1); err != nil {
		t.Fatalf("second put: %v", err)
	}
	// A file that does not match its name is refused before any upload.
	if err := s.PutPack(ctx, "net-a", h2, p1, i1); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("put under the wrong name: %v", err)
	}
	if err := s.PutPack(ctx, "../x", h1, p1, i1); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("put to network ../x: %v", err)
	}

	list, err := s.ListPacks(ctx, "net-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || !list[0].Complete() || !list[1].Complete() || list[0].Hash > list[1].Hash {
		t.Fatalf("list: %+v", list)
	}
	if other, err := s.ListPacks(ctx, "net-b"); err != nil || len(other) != 0 {
		t.Fatalf("other network lists %+v, %v", other, err)
	}
	// The keys are where the package documents them.
	c := srv.Client(t)
	if _, err := c.StatObject(ctx, bucket, "lockstep/test/networks/net-a/pack-"+h1+".idx", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("documented key: %v", err)
	}

	dst := t.TempDir()
	if err := s.GetPack(ctx, "net-a", strings.Repeat("0", 40), filepath.Join(dst, "a.pack"), filepath.Join(dst, "a.idx")); lockstep.ErrorCode(err) != lockstep.ENOTFOUND {
		t.Fatalf("get missing pack: %v", err)
	}

	// Content that does not match its name (bit rot, a wrong upload) is
	// refused and leaves nothing behind.
	bad := strings.Repeat("f", 40) // sorts last
	data, _ := os.ReadFile(p1)
	if _, err := c.PutObject(ctx, bucket, "lockstep/test/networks/net-a/pack-"+bad+".pack", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	err = s.GetPack(ctx, "net-a", bad, filepath.Join(dst, "b.pack"), filepath.Join(dst, "b.idx"))
	if lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("get corrupt pack: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Fatalf("corrupt download left %v", ents)
	}
	list, _ = s.ListPacks(ctx, "net-a")
	if len(list) != 3 || list[2].Hash != bad || list[2].Complete() {
		t.Fatalf("list with an incomplete pack: %+v", list)
	}

	if err := s.DeletePack(ctx, "net-a", h1); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePack(ctx, "net-a", h1); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	list, _ = s.ListPacks(ctx, "net-a")
	for _, p := range list {
		if p.Hash == h1 {
			t.Fatalf("deleted pack still listed: %+v", list)
		}
	}
}

// TestServerStopped kills the server in the middle of a download and
// checks every operation then fails as unavailable, in bounded time.
func TestServerStopped(t *testing.T) {
	own := testenv.StartS3(t)
	own.MakeBucket(t, "stopped")
	s, err := Open(context.Background(), configFor(own.S3Server, "stopped", ""))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h, packPath, idxPath := makePack(t, 50<<20)
	if err := s.PutPack(ctx, "n", h, packPath, idxPath); err != nil {
		t.Fatal(err)
	}

	dst := t.TempDir()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		// Kill once the download has written its first megabyte.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			ents, _ := os.ReadDir(dst)
			for _, e := range ents {
				if fi, err := e.Info(); err == nil && fi.Size() > 1<<20 {
					own.Kill()
					return
				}
			}
		}
	}()
	err = s.GetPack(ctx, "n", h, filepath.Join(dst, "x.pack"), filepath.Join(dst, "x.idx"))
	<-killed
	if err == nil {
		t.Fatal("download finished although the server was killed during it")
	}
	if lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE && lockstep.ErrorCode(err) != lockstep.EINVALID {
		// A cut stream is either seen as a network failure or as a
		// short object; both must leave nothing behind.
		t.Errorf("mid-download kill: %v (code %s)", err, lockstep.ErrorCode(err))
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Errorf("interrupted download left %v", ents)
	}

	for name, op := range map[string]func() error{
		"put":    func() error { return s.PutPack(ctx, "n", h, packPath, idxPath) },
		"get":    func() error { return s.GetPack(ctx, "n", h, filepath.Join(dst, "y.pack"), filepath.Join(dst, "y.idx")) },
		"list":   func() error { _, err := s.ListPacks(ctx, "n"); return err },
		"delete": func() error { return s.DeletePack(ctx, "n", h) },
	} {
		if err := op(); lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
			t.Errorf("%s on a stopped server: %v, want unavailable", name, err)
		}
	}
}

// Ping (for /readyz) answers ok while the server is up and unavailable
// once it is gone.
func TestPing(t *testing.T) {
	own := testenv.StartS3(t)
	own.MakeBucket(t, "ping")
	s, err := Open(context.Background(), configFor(own.S3Server, "ping", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	own.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Ping(ctx); lockstep.ErrorCode(err) != lockstep.EUNAVAILABLE {
		t.Fatalf("ping with the server stopped: %v (code %q), want unavailable", err, lockstep.ErrorCode(err))
	}
}
