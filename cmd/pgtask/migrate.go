package main

import (
	"context"
	"fmt"

	"github.com/pgtask/pgtask/repository"
)

func runMigrateUp(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate up", "[flags]",
		"Applies every pending migration (repository.Migrate). Safe to run again and from\nseveral processes at once.")
	url := f.databaseURL()
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := repository.Migrate(ctx, c.pool); err != nil {
		return err
	}
	version, _, err := repository.MigrationVersion(ctx, c.pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schema at version %d\n", version)
	return nil
}

func runMigrateDown(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate down", "--yes [flags]",
		"Reverts every migration: drops all pgtask tables, functions and tasks. Needs --yes.")
	url := f.databaseURL()
	yes := f.Bool("yes", false, "confirm that every pgtask table and task is to be dropped")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if !*yes {
		return f.usagef("--yes: this drops every pgtask table and task; pass --yes to confirm")
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := repository.MigrateDown(ctx, c.pool); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "schema removed (version 0)")
	return nil
}

func runMigrateVersion(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask migrate version", "[flags]",
		"Prints the applied migration version (0 when none), followed by \"(dirty)\" when a\nfailed migration left the schema half applied.")
	url := f.databaseURL()
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
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
