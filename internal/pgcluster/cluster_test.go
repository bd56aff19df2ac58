package pgcluster

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func startCluster(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func TestStartQueryStop(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{Logger: nil})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatalf("connect %s: %v", c.ConnString("postgres"), err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 = %d, %v", one, err)
	}
	var listen, fsync string
	if err := conn.QueryRow(ctx, "SELECT current_setting('listen_addresses'), current_setting('fsync')").Scan(&listen, &fsync); err != nil {
		t.Fatal(err)
	}
	if listen != "" || fsync != "off" {
		t.Errorf("listen_addresses=%q fsync=%q, want '' and off", listen, fsync)
	}
	conn.Close(ctx)

	dir := c.Dir()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still exists after Stop (stat: %v)", dir, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// TestStopWithoutProc: on a system without /proc (macOS, the BSDs; here procRoot set to
// a directory that does not exist) Stop stops the server, a live postgres process of its
// PID, before it removes the directory: it removed the directory of a running server
// before.
func TestStopWithoutProc(t *testing.T) {
	c := startCluster(t, Options{})
	pid, ok := postmasterPID(c.dataDir)
	if !ok {
		t.Fatalf("postmaster.pid of a running cluster: pid %d, not running", pid)
	}
	// without /proc a PID counts only when its process runs postgres: not this one
	// (a stale postmaster.pid's PID may be another process's by now)
	if !isPostgres(pid) || isPostgres(os.Getpid()) {
		t.Fatalf("isPostgres: the server %d %v, this test %v; want true, false", pid, isPostgres(pid), isPostgres(os.Getpid()))
	}
	procRoot = filepath.Join(t.TempDir(), "no-proc")
	t.Cleanup(func() { procRoot = "/proc" })
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !waitGone(pid, 10*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGQUIT)
		t.Fatalf("server %d still running after Stop without /proc", pid)
	}
}

// TestConf: Options.Conf lines reach postgresql.conf, after (and over) pgcluster's own.
func TestConf(t *testing.T) {
	t.Parallel()
	c := startCluster(t, Options{Conf: []string{"work_mem = '7MB'", "max_connections = 50"}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var workMem, maxConns string
	if err := conn.QueryRow(ctx, "SELECT current_setting('work_mem'), current_setting('max_connections')").Scan(&workMem, &maxConns); err != nil {
		t.Fatal(err)
	}
	if workMem != "7MB" || maxConns != "50" {
		t.Errorf("work_mem=%q max_connections=%q, want 7MB and 50 (pgcluster's own is 300)", workMem, maxConns)
	}
}

// TestKeepAndReap starts two clusters in a t.TempDir() (0700 directories, so
// as root this also exercises making the path searchable): one kept, one
// whose owner is made to look dead. A third Start must reap only the latter.
func TestKeepAndReap(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	kept := startCluster(t, Options{Dir: parent, Keep: true})
	t.Cleanup(func() { os.RemoveAll(kept.Dir()) })
	orphan := startCluster(t, Options{Dir: parent})

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan.Dir(), ownerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	orphanPID, ok := postmasterPID(filepath.Join(orphan.Dir(), dataSubdir))
	if !ok {
		t.Fatalf("orphan server not running")
	}

	startCluster(t, Options{Dir: parent})

	if _, err := os.Stat(orphan.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphaned cluster %s not removed (stat: %v)", orphan.Dir(), err)
	}
	if alive(orphanPID) {
		t.Errorf("orphaned server pid %d still running", orphanPID)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, kept.ConnString("postgres"))
	if err != nil {
		t.Fatalf("kept cluster was disturbed: %v", err)
	}
	conn.Close(ctx)
	if err := kept.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(kept.Dir(), dataSubdir, "PG_VERSION")); err != nil {
		t.Errorf("kept cluster's data directory gone after Stop: %v", err)
	}
}

func TestStartCanceled(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	c, err := Start(ctx, Options{Dir: parent})
	if err == nil {
		t.Log("Start finished within 50ms; nothing to check")
		c.Stop(context.Background())
		return
	}
	t.Logf("Start failed as expected: %v", err)
	entries, _ := os.ReadDir(parent)
	if len(entries) != 0 {
		t.Errorf("failed Start left %d entries in %s", len(entries), parent)
	}
}

func TestFindBinaries(t *testing.T) {
	dir, err := FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if !hasServerBinaries(dir) {
		t.Fatalf("FindBinaries() = %s lacking server binaries", dir)
	}
	t.Setenv("PATH", "/nonexistent")
	if dir2, err := FindBinaries(); err == nil && dir2 == "" {
		t.Fatal("empty dir without error")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{{"9.6", "15", true}, {"15", "16", true}, {"16", "10", false}} {
		if got := compareVersions(tc.a, tc.b) < 0; got != tc.less {
			t.Errorf("compareVersions(%q, %q) < 0 = %v", tc.a, tc.b, got)
		}
	}
}
