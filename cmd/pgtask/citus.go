package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pgtask/pgtask/repository"
)

const citusEnableAbout = `
Turns a pgtask database on a Citus coordinator into a distributed one, keeping every
task, in one transaction (repository.DistributeCitus; docs/citus.md): task, task_topic,
task_topic_limit and task_tally distributed by topic and co-located, task_owner and
task_schedule plain tables of the coordinator. Refuses, changing nothing, without the citus extension or
a worker node for the shards, when the database is distributed already, when the schema
is not at the newest migration, or while a processor runs (an owner heart-beating
within --owner-timeout). Writers wait while it runs; restart every process that used
the database before (pgtask serve, programs that push), as the processors are.

Afterwards processors, Go programs and SQL callers work on the distributed tables as
before; pgtask migrate applies later migrations in their Citus forms, and does not
revert them (docs/citus.md).`

func runCitusEnable(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask citus enable", "[flags]", citusEnableAbout)
	url := f.databaseURL()
	ownerTimeout := f.duration("owner-timeout", time.Minute, "an owner heart-beating within this `DURATION` is a running processor")
	if err := f.noArgs(args); err != nil {
		return err
	}
	if *ownerTimeout <= 0 {
		return f.usagef("--owner-timeout: %v is not positive", *ownerTimeout)
	}
	c, err := f.connectAnySchema(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	r, err := repository.DistributeCitus(ctx, c.pool, repository.CitusOptions{OwnerTimeout: *ownerTimeout})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "distributed %d tasks of %d topics over %d shards on %d workers in %v\n",
		r.Tasks, r.Topics, r.Shards, r.Workers, r.Took.Round(time.Millisecond))
	return nil
}
