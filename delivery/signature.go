package delivery

import (
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// WebhookKey is the HMAC key of a hook secret in the Standard Webhooks
// scheme: a "whsec_" secret is the base64 of the key bytes (what the
// Standard Webhooks libraries expect); any other secret is used as its
// bytes. client.VerifyWebhook applies the same rule.
func WebhookKey(secret string) []byte {
	if rest, ok := strings.CutPrefix(secret, "whsec_"); ok {
		if k, err := base64.StdEncoding.DecodeString(rest); err == nil && len(k) > 0 {
			return k
		}
	}
	return []byte(secret)
}

// SignStandard returns one "v1,<base64 HMAC-SHA256(id.timestamp.body)>"
// entry of a webhook-signature header (Standard Webhooks 1.0).
func SignStandard(secret, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, WebhookKey(secret))
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// NewSecret returns a random Standard Webhooks secret ("whsec_" + base64
// of 32 random bytes).
func NewSecret() string {
	b := make([]byte, 32)
	crand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// Sign returns the X-Lockstep-Signature value of a body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature in constant time (for receivers such as the
// runner).
func Verify(secret string, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

// Body is the exact JSON sent for a delivery: its payload plus its id.
// Retries send the same bytes.
func Body(d lockstep.Delivery) []byte {
	var m map[string]any
	json.Unmarshal([]byte(d.Payload), &m)
	if m == nil {
		m = map[string]any{}
	}
	m["delivery_id"] = d.ID
	b, _ := json.Marshal(m)
	return b
}
