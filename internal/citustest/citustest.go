// Package citustest starts a throwaway Citus cluster for tests: a coordinator and two
// workers, each a pgcluster cluster (a unix socket in its own directory, no TCP port)
// with Citus preloaded, and one database, Database, in which the workers are registered
// with the coordinator (Citus keeps its node list per database).
//
// The Citus tests run when PGTASK_TEST_CITUS=1 is set and Citus is installed in the
// PostgreSQL whose server programs pgcluster finds (`../shared/citus/install.sh` installs
// it; `.ci/run` does both). Otherwise Available says why and how to run them, and the
// tests say so in one line and do nothing else.
//
// This is the harness of issue 18 (pgtask on Citus). pgtask does not distribute its
// tables yet: on a Citus database its tables stay local to the coordinator.
package citustest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/pgcluster"
)

// EnvVar is the variable that turns the Citus tests on ("1").
const EnvVar = "PGTASK_TEST_CITUS"

// Database is the database of the cluster in which Citus is set up.
const Database = "pgtask"

// HowTo says how to run the Citus tests.
const HowTo = "run ../shared/citus/install.sh as root, then set " + EnvVar + "=1 (.ci/run does both)"

// Available reports whether the Citus tests run, and otherwise why not.
func Available() (ok bool, why string) {
	if os.Getenv(EnvVar) != "1" {
		return false, EnvVar + " is not 1"
	}
	bin, err := pgcluster.FindBinaries()
	if err != nil {
		return false, err.Error()
	}
	lib := filepath.Join(filepath.Dir(bin), "lib", "citus.so")
	if _, err := os.Stat(lib); err != nil {
		return false, "Citus is not installed in the PostgreSQL of " + bin + " (no " + lib + ")"
	}
	return true, ""
}

// Cluster is a running Citus cluster started by Start.
type Cluster struct {
	// Coordinator is the node that clients connect to.
	Coordinator *pgcluster.Cluster
	// Workers hold the shards of distributed tables.
	Workers []*pgcluster.Cluster
}

// URL returns the connection URL of Database on the coordinator.
func (c *Cluster) URL() string { return c.Coordinator.ConnString(Database) }

// Nodes returns the coordinator and the workers.
func (c *Cluster) Nodes() []*pgcluster.Cluster {
	return append([]*pgcluster.Cluster{c.Coordinator}, c.Workers...)
}

// Start starts a coordinator and workers workers (at least 1) in directories under dir
// ("" for the system's temporary directory), creates Database on each with the citus
// extension, and registers the workers with the coordinator. On error, whatever was
// started is stopped.
func Start(ctx context.Context, dir string, workers int) (c *Cluster, err error) {
	if workers < 1 {
		return nil, fmt.Errorf("citustest: %d workers, want at least 1", workers)
	}
	c = &Cluster{}
	defer func() {
		if err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			err = errors.Join(err, c.Stop(stopCtx))
			c = nil
		}
	}()
	for i := range workers + 1 {
		node, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Conf: []string{
			"shared_preload_libraries = 'citus'",
			"max_prepared_transactions = 100", // two-phase commit across nodes
		}})
		if err != nil {
			return c, fmt.Errorf("citustest: start node %d: %w", i, err)
		}
		if i == 0 {
			c.Coordinator = node
		} else {
			c.Workers = append(c.Workers, node)
		}
		if err := setUp(ctx, node); err != nil {
			return c, fmt.Errorf("citustest: set up node %d: %w", i, err)
		}
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		return c, fmt.Errorf("citustest: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT citus_set_coordinator_host($1, $2)", c.Coordinator.SocketDir(), c.Coordinator.Port()); err != nil {
		return c, fmt.Errorf("citustest: set the coordinator's host: %w", err)
	}
	for i, w := range c.Workers {
		if _, err := conn.Exec(ctx, "SELECT citus_add_node($1, $2)", w.SocketDir(), w.Port()); err != nil {
			return c, fmt.Errorf("citustest: add worker %d: %w", i+1, err)
		}
	}
	return c, nil
}

// setUp makes node reach itself through its socket (citus.local_hostname, which Citus
// uses to connect to its own node) and creates Database with the citus extension.
func setUp(ctx context.Context, node *pgcluster.Cluster) error {
	conn, err := pgx.Connect(ctx, node.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, q := range []string{
		"ALTER SYSTEM SET citus.local_hostname = " + quote(node.SocketDir()),
		"SELECT pg_reload_conf()",
		"CREATE DATABASE " + Database,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	db, err := pgx.Connect(ctx, node.ConnString(Database))
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	if _, err := db.Exec(ctx, "CREATE EXTENSION citus"); err != nil {
		return fmt.Errorf("CREATE EXTENSION citus: %w", err)
	}
	return nil
}

// quote quotes s as an SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Stop stops every node and removes their directories.
func (c *Cluster) Stop(ctx context.Context) error {
	var errs []error
	for _, n := range c.Nodes() {
		if n != nil {
			errs = append(errs, n.Stop(ctx))
		}
	}
	return errors.Join(errs...)
}
