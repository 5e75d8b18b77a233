package gate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
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
