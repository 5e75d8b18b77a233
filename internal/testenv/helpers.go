package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// hint says what to do when a test cannot reach service (postgres, redis or
// versitygw) at rawURL. Under scripts/test (which lists the throwaway
// helpers it started in the file named by LOCKSTEP_TEST_HELPERS) it says
// what is true: the helper serving that URL died (scripts/test names it and
// keeps its log), or it runs but refused, or scripts/test found the server
// already running and did not start it. Otherwise it is def: how to get the
// services.
func hint(service, rawURL, def string) string {
	file := os.Getenv("LOCKSTEP_TEST_HELPERS")
	if file == "" {
		return def
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Sprintf("scripts/test's list of the helpers it started (%s) is gone: %v; the run is probably over or was cut short", file, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// name pid url log
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 || fs[0] != service || !sameHost(fs[2], rawURL) {
			continue
		}
		pid, _ := strconv.Atoi(fs[1])
		if !alive(pid) {
			return fmt.Sprintf("the throwaway %s that scripts/test started for this URL (pid %d) has DIED: scripts/test names it in its output "+
				"and keeps its log (%s, copied to LOCKSTEP_TEST_LOG_DIR, default /tmp/lockstep-test-logs); look there for why it stopped", service, pid, fs[3])
		}
		return fmt.Sprintf("the throwaway %s that scripts/test started for this URL (pid %d) is running but did not answer; its log: %s", service, pid, fs[3])
	}
	return fmt.Sprintf("scripts/test did not start a %s for %s: it found one already answering there (or this test points elsewhere); is that server still running?", service, redact(rawURL))
}

// sameHost reports whether two service URLs name the same host:port (S3
// URLs carry keys, Postgres URLs a database: only the address matters).
func sameHost(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return ua.Host == ub.Host || hostOf(ua.Host) == hostOf(ub.Host)
}

// hostOf drops user info (for a bare host:port "endpoint").
func hostOf(h string) string {
	if i := strings.LastIndexByte(h, '@'); i >= 0 {
		return h[i+1:]
	}
	return h
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // no /proc: kill said it exists
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
