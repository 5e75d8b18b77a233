package sqlstore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lockstep-hq/lockstep"
)

// sealPrefix marks an encrypted column value: "lsenc1:" + base64(nonce ||
// AES-256-GCM ciphertext), with the row's id as additional data so a
// ciphertext copied into another row does not open.
const sealPrefix = "lsenc1:"

// SealPrefix is refused as the start of a plaintext secret (it would be
// mistaken for ciphertext).
const SealPrefix = sealPrefix

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secret key: want 32 bytes (AES-256), got %d", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal encrypts a secret for the row id; without a key (tests of the
// store alone) it is stored as is.
func (s *DB) seal(rowID, plain string) (string, error) {
	if s.aead == nil || plain == "" {
		return plain, nil
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	ct := s.aead.Seal(nonce, nonce, []byte(plain), []byte(rowID))
	return sealPrefix + base64.RawStdEncoding.EncodeToString(ct), nil
}

// open decrypts a stored secret; a plaintext value (written before
// encryption, or by a store without a key) is returned as is.
func (s *DB) open(rowID, stored string) (string, error) {
	if !strings.HasPrefix(stored, sealPrefix) {
		return stored, nil
	}
	if s.aead == nil {
		return "", lockstep.Errorf(lockstep.EUNAVAILABLE, "secrets are encrypted but the server has no secret key (--secret-key-file)")
	}
	raw, err := base64.RawStdEncoding.DecodeString(stored[len(sealPrefix):])
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", fmt.Errorf("%s: malformed encrypted secret", rowID)
	}
	n := s.aead.NonceSize()
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(rowID))
	if err != nil {
		return "", lockstep.Errorf(lockstep.EUNAVAILABLE, "%s: the secret does not decrypt with this server's secret key (replicas must share --secret-key-file)", rowID)
	}
	return string(pt), nil
}

// queryAD ends the additional data of a sealed URL query: "?" is no
// header-name character, so it never meets a secret header's
// (id/part/Header-Name).
const queryAD = "/?"

// splitTarget cuts a target URL before its query and fragment: tail is
// "?…" or "#…" from the first of them, "" when there is neither.
func splitTarget(raw string) (base, tail string) {
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		return raw[:i], raw[i:]
	}
	return raw, ""
}

// sealTarget seals a target URL's query (with its fragment): receivers
// often take their token there (?token=…). It returns the URL without
// them and the sealed tail; without a key (tests of the store alone),
// or when there is no tail, the URL as given and "", as seal does.
func (s *DB) sealTarget(ad, raw string) (base, sealed string, err error) {
	base, tail := splitTarget(raw)
	if s.aead == nil || tail == "" {
		return raw, "", nil
	}
	sealed, err = s.seal(ad+queryAD, tail)
	return base, sealed, err
}

// openTarget is the URL sealTarget was given.
func (s *DB) openTarget(ad, base, sealed string) (string, error) {
	if sealed == "" {
		return base, nil
	}
	tail, err := s.open(ad+queryAD, sealed)
	return base + tail, err
}

// sealHookURL is a hook URL as hooks.url keeps it: the query sealed
// after a "?" ("https://ci.example/h?lsenc1:…"); target URLs may not
// have a query starting with SealPrefix, so the form is unambiguous.
func (s *DB) sealHookURL(id, raw string) (string, error) {
	base, sealed, err := s.sealTarget(id, raw)
	if err != nil || sealed == "" {
		return base, err
	}
	return base + "?" + sealed, nil
}

// hookURLSealed reports whether a stored hook URL has its query sealed.
func hookURLSealed(stored string) bool {
	_, tail := splitTarget(stored)
	return strings.HasPrefix(tail, "?"+sealPrefix)
}

// openHookURL reads hooks.url: a sealed query is opened, a plaintext URL
// (stored before encryption, or without a key) is returned as is.
func (s *DB) openHookURL(id, stored string) (string, error) {
	if !hookURLSealed(stored) {
		return stored, nil
	}
	base, tail := splitTarget(stored)
	return s.openTarget(id, base, tail[1:])
}

// sealPlaintextSecrets encrypts secrets stored before encryption at rest
// (or by a server without a key): hook secrets, the queries of hook URLs
// and of effects' target URLs (request and compensation). On SQLite the
// old plaintext is overwritten in place (secure_delete) and the WAL
// checkpointed and truncated, so it is left in neither file. It returns
// how many rows it encrypted.
func (s *DB) sealPlaintextSecrets(ctx context.Context) (int, error) {
	if s.aead == nil {
		return 0, nil
	}
	hooks, err := s.plaintextHooks(ctx)
	if err != nil {
		return 0, err
	}
	effects, err := s.plaintextEffects(ctx)
	if err != nil {
		return 0, err
	}
	if len(hooks) == 0 && len(effects) == 0 {
		return 0, nil
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for _, r := range hooks {
			if _, err := tx.ExecContext(ctx, `UPDATE hooks SET url = $1, secret = $2, prev_secret = $3 WHERE id = $4`, r.url, r.secret, r.prev, r.id); err != nil {
				return fmt.Errorf("encrypt hook secrets: %w", err)
			}
		}
		for _, r := range effects {
			if _, err := tx.ExecContext(ctx, `UPDATE effects SET request = $1, compensation = $2 WHERE id = $3`, r.request, r.comp, r.id); err != nil {
				return fmt.Errorf("encrypt effect target: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if s.dialect == "sqlite" {
		// Move the new pages into the main file and empty the WAL: the
		// plaintext was overwritten in the page (secure_delete) and the
		// WAL frames that held it are gone.
		if _, err := s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			return 0, fmt.Errorf("checkpoint after encrypting secrets: %w", err)
		}
	}
	return len(hooks) + len(effects), nil
}

type hookSecrets struct{ id, url, secret, prev string }

// plaintextHooks reads the hooks with a secret, a previous secret or a
// URL query in plaintext and returns them sealed.
func (s *DB) plaintextHooks(ctx context.Context) ([]hookSecrets, error) {
	var todo []hookSecrets
	rows, err := s.db.QueryContext(ctx, `SELECT id, url, secret, prev_secret FROM hooks`)
	if err != nil {
		return nil, fmt.Errorf("read hook secrets: %w", err)
	}
	for rows.Next() {
		var r hookSecrets
		if err := rows.Scan(&r.id, &r.url, &r.secret, &r.prev); err != nil {
			rows.Close()
			return nil, err
		}
		plainURL := strings.ContainsAny(r.url, "?#") && !hookURLSealed(r.url)
		if plainURL || (r.secret != "" && !strings.HasPrefix(r.secret, sealPrefix)) || (r.prev != "" && !strings.HasPrefix(r.prev, sealPrefix)) {
			todo = append(todo, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range todo {
		r := &todo[i]
		var err error
		if !hookURLSealed(r.url) {
			if r.url, err = s.sealHookURL(r.id, r.url); err != nil {
				return nil, err
			}
		}
		if !strings.HasPrefix(r.secret, sealPrefix) {
			if r.secret, err = s.seal(r.id, r.secret); err != nil {
				return nil, err
			}
		}
		if r.prev != "" && !strings.HasPrefix(r.prev, sealPrefix) {
			if r.prev, err = s.seal(r.id, r.prev); err != nil {
				return nil, err
			}
		}
	}
	return todo, nil
}

type effectTargets struct{ id, request, comp string }

// plaintextEffects reads the effects whose target URL (request or
// compensation) carries a query or fragment in plaintext and returns
// their columns with it sealed. The LIKE only narrows the scan (a sealed
// URL keeps neither "?" nor "#"; a header value may have them): each
// candidate's URLs are checked here.
func (s *DB) plaintextEffects(ctx context.Context) ([]effectTargets, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, request, compensation FROM effects
		WHERE request LIKE '%?%' OR request LIKE '%#%' OR compensation LIKE '%?%' OR compensation LIKE '%#%'`)
	if err != nil {
		return nil, fmt.Errorf("read effect targets: %w", err)
	}
	var cands []effectTargets
	for rows.Next() {
		var r effectTargets
		if err := rows.Scan(&r.id, &r.request, &r.comp); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var todo []effectTargets
	for _, r := range cands {
		req, reqChanged, err := s.sealStoredTarget(r.id, "request", r.request)
		if err != nil {
			return nil, err
		}
		comp, compChanged, err := s.sealStoredTarget(r.id, "compensation", r.comp)
		if err != nil {
			return nil, err
		}
		if reqChanged || compChanged {
			todo = append(todo, effectTargets{id: r.id, request: req, comp: comp})
		}
	}
	return todo, nil
}

// sealStoredTarget seals the plaintext query of a stored request or
// compensation column; changed is false when there was none.
func (s *DB) sealStoredTarget(id, part, raw string) (out string, changed bool, err error) {
	if raw == "" {
		return raw, false, nil
	}
	var st storedHTTP
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return "", false, fmt.Errorf("effect %s %s: %w", id, part, err)
	}
	if st.Query != "" || !strings.ContainsAny(st.URL, "?#") {
		return raw, false, nil
	}
	if st.URL, st.Query, err = s.sealTarget(id+"/"+part, st.URL); err != nil {
		return "", false, err
	}
	b, err := json.Marshal(st)
	return string(b), true, err
}
