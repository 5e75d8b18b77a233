package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
)

// buildEgress builds lockstep-egress into a temporary directory.
func buildEgress(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds lockstep-egress")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), egressBinaryName)
	cmd := exec.Command("go", "build", "-o", bin, "../lockstep-egress")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/lockstep-egress: %v\n%s", err, out)
	}
	return bin
}

func envWith(vars map[string]string, stderr io.Writer) *env {
	return &env{getenv: func(k string) string { return vars[k] }, stdout: io.Discard, stderr: stderr}
}

// TestEgressFlags: the mode defaults (stage with a server, off without),
// bad modes and stage without a server are clear errors, and the
// command's environment names the proxy (a lockstep-egress child) and
// leaves only the server's host:port unproxied; closing the child's
// stdin stops it, reporting what it staged.
func TestEgressFlags(t *testing.T) {
	bin := buildEgress(t)
	var stderr bytes.Buffer
	e := envWith(map[string]string{"LOCKSTEP_EGRESS_BINARY": bin}, &stderr)
	cf := &clientFlags{url: "http://lockstep.internal:7070"}
	c := client.New(cf.url, "lsk_secret_of_the_test")
	if _, err := (&egressFlags{mode: "sometimes"}).start(e, c, cf, "ws", false); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("bad mode: %v", err)
	}
	if _, err := (&egressFlags{mode: "deny"}).start(e, nil, cf, "", true); lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), "--no-server") {
		t.Fatalf("deny without a server: %v", err)
	}
	px, err := (&egressFlags{}).start(e, nil, cf, "", true)
	if err != nil || px != nil {
		t.Fatalf("default without a server: %v %v", px, err)
	}
	px, err = (&egressFlags{intercept: true, maxBody: egressDefaultMaxBody}).start(e, c, cf, "ws", false)
	if err != nil || px == nil {
		t.Fatalf("default with a server: %v", err)
	}
	for _, a := range px.cmd.Args {
		if strings.Contains(a, c.Key) {
			t.Errorf("the key is on the command line: %q", px.cmd.Args)
		}
	}
	env, err := px.wait(context.Background(), []string{"HTTPS_PROXY=http://corp:3128", "NO_PROXY=*"})
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, stderr.String())
	}
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s set twice", k)
		}
		got[k] = v
	}
	// The proxy's address carries the run's credentials (it answers 407
	// without them).
	if u, err := url.Parse(got["HTTPS_PROXY"]); err != nil || u.Scheme != "http" || u.User.Username() != "lockstep" || !strings.HasPrefix(u.Host, "127.0.0.1:") || got["http_proxy"] != got["HTTPS_PROXY"] || got["NO_PROXY"] != "lockstep.internal:7070" ||
		got["LOCKSTEP_RUN_ID"] != px.runID || !strings.HasPrefix(px.runID, "run_") || got["SSL_CERT_FILE"] == "" {
		t.Fatalf("env %v", got)
	}
	if _, err := os.Stat(got["SSL_CERT_FILE"]); err != nil {
		t.Errorf("CA bundle: %v", err)
	}
	staged, err := px.stop()
	if err != nil || len(staged) != 0 {
		t.Errorf("stop: %v %v\n%s", staged, err, stderr.String())
	}
	if _, err := os.Stat(got["SSL_CERT_FILE"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CA bundle after stop: %v", err)
	}
}

// TestFindEgress: LOCKSTEP_EGRESS_BINARY names the egress build (a
// missing file is a clear error); without one the server build found as
// findServer would is used as `lockstep-server __egress`; with neither
// (and no source to build from) the error says what to install.
func TestFindEgress(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "egr")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir) // no lockstep-egress, lockstep-server or go on it
	if got, err := findEgress(envWith(map[string]string{"LOCKSTEP_EGRESS_BINARY": bin}, io.Discard)); err != nil || len(got) != 1 || got[0] != bin {
		t.Errorf("findEgress = %q, %v; want %q", got, err, bin)
	}
	_, err := findEgress(envWith(map[string]string{"LOCKSTEP_EGRESS_BINARY": filepath.Join(dir, "missing")}, io.Discard))
	if lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), "LOCKSTEP_EGRESS_BINARY") {
		t.Errorf("missing egress binary: %v", err)
	}
	if got, err := findEgress(envWith(map[string]string{"LOCKSTEP_SERVER_BINARY": bin}, io.Discard)); err != nil || strings.Join(got, " ") != bin+" __egress" {
		t.Errorf("findEgress with only a server build = %q, %v", got, err)
	}
	_, err = findEgress(envWith(nil, io.Discard))
	if lockstep.ErrorCode(err) != lockstep.ENOTCONFIGURED || !strings.Contains(err.Error(), "lockstep-egress") || !strings.Contains(err.Error(), "--egress off") {
		t.Errorf("no egress build: %v", err)
	}
}

// TestEgressChildDiesWithParent: a parent (this test binary, started
// again as one) starts the proxy's process and is killed with SIGKILL:
// the proxy's process does not outlive it.
func TestEgressChildDiesWithParent(t *testing.T) {
	if os.Getenv("LOCKSTEP_TEST_EGRESS_PARENT") == "1" {
		egressParent()
		return
	}
	bin := buildEgress(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEgressChildDiesWithParent$")
	cmd.Env = append(os.Environ(), "LOCKSTEP_TEST_EGRESS_PARENT=1", "LOCKSTEP_EGRESS_BINARY="+bin)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscanf(out, "child %d\n", &pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the parent did not start the proxy: %v", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the proxy's process %d is not running: %v", pid, err)
	}
	cmd.Process.Kill() // kill -9 the parent
	cmd.Wait()
	// The child is the parent's, now reparented: it is gone once it has
	// exited and been reaped (by init or a subreaper). A generous bound
	// only so a failure does not hang the suite.
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the proxy's process %d outlived its parent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// egressParent is TestEgressChildDiesWithParent's parent: it starts the
// proxy, prints its pid and waits to be killed.
func egressParent() {
	e := envWith(map[string]string{"LOCKSTEP_EGRESS_BINARY": os.Getenv("LOCKSTEP_EGRESS_BINARY")}, os.Stderr)
	cf := &clientFlags{url: "http://127.0.0.1:1"}
	px, err := (&egressFlags{mode: "stage", maxBody: egressDefaultMaxBody}).start(e, client.New(cf.url, "k"), cf, "ws", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := px.wait(context.Background(), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("child " + strconv.Itoa(px.cmd.Process.Pid))
	select {}
}

// alive reports whether pid is a process that has not exited (a zombie
// nobody reaped yet has).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
