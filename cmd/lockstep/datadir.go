//go:build lockstep_server

package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// secureDataDir creates the data directory with mode 0700, and restricts an
// existing one: the directory to 0700 and every regular file directly in it
// (lockstep.db and its -wal/-shm, admin.key, branch.secret, secret.key) to
// 0600, logging each change; below it (the git networks) every directory
// open to others becomes 0700 and every such file loses its group and
// other bits (a pack 0444 becomes 0400), counted in one log line. New
// files are private through the server's umask (privateUmask).
func secureDataDir(dir string, logger *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("restrict the data directory to its owner: %w", err)
		}
		logger.Warn("data directory was readable by others: mode set to 0700", "dir", dir, "was", fmt.Sprintf("%04o", st.Mode().Perm()))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if info.Mode().Perm()&0o077 != 0 {
			p := filepath.Join(dir, e.Name())
			if err := os.Chmod(p, 0o600); err != nil {
				return fmt.Errorf("restrict %s to its owner: %w", p, err)
			}
			logger.Warn("data file was readable by others: mode set to 0600", "file", p, "was", fmt.Sprintf("%04o", info.Mode().Perm()))
		}
	}
	fixed := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		err := filepath.WalkDir(filepath.Join(dir, e.Name()), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil // removed meanwhile (a repack's old pack)
				}
				return err
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			perm := info.Mode().Perm()
			want := perm &^ 0o077
			if d.IsDir() {
				want = 0o700
			}
			if perm == want || (!d.IsDir() && perm&0o077 == 0) {
				return nil
			}
			if err := os.Chmod(p, want); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("restrict %s to its owner: %w", p, err)
			}
			fixed++
			return nil
		})
		if err != nil {
			return err
		}
	}
	if fixed > 0 {
		logger.Warn("data files and directories were readable by others: group and other access removed", "dir", dir, "count", fixed)
	}
	return nil
}

// loadSecretKey returns the 32-byte key that encrypts hook secrets at
// rest: from --secret-key-file (which must exist: replicas share it, so it
// is never generated there), or from <data>/secret.key, generated once
// (mode 0600) like branch.secret.
func loadSecretKey(c *serveConfig) ([]byte, error) {
	path, given := c.SecretKeyFile, c.SecretKeyFile != ""
	if !given {
		path = filepath.Join(c.Data, "secret.key")
	}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		k, derr := hex.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(k) != 32 {
			return nil, fmt.Errorf("secret key file %s: want 64 hex digits (32 random bytes, e.g. `openssl rand -hex 32`)", path)
		}
		if given {
			if st, serr := os.Stat(path); serr == nil && st.Mode().Perm()&0o077 != 0 {
				return nil, fmt.Errorf("secret key file %s is readable by others (mode %04o): chmod 600 it", path, st.Mode().Perm())
			}
		}
		return k, nil
	case given || !os.IsNotExist(err):
		return nil, fmt.Errorf("secret key file (LOCKSTEP_SECRET_KEY_FILE): %w", err)
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	// Written to a private temp file, then linked into place: link fails
	// when another process sharing the directory created the key first,
	// and then that key is used (two keys would make the other's
	// ciphertexts unreadable).
	tmp, err := os.CreateTemp(c.Data, ".secret.key-*")
	if err != nil {
		return nil, fmt.Errorf("write secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(k) + "\n"); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write secret key: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write secret key: %w", err)
	}
	tmp.Close()
	if err := os.Link(tmp.Name(), path); err != nil {
		if os.IsExist(err) {
			return loadSecretKey(c)
		}
		return nil, fmt.Errorf("write secret key: %w", err)
	}
	return k, nil
}
