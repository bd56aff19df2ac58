// Package schema embeds the golang-migrate migrations of pgtask. Apply them with
// repository.Migrate; this package only carries the files.
package schema

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
)

// FS holds the numbered up/down migration pairs.
//
//go:embed *.sql
var FS embed.FS

// VersionTable is the table in which the applied migration version is recorded
// (golang-migrate's bookkeeping: version, dirty). It has a name of pgtask's own so that
// an application migrating the same database with golang-migrate, whose table is
// schema_migrations by default, does not read or write pgtask's version, nor pgtask its.
const VersionTable = "pgtask_schema_migrations"

// Hash identifies the content of the migrations (a SHA-256 over every file's name and
// text, and VersionTable), e.g. to name a test template database built from them.
func Hash() string {
	h := sha256.New()
	h.Write([]byte(VersionTable))
	h.Write([]byte{0})
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		panic(err) // embedded: cannot fail
	}
	for _, e := range entries {
		b, err := FS.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		h.Write([]byte(e.Name()))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
