package delivery

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterAndCap(t *testing.T) {
	for n := 1; n <= 8; n++ {
		want := time.Second << (n - 1)
		if want > 10*time.Second {
			want = 10 * time.Second
		}
		for i := 0; i < 50; i++ {
			d := Backoff(n, time.Second, 10*time.Second)
			if d < want*8/10 || d > want*12/10 {
				t.Fatalf("backoff(%d) = %s, want %s ±20%%", n, d, want)
			}
		}
	}
}

// TestSendClassifiesAnswers: the one attempt both outboxes make is an
// error unless the receiver answered 2xx; a redirect is answered as is
// (not followed); a dial refused for an internal address gives the
// refusal's reason without the transport's wrapping.
func TestSendClassifiesAnswers(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, "/elsewhere?sig=r3d1rs3cr3t", http.StatusFound)
		case "/gone":
			w.WriteHeader(http.StatusGone)
		}
	}))
	defer srv.Close()
	send := func(s *Sender, path string) (int, error) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return s.Send(req)
	}
	allow, _ := ParseAllowList("127.0.0.1")
	s := NewSender(5*time.Second, allow, "--hook-allow-hosts")
	if code, err := send(s, "/ok"); code != 200 || err != nil {
		t.Errorf("2xx: %d %v, want 200 and no error", code, err)
	}
	// The Location is shown as every target URL is: its query's values
	// redacted (a receiver may redirect to a signed URL).
	if code, err := send(s, "/moved"); code != 302 || err == nil || !strings.Contains(err.Error(), "redirects are not followed") ||
		strings.Contains(err.Error(), "r3d1rs3cr3t") || !strings.Contains(err.Error(), "/elsewhere?sig=") {
		t.Errorf("redirect: %d %v, want 302 and a redirect error naming the Location with its query redacted", code, err)
	}
	if code, err := send(s, "/gone"); code != 410 || err == nil || err.Error() != "receiver answered 410" {
		t.Errorf("4xx: %d %v, want 410 and \"receiver answered 410\"", code, err)
	}
	if hits != 3 {
		t.Fatalf("receiver hit %d times, want 3 (the redirect not followed)", hits)
	}
	none, _ := ParseAllowList("")
	code, err := send(NewSender(5*time.Second, none, "--effect-allow-hosts"), "/ok")
	if code != 0 || err == nil || !strings.HasPrefix(err.Error(), "refused to connect to 127.0.0.1") || !strings.Contains(err.Error(), "--effect-allow-hosts") {
		t.Errorf("internal target: %d %v, want the refusal naming --effect-allow-hosts", code, err)
	}
	if hits != 3 {
		t.Fatalf("BUG: the internal receiver was reached")
	}
}
