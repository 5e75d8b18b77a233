package main

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretKeyFile: the default key is generated once (0600) and then
// reused; a given key file must exist, hold 64 hex digits and be private.
func TestSecretKeyFile(t *testing.T) {
	dir := t.TempDir()
	c := &serveConfig{Data: dir}
	k1, err := loadSecretKey(c)
	if err != nil || len(k1) != 32 {
		t.Fatalf("generate: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, "secret.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret.key: %v %v", st, err)
	}
	k2, err := loadSecretKey(c)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("the second start got another key: %v", err)
	}
	given := filepath.Join(t.TempDir(), "k")
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
	}{
		{"missing", "", 0, "no such file"},
		{"short", "abcd", 0o600, "64 hex digits"},
		{"open to others", strings.Repeat("ab", 32), 0o644, "readable by others"},
	} {
		os.Remove(given)
		if tc.mode != 0 {
			os.WriteFile(given, []byte(tc.content), tc.mode)
			os.Chmod(given, tc.mode)
		}
		_, err := loadSecretKey(&serveConfig{Data: dir, SecretKeyFile: given})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	os.WriteFile(given, []byte(strings.Repeat("ab", 32)+"\n"), 0o600)
	os.Chmod(given, 0o600)
	if k, err := loadSecretKey(&serveConfig{Data: dir, SecretKeyFile: given}); err != nil || k[0] != 0xab {
		t.Errorf("given key: %v", err)
	}
}

// TestSecureDataDir: an existing directory and its files are made private
// at start, each change logged.
func TestSecureDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	os.Mkdir(dir, 0o755)
	os.Chmod(dir, 0o755)
	for _, f := range []string{"lockstep.db", "lockstep.db-wal", "admin.key", "branch.secret"} {
		os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644)
		os.Chmod(filepath.Join(dir, f), 0o644)
	}
	var logs bytes.Buffer
	if err := secureDataDir(dir, slog.New(slog.NewTextHandler(io.MultiWriter(&logs), nil))); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %04o", st.Mode().Perm())
	}
	for _, f := range []string{"lockstep.db", "lockstep.db-wal", "admin.key", "branch.secret"} {
		if st, _ := os.Stat(filepath.Join(dir, f)); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %04o", f, st.Mode().Perm())
		}
	}
	if n := strings.Count(logs.String(), "mode set to"); n != 5 {
		t.Errorf("%d log lines, want 5:\n%s", n, logs.String())
	}
}
