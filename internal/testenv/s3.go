package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is an S3-compatible server the tests can use.
type S3Server struct {
	// Endpoint is host:port, without scheme.
	Endpoint string
	// Secure is true for an https:// server.
	Secure bool
	// AccessKey and SecretKey are the server's credentials.
	AccessKey, SecretKey string
}

// s3Hint says how to get an S3 server for the tests.
const s3Hint = "run the tests through scripts/test, which starts a throwaway versitygw " +
	"(installing it with go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 if missing); " +
	"or set LOCKSTEP_TEST_S3_URL=http://ACCESS:SECRET@host:port to a running S3 server"

// S3 returns the test S3 server named by LOCKSTEP_TEST_S3_URL
// (http://ACCESS:SECRET@host:port, exported by scripts/test), or fails
// the test with instructions. It does not connect.
func S3(tb testing.TB) S3Server {
	tb.Helper()
	raw := os.Getenv("LOCKSTEP_TEST_S3_URL")
	if raw == "" {
		tb.Fatalf("testenv: LOCKSTEP_TEST_S3_URL is not set\n%s", s3Hint)
	}
	srv, err := parseS3URL(raw)
	if err != nil {
		tb.Fatalf("testenv: LOCKSTEP_TEST_S3_URL: %v", err)
	}
	return srv
}

func parseS3URL(raw string) (S3Server, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return S3Server{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return S3Server{}, fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" || u.User == nil {
		return S3Server{}, fmt.Errorf("want http://ACCESS:SECRET@host:port")
	}
	secret, _ := u.User.Password()
	return S3Server{Endpoint: u.Host, Secure: u.Scheme == "https", AccessKey: u.User.Username(), SecretKey: secret}, nil
}

// Client returns a minio client for the server.
func (s S3Server) Client(tb testing.TB) *minio.Client {
	tb.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Secure: s.Secure,
		Region: "us-east-1",
	})
	if err != nil {
		tb.Fatalf("testenv: s3 client for %s: %v", s.Endpoint, err)
	}
	return c
}

// MustS3Bucket creates a bucket unique to this test on the test S3 server
// ("lockstep-test-<hex>") and returns the server and the bucket's name.
// When the test ends every object in it is deleted, then the bucket. If the
// server is unreachable the test fails with instructions.
func MustS3Bucket(tb testing.TB) (S3Server, string) {
	tb.Helper()
	srv := S3(tb)
	c := srv.Client(tb)
	bucket := "lockstep-test-" + randomHex(tb, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		tb.Fatalf("testenv: create bucket %s on the S3 server at %s: %v\n%s", bucket, srv.Endpoint, err, hint("versitygw", "http://"+srv.Endpoint, s3Hint))
	}
	tb.Cleanup(func() {
		if err := removeBucket(c, bucket); err != nil {
			tb.Errorf("testenv: remove bucket %s: %v", bucket, err)
		}
	})
	return srv, bucket
}

// removeBucket deletes every object of bucket, then the bucket.
func removeBucket(c *minio.Client, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for obj := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		if err := c.RemoveObject(ctx, bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			return err
		}
	}
	return c.RemoveBucket(ctx, bucket)
}

// Versitygw returns the path of the versitygw binary, for tests that run
// their own server (to stop it mid-operation): LOCKSTEP_TEST_VERSITYGW
// (exported by scripts/test), else versitygw in PATH or in
// $(go env GOPATH)/bin. It fails the test with instructions if none exists.
func Versitygw(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("LOCKSTEP_TEST_VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(dir, "bin", "versitygw"); isExecutable(p) {
				return p
			}
		}
	}
	tb.Fatalf("testenv: versitygw not found (LOCKSTEP_TEST_VERSITYGW unset, not in PATH or GOPATH/bin)\n%s", s3Hint)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// OwnS3 is a versitygw server started for one test.
type OwnS3 struct {
	S3Server
	bin, dir string
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartS3 starts a versitygw of this test's own (posix backend in a temp
// dir, random keys, a free port) with the extra flags given, waits until
// it answers, and stops it when the test ends. Tests use it to stop the
// server mid-operation (Kill) or to restart it with other flags
// (Restart, e.g. --readonly).
func StartS3(tb testing.TB, flags ...string) *OwnS3 {
	tb.Helper()
	o := &OwnS3{
		S3Server: S3Server{AccessKey: "own-" + randomHex(tb, 4), SecretKey: randomHex(tb, 16)},
		bin:      Versitygw(tb),
		dir:      tb.TempDir(),
	}
	tb.Cleanup(o.Kill)
	o.start(tb, flags)
	return o
}

// Restart kills the server and starts it again on the same directory,
// keys and (if free) port, with flags.
func (o *OwnS3) Restart(tb testing.TB, flags ...string) {
	tb.Helper()
	o.Kill()
	o.start(tb, flags)
}

func (o *OwnS3) start(tb testing.TB, flags []string) {
	tb.Helper()
	data := filepath.Join(o.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		tb.Fatalf("testenv: %v", err)
	}
	logPath := filepath.Join(o.dir, "versitygw.log")
	for try := 0; try < 3; try++ {
		if o.Endpoint == "" || try > 0 {
			o.Endpoint = fmt.Sprintf("127.0.0.1:%d", FreePort(tb))
		}
		log, err := os.Create(logPath)
		if err != nil {
			tb.Fatalf("testenv: %v", err)
		}
		args := append([]string{"--quiet", "--access", o.AccessKey, "--secret", o.SecretKey, "--port", o.Endpoint}, flags...)
		cmd := exec.Command(o.bin, append(args, "posix", data)...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			log.Close()
			tb.Fatalf("testenv: start %s: %v", o.bin, err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); log.Close(); close(done) }()
		o.cmd, o.done = cmd, done
		if o.waitUp(tb, 10*time.Second) {
			return
		}
		o.Kill()
	}
	b, _ := os.ReadFile(logPath)
	tb.Fatalf("testenv: versitygw did not start:\n%s", b)
}

// waitUp polls the server until it lists its buckets or the process exits.
func (o *OwnS3) waitUp(tb testing.TB, timeout time.Duration) bool {
	tb.Helper()
	c := o.Client(tb)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-o.done:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.ListBuckets(ctx)
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// MakeBucket creates bucket on the server or fails the test.
func (o *OwnS3) MakeBucket(tb testing.TB, bucket string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.Client(tb).MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		tb.Fatalf("testenv: make bucket %s: %v", bucket, err)
	}
}

// Kill stops the server (SIGKILL) and waits for it to exit. Safe to call
// more than once.
func (o *OwnS3) Kill() {
	if o.cmd == nil {
		return
	}
	if o.cmd.Process != nil {
		o.cmd.Process.Kill()
	}
	<-o.done
}

// Freeze stops the server with SIGSTOP: it keeps its port and the kernel
// still accepts connections, but nothing answers (a hung server). Thaw
// (or Kill, which works on a stopped process) ends it.
func (o *OwnS3) Freeze(tb testing.TB) {
	tb.Helper()
	if err := o.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("testenv: freeze versitygw: %v", err)
	}
	// The signal is asynchronous: wait until every thread is stopped.
	task := fmt.Sprintf("/proc/%d/task", o.cmd.Process.Pid)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ents, err := os.ReadDir(task)
		stopped := err == nil && len(ents) > 0
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(task, e.Name(), "stat"))
			// stat is "pid (comm) STATE ...": the state follows the last ')'.
			if i := strings.LastIndexByte(string(b), ')'); err != nil || i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testenv: versitygw (pid %d) not stopped 10s after SIGSTOP", o.cmd.Process.Pid)
		}
	}
}

// Thaw resumes a server stopped by Freeze.
func (o *OwnS3) Thaw() {
	if o.cmd != nil && o.cmd.Process != nil {
		o.cmd.Process.Signal(syscall.SIGCONT)
	}
}
