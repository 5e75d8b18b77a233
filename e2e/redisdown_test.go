package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep/internal/testenv"
)

// TestRedisDownWritesGoOn: issue 21 item 14, end to end. A replica whose
// Redis was killed keeps taking writes, and after the first failure it
// skips Redis (the breaker of --redis-cooldown) instead of dialing it on
// every write: each later write's change notification fails at once with
// the breaker's error. /readyz reports Redis unavailable.
func TestRedisDownWritesGoOn(t *testing.T) {
	t.Parallel()
	rd := testenv.StartRedis(t)
	w := newObjWorld(t, objOpts{S3: testenv.StartS3(t), Args: []string{"--redis-cooldown", "1h"}})
	w.env = append(w.env, "LOCKSTEP_REDIS_URL=redis://"+rd.Addr+"/0") // the last one wins
	s := w.add(t)
	s.CreateRepo(t, "rd")
	files := map[string]string{"a.txt": "a\n"}
	head := s.Push(t, w.adminKey, "rd", "", files).Commit

	rd.Kill()
	const writes = 4
	for i := range writes {
		files["a.txt"] = fmt.Sprintf("write %d with Redis down\n", i)
		head = s.Push(t, w.adminKey, "rd", head, files).Commit
	}
	log := s.Stderr.String()
	var sent, skipped int
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"msg":"object store: change notification not sent"`) {
			sent++
			if strings.Contains(line, "skipped after a recent failure") {
				skipped++
			}
		}
	}
	// A write publishes once per pack it registers (objects, commit):
	// at least one each; all but the first (which tripped the breaker,
	// unless the lost subscription did) skipped without a dial.
	if sent < writes || skipped < sent-1 {
		t.Errorf("%d writes with Redis down: %d failed notifications, %d of them skipped by the breaker; want at least %d, all but one skipped\n%s",
			writes, sent, skipped, writes, log)
	}
	r := s.Call(t, "GET", "/readyz", "", nil, "")
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), `"redis":"unavailable"`) {
		t.Errorf("readyz with Redis down: %s", r)
	}
}
