package main

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/repository"
)

func runMigrateUp(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate up", "[--to N] [flags]",
		"Applies every pending migration (repository.Migrate). Safe to run again and from\n"+
			"several processes at once. With --to N, applies those up to version N only\n"+
			"(repository.MigrateTo), say to run a long one at a time of its own; it never\n"+
			"reverts a migration, and fails when another process migrates meanwhile.")
	url := f.databaseURL()
	to := f.Int("to", 0, "apply the pending migrations up to version `N` only (0: every one)")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := f.checkTo(*to); err != nil {
		return err
	}
	c, err := f.connectAnySchema(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if *to > 0 {
		return f.migrateTo(ctx, c, uint(*to), true)
	}
	if err := repository.Migrate(ctx, c.pool); err != nil {
		return err
	}
	return f.printVersion(ctx, c)
}

func runMigrateDown(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate down", "--yes [--to N] [flags]",
		"Reverts every migration: drops all pgtask tables, functions and tasks. With --to N,\n"+
			"reverts only the migrations above version N, newest first (to step back before a\n"+
			"release, run it with that release's binary, which has their down migrations): the\n"+
			"topics and their tasks are kept, and what the reverted migrations added goes with\n"+
			"them (000017 the tallies, 000016 the schedules, 000015 the limits and concurrency\n"+
			"keys). Needs --yes.")
	url := f.databaseURL()
	yes := f.Bool("yes", false, "confirm that what is reverted is dropped")
	to := f.Int("to", 0, "revert only the migrations above version `N` (0: every migration, and every task)")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if err := f.checkTo(*to); err != nil {
		return err
	}
	if !*yes {
		if *to > 0 {
			return f.usagef("--yes: this reverts every migration above version %d and drops what they added; pass --yes to confirm", *to)
		}
		return f.usagef("--yes: this drops every pgtask table and task; pass --yes to confirm")
	}
	c, err := f.connectAnySchema(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if *to > 0 {
		return f.migrateTo(ctx, c, uint(*to), false)
	}
	if err := repository.MigrateDown(ctx, c.pool); err != nil {
		return err
	}
	fmt.Fprintln(f.e.stdout, "schema removed (version 0)")
	return nil
}

// checkTo refuses a --to that names no version of this build.
func (f *flags) checkTo(to int) error {
	if to < 0 {
		return f.usagef("--to %d: a version is 0 or more", to)
	}
	if newest := repository.NewestMigration(); uint(to) > newest {
		return f.usagef("--to %d: the newest migration of this build is %d", to, newest)
	}
	return nil
}

// migrateTo migrates c's database to version, up or down as the command does (a schema
// on the other side of version is a usage error; one newer than this build is left to
// MigrateTo, which says so), and prints the version reached.
func (f *flags) migrateTo(ctx context.Context, c *conn, version uint, up bool) error {
	current, _, err := repository.MigrationVersion(ctx, c.pool)
	if err != nil {
		return err
	}
	if current <= repository.NewestMigration() {
		if up && version < current {
			return f.usagef("--to %d: the schema is at version %d, above it; migrate down --to reverts migrations", version, current)
		}
		if !up && version > current {
			return f.usagef("--to %d: the schema is at version %d, below it; migrate up applies migrations", version, current)
		}
	}
	if err := repository.MigrateTo(ctx, c.pool, version); err != nil {
		return err
	}
	return f.printVersion(ctx, c)
}

// printVersion prints the schema's version: "schema at version N".
func (f *flags) printVersion(ctx context.Context, c *conn) error {
	version, _, err := repository.MigrationVersion(ctx, c.pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(f.e.stdout, "schema at version %d\n", version)
	return nil
}

func runMigrateVersion(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate version", "[flags]",
		"Prints the applied migration version (0 when none), followed by \"(dirty)\" when a\nfailed migration left the schema half applied.")
	url := f.databaseURL()
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connectAnySchema(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	version, dirty, err := repository.MigrationVersion(ctx, c.pool)
	if err != nil {
		return err
	}
	if dirty {
		fmt.Fprintf(e.stdout, "%d (dirty)\n", version)
		return nil
	}
	fmt.Fprintf(e.stdout, "%d\n", version)
	return nil
}
