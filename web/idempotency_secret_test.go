package web_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIdempotentAnswersNeverStoreSecrets: for every route whose answer
// (or request) carries a secret — key create, hook create, hook rotate —
// the idempotency record read back from the database holds no secret,
// and a replay answers without it, saying it was withheld.
func TestIdempotentAnswersNeverStoreSecrets(t *testing.T) {
	f := mustServer(t)
	if st, _, _ := f.do(t, "POST", "/api/v1/repos", f.admin, `{"name":"shop"}`); st != http.StatusCreated {
		t.Fatalf("create repo: %d", st)
	}
	// call sends a request under an Idempotency-Key and returns the status,
	// the raw body and whether it was a replay.
	call := func(path, body, key string) (int, []byte, bool) {
		t.Helper()
		req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.admin)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true"
	}
	// stored waits for the record of key to be done and returns its body.
	stored := func(key string) []byte {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var state string
			var body []byte
			err := f.db.SQL().QueryRow(`SELECT state, body FROM idempotency_keys WHERE idem_key = $1`, key).Scan(&state, &body)
			if err == nil && state == "done" {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("idempotency record %s not done: state %q, %v", key, state, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Key create: the server makes the secret and answers it once.
	st, b, _ := call("/api/v1/keys", `{"name":"ci-bot","role":"ci"}`, "k-key")
	var created struct{ Secret string }
	if err := json.Unmarshal(b, &created); st != http.StatusCreated || err != nil || created.Secret == "" {
		t.Fatalf("key create: %d %s", st, b)
	}
	keySecret := created.Secret

	// Hook create: the caller sends the secret; the answer never shows it.
	hookSecret := "hook-create-secret-0123456789"
	st, b, _ = call("/api/v1/repos/shop/hooks", `{"url":"https://8.8.8.8/hook","secret":"`+hookSecret+`"}`, "k-hook")
	var hook struct{ ID string }
	if err := json.Unmarshal(b, &hook); st != http.StatusCreated || err != nil || hook.ID == "" {
		t.Fatalf("hook create: %d %s", st, b)
	}
	if bytes.Contains(b, []byte(hookSecret)) {
		t.Fatalf("hook create answers its secret: %s", b)
	}

	// Hook rotate: the server makes the new secret and answers it once
	// (the CLI always sends a key, so this is every CLI rotation).
	st, b, _ = call("/api/v1/repos/shop/hooks/"+hook.ID+"/rotate", `{}`, "k-rotate")
	var rotated struct{ Secret string }
	if err := json.Unmarshal(b, &rotated); st != http.StatusOK || err != nil || rotated.Secret == "" {
		t.Fatalf("hook rotate: %d %s", st, b)
	}
	rotateSecret := rotated.Secret

	for _, c := range []struct {
		key, path, body string
		secrets         []string
		withheld        bool
	}{
		{"k-key", "/api/v1/keys", `{"name":"ci-bot","role":"ci"}`, []string{keySecret}, true},
		{"k-hook", "/api/v1/repos/shop/hooks", `{"url":"https://8.8.8.8/hook","secret":"` + hookSecret + `"}`, []string{hookSecret}, false},
		{"k-rotate", "/api/v1/repos/shop/hooks/" + hook.ID + "/rotate", `{}`, []string{rotateSecret, hookSecret}, true},
	} {
		row := stored(c.key)
		for _, sec := range c.secrets {
			if bytes.Contains(row, []byte(sec)) {
				t.Errorf("%s: the stored answer holds a secret: %s", c.path, row)
			}
		}
		st, b, replayed := call(c.path, c.body, c.key)
		if !replayed || st >= 300 {
			t.Errorf("%s: retry: %d replayed=%v %s", c.path, st, replayed, b)
		}
		for _, sec := range c.secrets {
			if bytes.Contains(b, []byte(sec)) {
				t.Errorf("%s: the replay shows the secret: %s", c.path, b)
			}
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: replay is not JSON: %s", c.path, b)
		}
		if _, has := m["secret"]; has {
			t.Errorf("%s: the replay has a secret field: %s", c.path, b)
		}
		if c.withheld && m["secret_withheld"] != true {
			t.Errorf("%s: the replay does not say the secret is withheld: %s", c.path, b)
		}
	}
}
