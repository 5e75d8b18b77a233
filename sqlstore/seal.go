package sqlstore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
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
		return "", lockstep.Errorf(lockstep.EUNAVAILABLE, "hook secrets are encrypted but the server has no secret key (--secret-key-file)")
	}
	raw, err := base64.RawStdEncoding.DecodeString(stored[len(sealPrefix):])
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", fmt.Errorf("hook %s: malformed encrypted secret", rowID)
	}
	n := s.aead.NonceSize()
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], []byte(rowID))
	if err != nil {
		return "", lockstep.Errorf(lockstep.EUNAVAILABLE, "hook %s: the secret does not decrypt with this server's secret key (replicas must share --secret-key-file)", rowID)
	}
	return string(pt), nil
}

// sealPlaintextSecrets encrypts hook secrets stored before encryption at
// rest (or by a server without a key). On SQLite the old plaintext is
// overwritten in place (secure_delete) and the WAL checkpointed and
// truncated, so it is left in neither file. It returns how many secrets it
// encrypted.
func (s *DB) sealPlaintextSecrets(ctx context.Context) (int, error) {
	if s.aead == nil {
		return 0, nil
	}
	type row struct{ id, secret, prev string }
	var todo []row
	rows, err := s.db.QueryContext(ctx, `SELECT id, secret, prev_secret FROM hooks`)
	if err != nil {
		return 0, fmt.Errorf("read hook secrets: %w", err)
	}
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.secret, &r.prev); err != nil {
			rows.Close()
			return 0, err
		}
		if (r.secret != "" && !strings.HasPrefix(r.secret, sealPrefix)) || (r.prev != "" && !strings.HasPrefix(r.prev, sealPrefix)) {
			todo = append(todo, r)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(todo) == 0 {
		return 0, nil
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		for _, r := range todo {
			sec, prev := r.secret, r.prev
			var err error
			if !strings.HasPrefix(sec, sealPrefix) {
				if sec, err = s.seal(r.id, sec); err != nil {
					return err
				}
			}
			if prev != "" && !strings.HasPrefix(prev, sealPrefix) {
				if prev, err = s.seal(r.id, prev); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `UPDATE hooks SET secret = $1, prev_secret = $2 WHERE id = $3`, sec, prev, r.id); err != nil {
				return fmt.Errorf("encrypt hook secret: %w", err)
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
	return len(todo), nil
}
