package delivery

import "testing"

func TestSign(t *testing.T) {
	body := []byte(`{"event":"push"}`)
	sig := Sign("0123456789abcdef", body)
	if sig != Sign("0123456789abcdef", body) {
		t.Fatal("the same secret and body signed differently")
	}
	if Sign("0123456789abcdeX", body) == sig || Sign("0123456789abcdef", []byte(`{"event":"pull"}`)) == sig {
		t.Fatal("a different secret or body gave the same signature")
	}
	// Known value: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
	if got := Sign("key", []byte("The quick brown fox jumps over the lazy dog")); got != "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8" {
		t.Fatalf("signature %s", got)
	}
}
