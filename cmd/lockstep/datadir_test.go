//go:build lockstep_server

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

// TestSecureDataDirTree: a data directory from before the server ran
// with umask 077 (git's 0755 directories, 0644 files, 0444 packs) is made
// private at start: directories 0700, files without group and other
// access, in one log line.
func TestSecureDataDirTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	pack := filepath.Join(dir, "networks", "r.git", "objects", "pack")
	if err := os.MkdirAll(pack, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]os.FileMode{
		filepath.Join(dir, "networks", "r.git", "config"): 0o644,
		filepath.Join(pack, "pack-1.pack"):                0o444,
		filepath.Join(pack, "pack-1.idx"):                 0o444,
	}
	for p, mode := range files {
		os.WriteFile(p, []byte("x"), mode)
		os.Chmod(p, mode)
	}
	for _, d := range []string{dir, filepath.Join(dir, "networks"), filepath.Join(dir, "networks", "r.git"), filepath.Join(dir, "networks", "r.git", "objects"), pack} {
		os.Chmod(d, 0o755)
	}
	var logs bytes.Buffer
	if err := secureDataDir(dir, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := d.Info()
		perm := info.Mode().Perm()
		if d.IsDir() && perm != 0o700 || !d.IsDir() && perm != 0o600 && perm != 0o400 {
			t.Errorf("%s is %04o", p, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "count=7") {
		t.Errorf("want one log line counting 7 changes (4 directories, 3 files):\n%s", logs.String())
	}
}
