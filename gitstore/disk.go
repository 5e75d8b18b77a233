package gitstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lockstep-hq/lockstep"
)

// DiskError translates a write error caused by the data directory's disk
// (full, over quota, read-only) into unavailable, which the API answers
// with 503 and Retry-After: the request was fine and may succeed later.
// Other errors are returned unchanged.
func DiskError(err error) error {
	if err == nil {
		return nil
	}
	var le *lockstep.Error
	if errors.As(err, &le) {
		return err
	}
	var why string
	switch {
	case errors.Is(err, syscall.ENOSPC):
		why = "the data directory's disk is full"
	case errors.Is(err, syscall.EDQUOT):
		why = "the data directory is over its disk quota"
	case errors.Is(err, syscall.EROFS):
		why = "the data directory is read-only"
	default:
		return err
	}
	return fmt.Errorf("%w: %w", lockstep.Errorf(lockstep.EUNAVAILABLE, "%s: writes are refused until it is fixed (reads still work); nothing was changed", why), err)
}

// diskError is DiskError for this package's writers.
func diskError(err error) error { return DiskError(err) }

// tempPrefixes start the names of temp files written into a network
// directory: ours (".tmp_"), git's pack-objects / index-pack ("tmp_pack_",
// "tmp_idx_", "tmp_rev_", "tmp_mtimes_", "tmp_obj_") and git repack's
// ".tmp-<pid>-pack-…". A killed process leaves them behind.
var tempPrefixes = []string{tmpPrefix, "tmp_pack_", "tmp_idx_", "tmp_rev_", "tmp_mtimes_", "tmp_obj_", ".tmp-", ".tmp_pack-"}

func isTempName(name string) bool {
	for _, p := range tempPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// RemoveStaleTemps deletes the temp files that a crash (SIGKILL, power
// loss) left in the bare repository dir: in objects/, objects/pack/,
// objects/??/, lockstep/heads/ and dir itself. Only files whose last
// modification is older than grace are removed: a file being written now
// is modified continuously, so grace must be longer than the longest
// pause inside one write (the service uses --temp-grace). Errors reading
// a directory are skipped (the sweep is best effort and runs again).
func RemoveStaleTemps(dir string, grace time.Duration, now time.Time) TempSweep {
	var st TempSweep
	dirs := []string{dir, filepath.Join(dir, "objects"), filepath.Join(dir, "objects", "pack"), filepath.Join(dir, "lockstep", "heads")}
	if subs, err := os.ReadDir(filepath.Join(dir, "objects")); err == nil {
		for _, e := range subs {
			if e.IsDir() && len(e.Name()) == 2 {
				dirs = append(dirs, filepath.Join(dir, "objects", e.Name()))
			}
		}
	}
	// Quarantines of receives (packstore.go) that a crash left: whole
	// directories, judged by their newest file.
	if subs, err := os.ReadDir(filepath.Join(dir, "objects")); err == nil {
		for _, e := range subs {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), quarantinePrefix) {
				continue
			}
			q := filepath.Join(dir, "objects", e.Name())
			newest, size := time.Time{}, int64(0)
			filepath.WalkDir(q, func(_ string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if fi, err := d.Info(); err == nil {
					if fi.ModTime().After(newest) {
						newest = fi.ModTime()
					}
					if !d.IsDir() {
						size += fi.Size()
					}
				}
				return nil
			})
			if !newest.IsZero() && now.Sub(newest) > grace && os.RemoveAll(q) == nil {
				st.Files++
				st.Bytes += size
			}
		}
	}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !isTempName(e.Name()) || e.IsDir() {
				continue
			}
			fi, err := e.Info()
			if err != nil || !fi.Mode().IsRegular() || now.Sub(fi.ModTime()) <= grace {
				continue
			}
			if err := os.Remove(filepath.Join(d, e.Name())); err == nil || errors.Is(err, fs.ErrNotExist) {
				st.Files++
				st.Bytes += fi.Size()
			}
		}
	}
	return st
}
