package delivery

import "testing"

func TestSignVerify(t *testing.T) {
	body := []byte(`{"event":"push"}`)
	sig := Sign("0123456789abcdef", body)
	if !Verify("0123456789abcdef", body, sig) {
		t.Fatal("own signature does not verify")
	}
	if Verify("0123456789abcdeX", body, sig) || Verify("0123456789abcdef", []byte(`{"event":"pull"}`), sig) || Verify("0123456789abcdef", body, "sha256=00") {
		t.Fatal("a wrong secret, body or signature verified")
	}
	// Known value: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
	if got := Sign("key", []byte("The quick brown fox jumps over the lazy dog")); got != "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8" {
		t.Fatalf("signature %s", got)
	}
}
