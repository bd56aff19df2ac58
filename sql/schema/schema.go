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

// Hash identifies the content of the migrations (a SHA-256 over every file's name and
// text), e.g. to name a test template database built from them.
func Hash() string {
	h := sha256.New()
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
