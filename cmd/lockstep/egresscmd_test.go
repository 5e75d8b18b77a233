package main

import (
	"strings"
	"testing"

	"github.com/lockstep-hq/lockstep"
	"github.com/lockstep-hq/lockstep/client"
)

// TestEgressFlags: the mode defaults (stage with a server, off without),
// bad modes and stage without a server are clear errors, and the
// command's environment names the proxy and leaves only the server's
// host:port unproxied.
func TestEgressFlags(t *testing.T) {
	cf := &clientFlags{url: "http://lockstep.internal:7070"}
	c := client.New(cf.url, "k")
	if _, _, err := (&egressFlags{mode: "sometimes"}).start(c, cf, "ws", false, nil); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Fatalf("bad mode: %v", err)
	}
	if _, _, err := (&egressFlags{mode: "deny"}).start(nil, cf, "", true, nil); lockstep.ErrorCode(err) != lockstep.EINVALID || !strings.Contains(err.Error(), "--no-server") {
		t.Fatalf("deny without a server: %v", err)
	}
	px, env, err := (&egressFlags{}).start(nil, cf, "", true, []string{"A=1"})
	if err != nil || px != nil || len(env) != 1 {
		t.Fatalf("default without a server: %v %v %v", px, env, err)
	}
	px, env, err = (&egressFlags{intercept: true}).start(c, cf, "ws", false, []string{"HTTPS_PROXY=http://corp:3128", "NO_PROXY=*"})
	if err != nil || px == nil {
		t.Fatalf("default with a server: %v", err)
	}
	defer px.px.Close()
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := got[k]; dup {
			t.Errorf("%s set twice", k)
		}
		got[k] = v
	}
	if got["HTTPS_PROXY"] != px.px.URL || got["http_proxy"] != px.px.URL || got["NO_PROXY"] != "lockstep.internal:7070" ||
		got["LOCKSTEP_RUN_ID"] != px.runID || !strings.HasPrefix(px.runID, "run_") || got["SSL_CERT_FILE"] == "" {
		t.Fatalf("env %v", got)
	}
}
