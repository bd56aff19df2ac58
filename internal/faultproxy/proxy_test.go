package faultproxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/faultproxy"
	"github.com/pgtask/pgtask/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// setup returns a direct pool on a fresh database with a table t (n int), a proxy in
// front of it, and a pool through the proxy.
func setup(t *testing.T) (direct, proxied *pgxpool.Pool, p *faultproxy.Proxy) {
	t.Helper()
	url := pgtest.NewDatabase(t, "faultproxy-empty", nil)
	ctx := t.Context()
	direct, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	if _, err := direct.Exec(ctx, "CREATE TABLE t (n int)"); err != nil {
		t.Fatal(err)
	}
	p, err = faultproxy.Start(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cfg, err := p.PoolConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	proxied, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)
	return direct, proxied, p
}

func count(t *testing.T, pool *pgxpool.Pool, n int) int {
	t.Helper()
	var c int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM t WHERE n = $1", n).Scan(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLostReplyAfterCommit(t *testing.T) {
	direct, proxied, p := setup(t)
	ctx := t.Context()
	marked := func(sql string) bool { return strings.Contains(sql, "/* lose */") }
	cut := p.AddCut(&faultproxy.Cut{Match: marked, Times: 2})

	// An INSERT in no transaction block: committed, and its reply lost.
	_, err := proxied.Exec(ctx, "INSERT INTO t /* lose */ VALUES ($1)", 1)
	if err == nil {
		t.Fatal("INSERT whose reply was lost returned no error")
	}
	if pgconn.SafeToRetry(err) {
		t.Errorf("lost reply reported safe to retry: %v", err)
	}
	if got := count(t, direct, 1); got != 1 {
		t.Errorf("rows after the lost reply = %d, want 1 (the server committed)", got)
	}

	// A transaction whose COMMIT's reply is lost.
	p.AddCut(&faultproxy.Cut{Match: faultproxy.Statement("COMMIT"), Times: 1})
	err = pgx.BeginFunc(ctx, proxied, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", 2)
		return err
	})
	if err == nil {
		t.Fatal("transaction whose COMMIT reply was lost returned no error")
	}
	if got := count(t, direct, 2); got != 1 {
		t.Errorf("rows after the lost COMMIT reply = %d, want 1", got)
	}

	// Statements that do not match go through, on new connections.
	for i := range 5 {
		if _, err := proxied.Exec(ctx, "INSERT INTO t VALUES ($1)", 3); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if got := count(t, direct, 3); got != 5 {
		t.Errorf("rows = %d, want 5", got)
	}
	if cut.Lost() != 1 || p.Lost() != 2 {
		t.Errorf("lost: rule %d, proxy %d; want 1 and 2", cut.Lost(), p.Lost())
	}
	// The rule loses at most Times replies.
	if _, err := proxied.Exec(ctx, "INSERT INTO t /* lose */ VALUES ($1)", 4); err == nil {
		t.Error("second marked INSERT returned no error")
	}
	if _, err := proxied.Exec(ctx, "INSERT INTO t /* lose */ VALUES ($1)", 4); err != nil {
		t.Errorf("third marked INSERT (rule spent): %v", err)
	}
	if got := count(t, direct, 4); got != 2 {
		t.Errorf("rows = %d, want 2", got)
	}
}

func TestRefuseAndCutAll(t *testing.T) {
	_, proxied, p := setup(t)
	ctx := t.Context()
	conn, err := proxied.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Refuse(true)
	p.CutAll()
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Error("statement on a cut connection succeeded")
	}
	conn.Release()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := proxied.Exec(short, "SELECT 1"); err == nil {
		t.Error("statement succeeded while the proxy refuses connections")
	}
	p.Refuse(false)
	if _, err := proxied.Exec(ctx, "SELECT 1"); err != nil {
		t.Errorf("after refusing: %v", err)
	}
	p.Delay(50 * time.Millisecond)
	start := time.Now()
	if _, err := proxied.Exec(ctx, "SELECT 1"); err != nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("delayed statement: %v after %v", err, time.Since(start))
	}
}
