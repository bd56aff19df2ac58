package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/repository"
)

func TestSchedule(t *testing.T) {
	t.Run("AddListShowSetPauseResumeRunRemove", func(t *testing.T) {
		f := setup(t)
		wantContains(t, f.ok("schedule", "list"), "no schedules")
		wantContains(t, f.ok("schedule", "add", "nightly", "--topic", "t", "--spec", "0 3 * * *", "--time-zone", "Europe/Paris",
			"--identifier", "report-{time}", "--input", `{"kind":"nightly"}`, "--priority", "2", "--catch-up", "3"),
			`schedule "nightly" added: next fire `, " 03:00:00 CE")
		wantContains(t, f.ok("schedule", "list"), "SCHEDULE", "nightly", "0 3 * * *", "Europe/Paris", "running")
		show := f.ok("schedule", "show", "nightly", "--next", "2")
		wantContains(t, show, "report-{time}", `{"kind":"nightly"}`, "SUPERSEDE", "up to 3 missed times", "coming fire times:", "03:00:00 CE")

		var listed schedulesJSON
		if err := json.Unmarshal([]byte(f.ok("schedule", "list", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed.Schedules) != 1 || listed.Schedules[0].Spec != "0 3 * * *" || listed.Schedules[0].CatchUp != 3 ||
			listed.Schedules[0].Insertion != "SUPERSEDE" || listed.Schedules[0].NextFire == nil {
			t.Errorf("list --json: %+v", listed)
		}

		wantContains(t, f.ok("schedule", "set", "nightly", "--spec", "@every 90s", "--insertion", "append"), `schedule "nightly" changed`)
		sc, err := f.repo.Schedule(f.ctx, f.pool, "nightly")
		if err != nil || sc.Spec != "@every 90s" || *sc.Insertion != repository.Append || sc.Priority != 2 || sc.TimeZone != "Europe/Paris" {
			t.Errorf("after set: %+v, %v", sc, err)
		}
		wantContains(t, f.ok("schedule", "pause", "nightly"), `schedule "nightly" paused`)
		wantContains(t, f.ok("schedule", "list"), "paused")
		wantContains(t, f.ok("schedule", "resume", "nightly"), `schedule "nightly" resumed: next fire`)
		wantContains(t, f.ok("schedule", "run-now", "nightly"), `schedule "nightly" pushed task`)
		tasks, err := f.repo.Page(f.ctx, f.pool, "t", repository.TaskFilter{Reference: "schedule:nightly"}, 0, 10, repository.Forward)
		if err != nil || len(tasks) != 1 || !strings.HasPrefix(tasks[0].Identifier, "report-20") || tasks[0].Priority != 2 {
			t.Errorf("run-now pushed %+v, %v", tasks, err)
		}
		wantContains(t, f.ok("schedule", "remove", "nightly"), `schedule "nightly" removed`)
		wantRuntime(t, f.cli("schedule", "rm", "nightly"), repository.ErrUnknownSchedule)
		wantRuntime(t, f.cli("schedule", "show", "nightly"), repository.ErrUnknownSchedule)
	})

	t.Run("BadInputIsRefusedAndNothingWritten", func(t *testing.T) {
		f := setup(t)
		f.ok("schedule", "add", "taken", "--topic", "t", "--spec", "@hourly")
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "61 * * * *"), "spec", "61")
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "@every -5s"), "interval -5s is negative")
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "@hourly", "--time-zone", "Mars/Olympus"), `unknown time zone "Mars/Olympus"`)
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t"), "--spec is required")
		// an empty zone ("--time-zone $TZ", unset) was taken as UTC
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "@hourly", "--time-zone", ""), "--time-zone is empty")
		wantUsage(t, f.cli("schedule", "set", "taken", "--time-zone", "", "--priority", "3"), "--time-zone is empty")
		wantUsage(t, f.cli("schedule", "add", "a", "--spec", "@hourly"), "--topic is required")
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "@hourly", "--catch-up", "-1"), "catch-up -1 is negative")
		wantUsage(t, f.cli("schedule", "add", "a", "--topic", "t", "--spec", "@hourly", "--insertion", "sideways"), "--insertion", "sideways")
		wantUsage(t, f.cli("schedule", "add", "", "--topic", "t", "--spec", "@hourly"), "schedule name is empty")
		wantUsage(t, f.cli("schedule", "add", "a\tb", "--topic", "t", "--spec", "@hourly"), "schedule name has a control character (U+0009)")
		// a name whose {time} placeholders make the default identifier too long is
		// refused before connecting (the database URL leads nowhere)
		wantUsage(t, runCLI(f.ctx, "", nil, "schedule", "add", strings.Repeat("{time}", 41), "--topic", "t", "--spec", "@hourly",
			"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"), "name as its tasks' identifier", "identifier")
		wantUsage(t, f.cli("schedule", "set", "taken"), "no setting given")
		wantUsage(t, f.cli("schedule", "set", "taken", "--spec", "nope"), "spec")
		wantRuntime(t, f.cli("schedule", "add", "a", "--topic", "nope", "--spec", "@hourly"), repository.ErrUnknownTopic)
		wantRuntime(t, f.cli("schedule", "add", "taken", "--topic", "t", "--spec", "@daily"), repository.ErrScheduleExists)
		wantRuntime(t, f.cli("schedule", "set", "taken", "--topic", "nope"), repository.ErrUnknownTopic)
		// an identifier too long once {time} is replaced, stored before 000044 refused
		// it: other settings still change; a longer identifier is refused
		long := strings.Repeat("x", 481) + "{time}"
		conn, err := f.pool.Acquire(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		for _, q := range []string{"BEGIN", "SET LOCAL session_replication_role = replica",
			"UPDATE task_schedule SET identifier = '" + long + "' WHERE name = 'taken'", "COMMIT"} {
			if _, err := conn.Exec(f.ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		f.ok("schedule", "set", "taken", "--priority", "3")
		f.ok("schedule", "set", "taken", "--priority", "4", "--identifier", long) // the same, given again
		wantUsage(t, f.cli("schedule", "set", "taken", "--identifier", long+"x"), "identifier is 502 characters long")
		wantRuntime(t, f.cli("schedule", "pause", "ghost"), repository.ErrUnknownSchedule)
		list, err := f.repo.Schedules(f.ctx, f.pool)
		if err != nil || len(list) != 1 || list[0].Spec != "@hourly" || list[0].Topic != "t" {
			t.Errorf("schedules after the refusals: %+v, %v", list, err)
		}
	})
}
