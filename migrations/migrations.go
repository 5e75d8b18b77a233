// Package migrations embeds the SQL schema of the metadata store, one set
// per dialect (SQLite and PostgreSQL differ only where they must: identity
// columns and blob types). golang-migrate applies them at start-up and on
// `lockstep migrate`. Files are append-only: never edit a released one.
package migrations

import (
	"embed"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// FS returns the migration files of a dialect ("sqlite" or "postgres").
func FS(dialect string) (fs.FS, error) { return fs.Sub(files, dialect) }

// Latest returns the highest migration version of a dialect: a database
// whose schema is newer than this was written by a newer binary.
func Latest(dialect string) uint {
	entries, _ := fs.ReadDir(files, dialect)
	var vs []int
	for _, e := range entries {
		n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err == nil {
			vs = append(vs, n)
		}
	}
	sort.Ints(vs)
	if len(vs) == 0 {
		return 0
	}
	return uint(vs[len(vs)-1])
}
