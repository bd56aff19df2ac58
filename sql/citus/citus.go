// Package citus embeds the SQL that repository.DistributeCitus runs on a Citus
// coordinator once pgtask's tables are distributed: the functions of the hot paths that
// Citus delegates to the node holding a topic's shard. This package only carries the
// file.
package citus

import _ "embed"

// Functions is functions.sql.
//
//go:embed functions.sql
var Functions string
