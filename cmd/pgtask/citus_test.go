package main

import (
	"testing"

	"github.com/pgtask/pgtask/repository"
)

// TestCitusEnable: pgtask citus enable wants a positive owner timeout,
// and on plain PostgreSQL it refuses, naming the missing extension, and changes nothing
// (its work on a cluster: internal/citustest's TestDistribute).
func TestCitusEnable(t *testing.T) {
	f := setup(t)
	seqs := f.push("a", "b")
	wantUsage(t, f.cli("citus", "enable", "--owner-timeout", "0s"), "--owner-timeout: 0s is not positive")
	r := f.cli("citus", "enable")
	wantRuntime(t, r, repository.ErrCitusRefused)
	wantContains(t, r.err.Error(), "citus extension", "nothing was changed")
	for _, seq := range seqs {
		f.wantState(seq, repository.Ready)
	}
	var kind string
	if err := f.pool.QueryRow(f.ctx, "SELECT relkind::text FROM pg_class WHERE oid = 'task'::regclass").Scan(&kind); err != nil || kind != "p" {
		t.Errorf("task is of kind %q (%v) after the refusal, want still partitioned (p)", kind, err)
	}
}
