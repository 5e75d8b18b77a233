package delivery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// TestHookURLRefusesInternalTargets: every internal, special or
// credential-bearing target is refused at registration with
// invalid_argument; public addresses and allowed hosts pass.
func TestHookURLRefusesInternalTargets(t *testing.T) {
	ctx := context.Background()
	none, _ := ParseAllowList("")
	refused := []string{
		"http://127.0.0.1:8080/hook",
		"http://127.1.2.3/",
		"http://localhost/hook",
		"http://api.localhost/hook",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://172.16.5.4/",
		"http://172.31.255.255/",
		"http://192.168.1.1/",
		"http://100.64.0.1/",
		"http://0.0.0.0/",
		"http://224.0.0.1/",
		"http://255.255.255.255/",
		"http://[::1]/",
		"http://[::]/",
		"http://[fc00::1]/",
		"http://[fd12:3456::1]/",
		"http://[fe80::1]/",
		"http://[ff02::1]/",
		"http://[::ffff:127.0.0.1]/",
		"http://[::ffff:169.254.169.254]/",
		"http://[::ffff:a9fe:a9fe]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://2130706433/",
		"http://0x7f.1/",
		"http://127.1/",
		"https://user:pass@ci.example.com/hook",
		"https://token@ci.example.com/hook",
		"ftp://ci.example.com/",
		"/relative",
	}
	for _, u := range refused {
		err := CheckHookURL(ctx, u, none, nil)
		if lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("%s: %v, want invalid_argument", u, err)
		}
		if err != nil && strings.Contains(err.Error(), "pass@") {
			t.Errorf("%s: the error repeats the password: %v", u, err)
		}
	}
	for _, u := range []string{"https://8.8.8.8/hook", "http://[2606:4700::1111]/", "https://203.0.114.1:8443/x"} {
		if err := CheckHookURL(ctx, u, none, nil); err != nil {
			t.Errorf("%s: %v, want accepted", u, err)
		}
	}
	allow, err := ParseAllowList("127.0.0.1, ci.internal,10.1.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://127.0.0.1:9/h", "http://CI.internal./h", "http://10.1.2.3/h", "http://[::ffff:127.0.0.1]:9/h"} {
		if err := CheckHookURL(ctx, u, allow, nil); err != nil {
			t.Errorf("%s with the allow list: %v", u, err)
		}
	}
	if err := CheckHookURL(ctx, "http://10.2.0.1/h", allow, nil); lockstep.ErrorCode(err) != lockstep.EINVALID {
		t.Errorf("10.2.0.1 is outside the allowed prefix: %v", err)
	}
	if _, err := ParseAllowList("http://x/"); err == nil {
		t.Error("an allow list entry with a scheme should not parse")
	}
}

// TestHookURLEmbeddedIPv4: IPv4-compatible (::a.b.c.d, the deprecated
// ::/96 form) and IPv4-mapped (::ffff:a.b.c.d) IPv6 hosts are judged like
// the IPv4 address they carry, at registration and when dialed; an allow
// list entry matches whichever form is written.
func TestHookURLEmbeddedIPv4(t *testing.T) {
	ctx := context.Background()
	none, _ := ParseAllowList("")
	for _, c := range []struct {
		url    string
		accept bool
	}{
		{"http://[::127.0.0.1]/", false},
		{"http://[::7f00:1]/", false},
		{"http://[::127.1.2.3]:8080/h", false},
		{"http://[::169.254.169.254]/", false},
		{"http://[::a9fe:a9fe]/", false},
		{"http://[::10.0.0.1]/", false},
		{"http://[::192.168.1.1]/", false},
		{"http://[::100.64.0.1]/", false},
		{"http://[::0.0.0.0]/", false},
		{"http://[::224.0.0.1]/", false},
		{"http://[::ffff:10.0.0.1]/", false},
		{"http://[::ffff:192.168.1.1]/", false},
		{"http://[::ffff:0.0.0.0]/", false},
		{"http://[::8.8.8.8]/", true},
		{"http://[::ffff:8.8.8.8]/", true},
		{"http://[::1:0:0:1]/", true}, // outside ::/96: not an embedded address
	} {
		err := CheckHookURL(ctx, c.url, none, nil)
		if c.accept && err != nil {
			t.Errorf("%s: %v, want accepted", c.url, err)
		}
		if !c.accept && lockstep.ErrorCode(err) != lockstep.EINVALID {
			t.Errorf("%s: %v, want invalid_argument", c.url, err)
		}
	}
	for _, s := range []string{"::127.0.0.1", "::ffff:169.254.169.254", "::10.0.0.1"} {
		if why := internalAddr(netip.MustParseAddr(s)); why == "" {
			t.Errorf("the delivery dialer would connect to %s", s)
		}
	}
	allow, err := ParseAllowList("::127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://127.0.0.1:9/h", "http://[::127.0.0.1]:9/h", "http://[::ffff:127.0.0.1]:9/h"} {
		if err := CheckHookURL(ctx, u, allow, nil); err != nil {
			t.Errorf("%s with ::127.0.0.1 allowed: %v", u, err)
		}
	}
}

// TestHookDeliveryChecksDialedAddress: the delivery client checks the
// address it actually connects to, after DNS, so a name that resolves to
// an internal address at delivery time (DNS rebinding: it resolved to a
// public one at registration) is refused, while a host allowed by name or
// address connects. Redirects are never followed.
func TestHookDeliveryChecksDialedAddress(t *testing.T) {
	hits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer target.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/moved", http.StatusFound)
	}))
	defer redirect.Close()
	port := target.URL[strings.LastIndexByte(target.URL, ':'):]

	none, _ := ParseAllowList("")
	guarded, _ := targetClients(5*time.Second, none, "--hook-allow-hosts")
	// "localhost" resolves to loopback: what a rebinding name does.
	for _, u := range []string{"http://localhost" + port + "/", target.URL + "/"} {
		_, err := guarded.Get(u)
		var be *blockedError
		if !errors.As(err, &be) {
			t.Errorf("GET %s through the guarded client: %v, want refused at dial", u, err)
		}
	}
	if hits != 0 {
		t.Fatalf("BUG: the internal receiver was reached %d times", hits)
	}

	allow, _ := ParseAllowList("127.0.0.1")
	guarded, _ = targetClients(5*time.Second, allow, "--hook-allow-hosts")
	resp, err := guarded.Get(redirect.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || hits != 0 {
		t.Errorf("redirect: status %d, target hits %d; want 302 answered as is and no hit", resp.StatusCode, hits)
	}
	resp, err = guarded.Get(target.URL + "/")
	if err != nil || resp.StatusCode != 200 || hits != 1 {
		t.Fatalf("allowed address: %v %v hits=%d", resp, err, hits)
	}
	resp.Body.Close()
}
