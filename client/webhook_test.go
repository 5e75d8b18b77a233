package client_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/lockstep-hq/lockstep/client"
	"github.com/lockstep-hq/lockstep/delivery"
)

func headers(id string, ts time.Time, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

// TestStandardWebhooksVector: the signature of the Standard Webhooks
// reference test vector, so any Standard Webhooks library verifies our
// deliveries and our verifier accepts theirs.
func TestStandardWebhooksVector(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	ts := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := delivery.SignStandard(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", ts, body); got != want {
		t.Errorf("SignStandard = %s, want %s", got, want)
	}
	if _, err := client.VerifyWebhook([]string{secret}, headers("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, want), body, ts, 0); err != nil {
		t.Errorf("VerifyWebhook of the reference vector: %v", err)
	}
}

// TestVerifyWebhook: a forged, tampered or stale delivery is refused; a
// delivery signed with either secret of a rotation is accepted; the
// replay cache refuses the same delivery twice and tells a sender's
// re-signed retry apart.
func TestVerifyWebhook(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event":"push","delivery_id":"dlv_1"}`)
	const oldS, newS = "old-secret-0123456789", "whsec_c2VjcmV0LWJ5dGVzLWZvci10aGUtbmV3LWtleQ=="
	both := delivery.SignStandard(newS, "dlv_1", now, body) + " " + delivery.SignStandard(oldS, "dlv_1", now, body)
	for _, secrets := range [][]string{{oldS}, {newS}, {newS, oldS}} {
		if _, err := client.VerifyWebhook(secrets, headers("dlv_1", now, both), body, now, 0); err != nil {
			t.Errorf("secrets %v with both signatures: %v", secrets, err)
		}
	}
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"wrong secret", headers("dlv_1", now, delivery.SignStandard("another-secret-xyz", "dlv_1", now, body)), body, client.ErrWebhookSignature},
		{"tampered body", headers("dlv_1", now, both), []byte(`{"event":"push","delivery_id":"dlv_2"}`), client.ErrWebhookSignature},
		{"other id", headers("dlv_2", now, both), body, client.ErrWebhookSignature},
		{"no headers", http.Header{}, body, client.ErrWebhookSignature},
		{"stale", headers("dlv_1", now.Add(-6*time.Minute), delivery.SignStandard(newS, "dlv_1", now.Add(-6*time.Minute), body)), body, client.ErrWebhookTimestamp},
		{"future", headers("dlv_1", now.Add(6*time.Minute), delivery.SignStandard(newS, "dlv_1", now.Add(6*time.Minute), body)), body, client.ErrWebhookTimestamp},
	}
	for _, c := range cases {
		if _, err := client.VerifyWebhook([]string{newS, oldS}, c.h, c.body, now, 0); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	rc := client.NewReplayCache(0, 0)
	w, err := client.VerifyWebhook([]string{newS}, headers("dlv_1", now, both), body, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Check(w, now); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := rc.Check(w, now.Add(time.Second)); !errors.Is(err, client.ErrWebhookReplayed) {
		t.Errorf("replay: %v, want ErrWebhookReplayed", err)
	}
	retry := client.Webhook{ID: w.ID, Timestamp: now.Add(30 * time.Second)}
	if err := rc.Check(retry, now.Add(30*time.Second)); !errors.Is(err, client.ErrWebhookDuplicate) {
		t.Errorf("sender's retry: %v, want ErrWebhookDuplicate", err)
	}
}
