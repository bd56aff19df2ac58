// Package citus embeds the SQL that repository.DistributeCitus runs on a Citus
// coordinator once pgtask's tables are distributed: the functions of the hot paths that
// Citus delegates to the node holding a topic's shard; and the forms of later
// migrations that repository.Migrate applies to a distributed database
// (migrations/README.md). This package only carries the files.
package citus

import (
	"embed"
	"io/fs"
)

// Functions is functions.sql.
//
//go:embed functions.sql
var Functions string

//go:embed migrations
var migrations embed.FS

// Migrations holds the Citus forms of migrations, named as in sql/schema
// (000022_name.up.sql), at its root.
var Migrations = mustSub(migrations, "migrations")

func mustSub(fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		panic(err) // dir is embedded at build time
	}
	return sub
}
