package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

const scheduleHelp = `
A schedule pushes a task to its topic at each fire time of its --spec, read in its
--time-zone (an IANA name; default UTC):
  a cron expression of 5 fields (minute hour day-of-month month day-of-week) or 6
  (seconds first), with ranges (1-5), steps (*/15), lists (1,15) and names (jan, mon-fri);
  @yearly, @monthly, @weekly, @daily, @hourly; or '@every DURATION' (whole seconds: 90s).
Each task has the schedule's name as identifier unless --identifier says otherwise;
{time} in --identifier or --input is replaced by the fire time (RFC 3339, UTC). Tasks
are pushed with --insertion SUPERSEDE by default: a task still READY when the next fire
comes is made REDUNDANT. Every running processor (pgtask dev, pgtask serve, cmd/processor)
fires the due schedules once per heartbeat; each fire time is pushed once.
A schedule found late (nothing ran) pushes its latest missed time only, or with
--catch-up N up to the N latest (the times due within two heartbeats before the round
are on time: all pushed).`

// scheduleFlags are the settings shared by "schedule add" and "schedule set".
type scheduleFlags struct {
	topic, spec, zone, identifier, input, insertion *string
	priority, catchUp                               *int
}

var scheduleSettingNames = []string{"topic", "spec", "time-zone", "identifier", "input", "insertion", "priority", "catch-up"}

func (f *flags) scheduleFlags() *scheduleFlags {
	return &scheduleFlags{
		topic:      f.String("topic", "", "`TOPIC` the tasks are pushed to"),
		spec:       f.String("spec", "", "when it fires: a cron `SPEC` such as '*/5 * * * *', '@hourly' or '@every 90s'"),
		zone:       f.String("time-zone", "", "IANA time `ZONE` the spec is read in, such as Europe/Paris (default UTC)"),
		identifier: f.String("identifier", "", "`IDENTIFIER` of each task, {time} replaced by the fire time (default: the schedule's name)"),
		input:      f.String("input", "", "`TEXT` input of each task, {time} replaced by the fire time"),
		insertion:  f.String("insertion", "", "`MODE` each task is pushed with: append, replace, supersede or delete (default supersede)"),
		priority:   f.Int("priority", 0, "`PRIORITY` of each task (lower first)"),
		catchUp:    f.Int("catch-up", 0, "missed fire times (`N`) pushed when found late (0: the latest only)"),
	}
}

// apply changes the settings given on the command line, keeping the others, and checks
// the result as the repository will.
func (s *scheduleFlags) apply(f *flags, to *repository.ScheduleSettings) error {
	stored := *to
	if f.given("time-zone") && *s.zone == "" {
		// a variable come out empty ("--time-zone $TZ"), which UTC would hide
		return f.usagef("--time-zone is empty: give a zone such as UTC or Europe/Paris, or leave the flag out (a new schedule's zone is UTC)")
	}
	set := map[string]func(){
		"topic":      func() { to.Topic = *s.topic },
		"spec":       func() { to.Spec = *s.spec },
		"time-zone":  func() { to.TimeZone = *s.zone },
		"identifier": func() { to.Identifier = *s.identifier },
		"input":      func() { to.Input = *s.input },
		"catch-up":   func() { to.CatchUp = *s.catchUp },
	}
	for name, apply := range set {
		if f.given(name) {
			apply()
		}
	}
	if f.given("priority") {
		p, err := f.checkPriority(*s.priority)
		if err != nil {
			return err
		}
		to.Priority = p
	}
	if f.given("insertion") {
		i, err := f.parseInsertion("insertion", *s.insertion)
		if err != nil {
			return err
		}
		to.Insertion = &i
	}
	// a zone or identifier stored before a check refused it still changes, unless given
	if err := to.ValidateChange(stored, f.given("time-zone")); err != nil {
		return f.usagef("%s", stripInvalid(err))
	}
	return nil
}

func (s *scheduleFlags) anyGiven(f *flags) bool {
	for _, n := range scheduleSettingNames {
		if f.given(n) {
			return true
		}
	}
	return false
}

// scheduleArg parses the one positional argument, a schedule name.
func (f *flags) scheduleArg(args []string) (string, error) {
	pos, err := f.args(args, 1, 1, "schedule NAME")
	if err != nil {
		return "", err
	}
	if err := repository.ValidateScheduleName(pos[0]); err != nil {
		return "", f.usagef("%s", stripInvalid(err))
	}
	return pos[0], nil
}

func runScheduleAdd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule add", "NAME --topic T --spec SPEC [flags]", "Creates schedule NAME.\n"+scheduleHelp)
	url := f.databaseURL()
	settings := f.scheduleFlags()
	paused := f.Bool("paused", false, "create it paused (pgtask schedule resume starts it)")
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	if err := repository.ValidateNewScheduleName(name); err != nil {
		return f.usagef("%s", stripInvalid(err))
	}
	if err := f.need("topic", "spec"); err != nil {
		return err
	}
	s := repository.ScheduleSettings{Paused: *paused}
	if err := settings.apply(f, &s); err != nil {
		return err
	}
	// without --identifier the tasks' identifier is the name, {time} replaced at each
	// fire: checked before connecting, as a given identifier is
	if err := repository.CheckNameAsIdentifier(name, s); err != nil {
		return f.usagef("the name as its tasks' identifier: %s", stripInvalid(err))
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	sc, err := c.repo.CreateSchedule(ctx, c.pool, name, s)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q added: %s\n", name, describeNext(sc))
	return nil
}

func runScheduleSet(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule set", "NAME --SETTING VALUE... [flags]",
		"Changes the settings of schedule NAME given on the command line and keeps the others.\n"+
			"A new --spec, or a new --time-zone of a cron spec, restarts its fire times from now\n"+
			"(a new --time-zone of an @every schedule changes nothing, its phase kept).\n"+
			"--identifier '' goes back to the schedule's name.\n"+scheduleHelp)
	url := f.databaseURL()
	settings := f.scheduleFlags()
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	if !settings.anyGiven(f) {
		return f.usagef("no setting given (want at least one of --topic, --spec, --time-zone, --identifier, --input, --insertion, --priority, --catch-up)")
	}
	// Check the flags alone before connecting; the stored settings are checked again
	// with them. The identifier is checked there only, against the stored one (one
	// stored before a check refused it may be given again).
	check := repository.ScheduleSettings{Topic: "t", Spec: "@daily", Identifier: *settings.identifier}
	if err := settings.apply(f, &check); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	var bad error
	sc, err := c.repo.UpdateSchedule(ctx, c.pool, name, func(s *repository.ScheduleSettings) { bad = settings.apply(f, s) })
	if bad != nil {
		return bad
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q changed: %s\n", name, describeNext(sc))
	return nil
}

func runScheduleList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule list", "[flags]", "Lists the schedules with their next fire times, by name.")
	url := f.databaseURL()
	asJSON := f.Bool("json", false, `print {"schedules": [...]} (as GET /schedules does) instead of a table`)
	p := f.rawFlag()
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := c.repo.Schedules(ctx, c.pool)
	if err != nil {
		return err
	}
	if *asJSON {
		out := schedulesJSON{Schedules: make([]wire.Schedule, len(list))}
		for i, s := range list {
			out.Schedules[i] = wire.FromSchedule(s)
		}
		return p.json(e.stdout, out)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stdout, "no schedules (add one with: pgtask schedule add NAME --topic T --spec SPEC)")
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "SCHEDULE\tTOPIC\tSPEC\tTIME_ZONE\tSTATUS\tNEXT_FIRE\tLAST_FIRE\tFIRES")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.cell(s.Name), p.cell(s.Topic), p.cell(s.Spec), p.cell(s.TimeZone),
			scheduleStatus(s), formatTime(s.NextFire), formatTime(s.LastFire), s.Fires)
	}
	return tw.Flush()
}

func runScheduleShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule show", "NAME [flags]", "Shows schedule NAME in full, with its next fire times.")
	url := f.databaseURL()
	asJSON := f.Bool("json", false, "print JSON (as GET /schedules/{name} does)")
	next := f.Int("next", 5, "how many coming fire times (`N`) to show")
	p := f.rawFlag()
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	if *next < 0 || *next > 1000 {
		return f.usagef("--next: %d is out of range [0, 1000]", *next)
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.repo.Schedule(ctx, c.pool, name)
	if err != nil {
		return err
	}
	if *asJSON {
		return p.json(e.stdout, wire.FromSchedule(s))
	}
	printSchedule(e.stdout, p, s, *next)
	return nil
}

func printSchedule(w io.Writer, p *printer, s repository.Schedule, next int) {
	orDash := func(v string) string {
		if v == "" {
			return "-"
		}
		return v
	}
	identifier := s.Identifier
	if identifier == "" {
		identifier = s.Name + " (the schedule's name)"
	}
	insertion := repository.Supersede
	if s.Insertion != nil {
		insertion = *s.Insertion
	}
	catchUp := "the latest missed time only"
	if s.CatchUp > 0 {
		catchUp = fmt.Sprintf("up to %d missed times", s.CatchUp)
	}
	tw := table(w)
	fmt.Fprintf(tw, "schedule:\t%s\n", p.cell(s.Name))
	fmt.Fprintf(tw, "topic:\t%s\n", p.cell(s.Topic))
	fmt.Fprintf(tw, "spec:\t%s (%s)\n", p.cell(s.Spec), p.cell(s.TimeZone))
	fmt.Fprintf(tw, "status:\t%s\n", scheduleStatus(s))
	fmt.Fprintf(tw, "identifier:\t%s\n", p.cell(identifier))
	fmt.Fprintf(tw, "input:\t%s\n", p.cell(orDash(s.Input)))
	fmt.Fprintf(tw, "priority:\t%d\n", s.Priority)
	fmt.Fprintf(tw, "insertion:\t%s\n", insertion)
	fmt.Fprintf(tw, "when late:\t%s\n", catchUp)
	fmt.Fprintf(tw, "next fire:\t%s\n", zonedTime(s.NextFire, s.TimeZone))
	fmt.Fprintf(tw, "last fire:\t%s\n", zonedTime(s.LastFire, s.TimeZone))
	if !s.LastFiredAt.IsZero() {
		fmt.Fprintf(tw, "last pushed:\t%s (%s late, task %d)\n", formatTime(s.LastFiredAt), s.LastFiredAt.Sub(s.LastFire).Round(time.Millisecond), s.LastSequence)
	}
	fmt.Fprintf(tw, "fires:\t%d\n", s.Fires)
	fmt.Fprintf(tw, "created:\t%s\n", formatTime(s.Created))
	fmt.Fprintf(tw, "updated:\t%s\n", formatTime(s.Updated))
	_ = tw.Flush()
	if next == 0 || s.Paused {
		return
	}
	now := time.Now()
	if !s.NextFire.IsZero() && s.NextFire.Before(now) {
		// No processor has fired it (none runs, or all run with --no-schedules): the
		// times after it depend on what the next one to look pushes ("when late").
		fmt.Fprintf(w, "coming fire times:\n  %s (overdue: pushed when a processor next looks for due schedules, as \"when late\" says)\n",
			zonedTime(s.NextFire, s.TimeZone))
		return
	}
	times := comingFires(s, next, now)
	if len(times) == 0 {
		return
	}
	fmt.Fprintln(w, "coming fire times:")
	for _, t := range times {
		fmt.Fprintf(w, "  %s\n", zonedTime(t, s.TimeZone))
	}
}

// comingFires returns the schedule's next n fire times: its next fire time and those
// after it, or, when it has none yet, the first n after now.
func comingFires(s repository.Schedule, n int, now time.Time) []time.Time {
	if s.NextFire.IsZero() {
		times, _ := s.FiresAfter(now, n)
		return times
	}
	// From the next fire time itself: one nanosecond before it, an @every spec's times
	// (from + D, truncated to the second) came D less one second late.
	after, _ := s.FiresAfter(s.NextFire, n-1)
	return append([]time.Time{s.NextFire}, after...)
}

// zonedTime prints t in the schedule's zone, with the zone's abbreviation.
func zonedTime(t time.Time, zone string) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(zoneOf(zone)).Format("2006-01-02 15:04:05 MST")
}

func zoneOf(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC
	}
	return loc
}

func runSchedulePause(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule pause", "NAME [flags]",
		"Pauses schedule NAME: no processor fires it until 'pgtask schedule resume'.")
	url := f.databaseURL()
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.repo.PauseSchedule(ctx, c.pool, name); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q paused\n", name)
	return nil
}

func runScheduleResume(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule resume", "NAME [flags]",
		"Resumes paused schedule NAME from its next fire time after now: the fire times it\n"+
			"skipped while paused are not pushed, unless --replay (then the latest of them, or up\n"+
			"to its --catch-up).")
	url := f.databaseURL()
	replay := f.Bool("replay", false, "push the fire times skipped while paused, as for a late schedule")
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	sc, err := c.repo.ResumeSchedule(ctx, c.pool, name, *replay)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q resumed: %s\n", name, describeNext(sc))
	return nil
}

func runScheduleRemove(ctx context.Context, e *env, args []string) error {
	return removeSchedule(ctx, e, "remove", args)
}

func runScheduleRm(ctx context.Context, e *env, args []string) error {
	return removeSchedule(ctx, e, "rm", args)
}

// removeSchedule is "schedule remove", also called "schedule rm".
func removeSchedule(ctx context.Context, e *env, verb string, args []string) error {
	f := newFlags(e, "pgtask schedule "+verb, "NAME [flags]", "Removes schedule NAME. The tasks it pushed stay.")
	url := f.databaseURL()
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	removed, err := c.repo.RemoveSchedule(ctx, c.pool, name)
	if err != nil {
		return err
	}
	if !removed {
		return fmt.Errorf("schedule %s: schedule %q: %w", verb, name, repository.ErrUnknownSchedule)
	}
	fmt.Fprintf(e.stdout, "schedule %q removed\n", name)
	return nil
}

func runScheduleRunNow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask schedule run-now", "NAME [flags]",
		"Pushes the task of schedule NAME now, paused or not, as a fire at this time would;\nits fire times stay as they are.")
	url := f.databaseURL()
	name, err := f.scheduleArg(args)
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	task, err := c.repo.RunSchedule(ctx, c.pool, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "schedule %q pushed task %d to topic %q\n", name, task.Sequence, task.Topic)
	return nil
}

// schedulesJSON is the --json output of "schedule list" (as GET /schedules answers).
type schedulesJSON struct {
	Schedules []wire.Schedule `json:"schedules"`
}

func scheduleStatus(s repository.Schedule) string {
	if s.Paused {
		return "paused"
	}
	return "running"
}

// describeNext says when a schedule fires next.
func describeNext(s repository.Schedule) string {
	if s.Paused {
		return "paused"
	}
	if s.NextFire.IsZero() {
		return "next fire computed by the first processor that sees it"
	}
	return "next fire " + zonedTime(s.NextFire, s.TimeZone)
}
