package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

const topicSettingsHelp = `
Settings (each optional; durations take Go syntax such as 500ms, 30s, 2h, or days: 7d):
a task is leased at most --max-attempts times; after a FAILURE or an expiry with attempts
left it waits min(cap, base*2^(attempt-1)) plus a random jitter below --backoff-jitter.
--queue-cap limits the READY and ACTIVE tasks of the topic (0: unlimited): a push, a
revive or a junction beyond it is refused whole (a replacing push counts net of the READY
tasks it ends); --retention is how long finished tasks are kept (0: forever): every
running processor applies it once a minute, 'pgtask purge --retention' at once.

Limits hold across every process, enforced by the database at each poll (none: no
limit; a change takes effect at the next poll; leases of a dead processor count until
they expire): --concurrency N tasks ACTIVE at once; --key-concurrency K tasks of one
concurrency key (pgtask push --key) ACTIVE at once; --rate N/PERIOD task starts per
period (50/s, 600/1m, 5/2s) with bursts of up to --burst (default N); --fair takes the
keys with READY tasks in turn, so one key's backlog does not hold back the others.`

// settingFlags are the per-topic settings shared by "topic add" and "topic set".
type settingFlags struct {
	maxAttempts   *int
	backoffBase   *time.Duration
	backoffCap    *time.Duration
	backoffJitter *time.Duration
	queueCap      *int64
	retention     *time.Duration
	concurrency   *string
	keyLimit      *string
	rate          *string
	burst         *string
	fair          *bool
	// burstWithoutRate is set by apply when --burst meets a topic without a rate.
	burstWithoutRate bool
	// backoffRefused is set by update when the settings would have retries wait the
	// cap, never the base: a usage error naming the flag.
	backoffRefused error
}

var settingNames = []string{"max-attempts", "backoff-base", "backoff-cap", "backoff-jitter", "queue-cap", "retention",
	"concurrency", "key-concurrency", "rate", "burst", "fair"}

func (f *flags) settingFlags() *settingFlags {
	return &settingFlags{
		maxAttempts:   f.Int("max-attempts", 0, "how many attempts (`N`) a task gets before a failure is final (1: no retry; default 25)"),
		backoffBase:   f.duration("backoff-base", 0, "first retry delay (`DURATION`)"),
		backoffCap:    f.duration("backoff-cap", 0, "longest retry delay (`DURATION`)"),
		backoffJitter: f.duration("backoff-jitter", 0, "random extra delay added to each retry, below this `DURATION`"),
		queueCap:      f.Int64("queue-cap", 0, "most READY and ACTIVE tasks (`N`); a push or revive beyond it fails (0: unlimited)"),
		retention:     f.duration("retention", 0, "how long (`DURATION`) finished tasks are kept before purging (0: forever)"),
		concurrency:   f.String("concurrency", "", "most tasks ACTIVE at once across every process (`N`; none: no limit)"),
		keyLimit:      f.String("key-concurrency", "", "most tasks of one concurrency key ACTIVE at once (`K`; none: no limit)"),
		rate:          f.String("rate", "", "most task starts per period across every process (`N/PERIOD`, e.g. 50/s, 600/1m; none: no limit)"),
		burst:         f.String("burst", "", "most tasks the rate limit lets start at once after a quiet time (`N`; default: the rate's N)"),
		fair:          f.Bool("fair", false, "take the concurrency keys with READY tasks in turn (--fair=false: in order)"),
	}
}

// limitFlag parses a limit flag: a whole number of at least 1, or "none" (0: no limit).
func limitFlag(f *flags, name, v string) (int32, error) {
	if v == "none" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if errors.Is(err, strconv.ErrRange) {
		return 0, f.usagef("--%s: %s is out of range (want a whole number from 1 to %d, or none: no limit)", name, v, math.MaxInt32)
	}
	if err != nil {
		return 0, f.usagef("--%s: %q is not a whole number (or none: no limit)", name, v)
	}
	if n < 1 {
		return 0, f.usagef("--%s: %d is below 1 (none: no limit; pause a topic to run none of its tasks)", name, n)
	}
	return int32(n), nil
}

// parseRate parses --rate: N/PERIOD, the period a Go duration or a bare unit (s, m, h:
// one of it), or "none".
func parseRate(f *flags, v string) (int32, time.Duration, error) {
	if v == "none" {
		return 0, 0, nil
	}
	count, per, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, f.usagef("--rate: %q has no period (want N/PERIOD, e.g. 50/s or 600/1m)", v)
	}
	n, err := limitFlag(f, "rate", count)
	if err != nil {
		return 0, 0, err
	}
	if per == "s" || per == "m" || per == "h" || per == "ms" {
		per = "1" + per
	}
	d, err := time.ParseDuration(per)
	if err != nil || d < time.Millisecond {
		return 0, 0, f.usagef("--rate: period %q is not a duration of at least 1ms (want N/PERIOD, e.g. 50/s or 600/1m)", per)
	}
	if d%time.Millisecond != 0 {
		return 0, 0, f.usagef("--rate: period %v is not a whole number of milliseconds", d)
	}
	return n, d, nil
}

// anyGiven reports whether any setting flag was given.
func (s *settingFlags) anyGiven(f *flags) bool {
	for _, n := range settingNames {
		if f.given(n) {
			return true
		}
	}
	return false
}

// check validates the given setting flags.
func (s *settingFlags) check(f *flags) error {
	if f.given("max-attempts") && *s.maxAttempts < 1 {
		return f.usagef("--max-attempts: %d is below 1", *s.maxAttempts)
	}
	if f.given("max-attempts") && *s.maxAttempts > 1<<31-1 {
		return f.usagef("--max-attempts: %d is too large", *s.maxAttempts)
	}
	if f.given("queue-cap") && *s.queueCap < 0 {
		return f.usagef("--queue-cap: %d is negative", *s.queueCap)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
	}{{"backoff-base", s.backoffBase}, {"backoff-cap", s.backoffCap}, {"backoff-jitter", s.backoffJitter}, {"retention", s.retention}} {
		// the database keeps milliseconds (the repository refuses the rest)
		if f.given(d.name) && *d.v%time.Millisecond != 0 {
			return f.usagef("--%s: %v is not a whole number of milliseconds", d.name, *d.v)
		}
	}
	for _, l := range []struct {
		name string
		v    *string
	}{{"concurrency", s.concurrency}, {"key-concurrency", s.keyLimit}} {
		if f.given(l.name) {
			if _, err := limitFlag(f, l.name, *l.v); err != nil {
				return err
			}
		}
	}
	rate := int32(-1) // not given
	if f.given("rate") {
		var err error
		if rate, _, err = parseRate(f, *s.rate); err != nil {
			return err
		}
	}
	if f.given("burst") {
		if *s.burst == "none" {
			return f.usagef("--burst: none is not a burst (give N of at least 1, or leave --burst out for the rate's N)")
		}
		if _, err := limitFlag(f, "burst", *s.burst); err != nil {
			return err
		}
		if rate == 0 {
			return f.usagef("--burst: given with --rate none (a burst needs a rate)")
		}
	}
	// The repository's backoff rule, where the flags alone decide it: a base and a cap
	// with retries (--max-attempts above 1). Otherwise update checks it against the
	// topic's stored settings.
	if f.given("backoff-base") && f.given("backoff-cap") && f.given("max-attempts") && *s.maxAttempts > 1 {
		t := repository.TopicSettings{MaxAttempts: int32(*s.maxAttempts), BackoffBase: *s.backoffBase, BackoffCap: *s.backoffCap}
		if t.BackoffRefused(repository.TopicSettings{}) {
			return s.backoffError(f, t)
		}
	}
	return nil
}

// backoffError is the usage error of settings t whose retries would wait the cap, never
// the base (repository.TopicSettings.BackoffRefused), naming the flag that made them so.
func (s *settingFlags) backoffError(f *flags, t repository.TopicSettings) error {
	const why = "retries would wait the cap, never the base"
	switch {
	case f.given("backoff-cap"):
		return f.usagef("--backoff-cap: %s is below the backoff base %s: %s", shortDuration(t.BackoffCap), shortDuration(t.BackoffBase), why)
	case f.given("backoff-base"):
		return f.usagef("--backoff-base: %s is above the backoff cap %s: %s", shortDuration(t.BackoffBase), shortDuration(t.BackoffCap), why)
	}
	return f.usagef("--max-attempts: %d with the backoff cap %s below the base %s: %s (give --backoff-cap too)",
		t.MaxAttempts, shortDuration(t.BackoffCap), shortDuration(t.BackoffBase), why)
}

// apply changes the settings named on the command line, keeping the others.
func (s *settingFlags) apply(f *flags, t *repository.TopicSettings) {
	if f.given("max-attempts") {
		t.MaxAttempts = int32(*s.maxAttempts)
	}
	if f.given("backoff-base") {
		t.BackoffBase = *s.backoffBase
	}
	if f.given("backoff-cap") {
		t.BackoffCap = *s.backoffCap
	}
	if f.given("backoff-jitter") {
		t.BackoffJitter = *s.backoffJitter
	}
	if f.given("queue-cap") {
		t.QueueCap = *s.queueCap
	}
	if f.given("retention") {
		t.Retention = *s.retention
	}
	// checked by check
	if f.given("concurrency") {
		t.Concurrency, _ = limitFlag(f, "concurrency", *s.concurrency)
	}
	if f.given("key-concurrency") {
		t.KeyConcurrency, _ = limitFlag(f, "key-concurrency", *s.keyLimit)
	}
	if f.given("rate") {
		t.Rate, t.RatePeriod, _ = parseRate(f, *s.rate)
		t.RateBurst = 0 // the rate's N, unless given
	}
	if f.given("burst") {
		t.RateBurst, _ = limitFlag(f, "burst", *s.burst)
		s.burstWithoutRate = t.Rate == 0
	}
	if f.given("fair") {
		t.Fair = *s.fair
	}
}

// update is the change UpdateSettings makes: apply, then the repository's backoff rule
// (TopicSettings.BackoffRefused) said in the flags' names. Refused, it leaves the
// settings as they were, which UpdateSettings does not write, and refused reports it.
func (s *settingFlags) update(f *flags, t *repository.TopicSettings) {
	was := *t
	s.apply(f, t)
	s.backoffRefused = nil
	if t.BackoffRefused(was) {
		s.backoffRefused = s.backoffError(f, *t)
		*t = was
	}
}

// refused is the error of an UpdateSettings with update, which returned err: a usage
// error naming the flag when update refused the backoff, or when the topic has no rate
// for --burst (check knows only the flags); err else.
func (s *settingFlags) refused(f *flags, topic string, err error) error {
	if s.backoffRefused != nil {
		return s.backoffRefused
	}
	if err != nil && s.burstWithoutRate && errors.Is(err, repository.ErrInvalid) {
		return f.usagef("--burst: topic %q has no rate limit (give --rate N/PERIOD too)", topic)
	}
	return err
}

func runTopicAdd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic add", "NAME [flags]",
		"Creates (registers) topic NAME: a row of task_topic, its tasks in the shared table of its bucket\n(or, with --dedicated, in a table of its own). Adding a topic that exists is not an\nerror; settings given are then applied to it.\n"+topicSettingsHelp)
	url := f.databaseURL()
	settings := f.settingFlags()
	dedicated := f.Bool("dedicated", false, "give the topic a table of its own (see pgtask topic dedicate)")
	pos, err := f.topicArg(args, "topic NAME")
	if err != nil {
		return err
	}
	if err := repository.ValidateNewTopic(pos[0]); err != nil {
		return f.usagef("topic NAME: %s", stripInvalid(err))
	}
	if err := settings.check(f); err != nil {
		return err
	}
	name := pos[0]
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	var (
		created bool
		topic   repository.Topic
	)
	// The registration and the settings, in one transaction: all or nothing.
	register := func(tx pgx.Tx) error {
		if created, err = c.repo.CreateTopic(ctx, tx, name); err != nil {
			return err
		}
		if !settings.anyGiven(f) {
			return nil
		}
		topic, err = c.repo.UpdateSettings(ctx, tx, name, func(t *repository.TopicSettings) { settings.update(f, t) })
		return settings.refused(f, name, err)
	}
	existing := false // --dedicated of a topic registered already
	if *dedicated {
		// A new topic is registered, given its settings and dedicated in one
		// transaction, which commits at once (dedicating locks the topic's bucket until
		// then): a refusal leaves no topic behind, shared or not.
		errExists := errors.New("exists")
		var done bool
		err = retryLocked(ctx, func() error {
			// Atomically's, READ COMMITTED whatever the database's default: the
			// topic's row is read as it is once locked
			return repository.Atomically(ctx, c.pool, func(tx pgx.Tx) error {
				if err := register(tx); err != nil {
					return err
				}
				if !created {
					return errExists
				}
				done, err = c.repo.Dedicate(ctx, tx, name)
				return err
			})
		})
		if errors.Is(err, errExists) {
			// Dedicating a topic registered already commits on its own, and may be
			// refused (a topic in use): the settings are applied after it, so that a
			// refusal leaves the topic as it was. They were checked above (the
			// transaction rolled back), so that settings the repository refuses leave
			// nothing either.
			existing, err = true, nil
		} else if err == nil {
			fmt.Fprintf(e.stdout, "topic %q added\n", name)
			if err := reportDedicated(ctx, e, c, name, done); err != nil {
				return err
			}
		}
	} else {
		err = repository.Atomically(ctx, c.pool, register)
	}
	if err != nil {
		return err
	}
	if existing {
		fmt.Fprintf(e.stdout, "topic %q already exists\n", name)
		if err := dedicate(ctx, e, c, name); err != nil {
			if settings.anyGiven(f) {
				return fmt.Errorf("%w (the settings given were not applied)", err)
			}
			return err
		}
		if settings.anyGiven(f) {
			topic, err = c.repo.UpdateSettings(ctx, c.pool, name, func(t *repository.TopicSettings) { settings.update(f, t) })
			if err := settings.refused(f, name, err); err != nil {
				return err
			}
		}
	} else if !*dedicated {
		if created {
			fmt.Fprintf(e.stdout, "topic %q added\n", name)
		} else {
			fmt.Fprintf(e.stdout, "topic %q already exists\n", name)
		}
	}
	if settings.anyGiven(f) {
		fmt.Fprintf(e.stdout, "settings: %s\n", describeSettings(topic.TopicSettings))
	}
	return nil
}

func runTopicSet(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic set", "NAME --SETTING VALUE... [flags]",
		"Changes the settings given on the command line and keeps the others.\n"+topicSettingsHelp)
	url := f.databaseURL()
	settings := f.settingFlags()
	pos, err := f.topicArg(args, "topic NAME")
	if err != nil {
		return err
	}
	if !settings.anyGiven(f) {
		return f.usagef("no setting given (want at least one of --%s)", strings.Join(settingNames, ", --"))
	}
	if err := settings.check(f); err != nil {
		return err
	}
	name := pos[0]
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	topic, err := c.repo.UpdateSettings(ctx, c.pool, name, func(t *repository.TopicSettings) { settings.update(f, t) })
	if err := settings.refused(f, name, err); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "topic %q: %s\n", name, describeSettings(topic.TopicSettings))
	return nil
}

func runTopicList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic list", "[flags]", "Lists the registered topics with their settings, by name.")
	url := f.databaseURL()
	asJSON := f.Bool("json", false, `print {"topics": [...]} (as GET /topics does) instead of a table`)
	p := f.rawFlag()
	if err := f.noArgs(args); err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	topics, err := c.repo.Topics(ctx, c.pool)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]wire.Topic, len(topics))
		for i, t := range topics {
			out[i] = wire.FromTopic(t, nil)
		}
		return p.json(e.stdout, topicsJSON{out})
	}
	if len(topics) == 0 {
		fmt.Fprintln(e.stdout, "no topics (add one with: pgtask topic add NAME)")
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "TOPIC\tSTATUS\tSTORAGE\tMAX_ATTEMPTS\tBACKOFF_BASE\tBACKOFF_CAP\tJITTER\tQUEUE_CAP\tRETENTION\tCREATED")
	for _, t := range topics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", p.cell(t.Name), status(t.Active), storage(t), t.MaxAttempts,
			shortDuration(t.BackoffBase), shortDuration(t.BackoffCap), shortDuration(t.BackoffJitter),
			orNone(t.QueueCap, "unlimited"), orForever(t.Retention), formatTime(t.Created))
	}
	return tw.Flush()
}

func runTopicShow(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic show", "NAME [flags]",
		"Shows topic NAME: its settings and limits, how much of the limits it uses now (ACTIVE\ntasks, keys at their limit and keys waiting, tokens left), and its task counts.")
	url := f.databaseURL()
	asJSON := f.Bool("json", false, "print the topic as GET /topics/{topic} does")
	p := f.rawFlag()
	pos, err := f.topicArg(args, "topic NAME")
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	name := pos[0]
	t, err := c.repo.Topic(ctx, c.pool, name)
	if err != nil {
		return err
	}
	stats, err := c.repo.Stats(ctx, c.pool, name)
	if err != nil {
		return err
	}
	usage, err := c.repo.LimitUsage(ctx, c.pool, name)
	if err != nil {
		return err
	}
	if *asJSON {
		out := wire.FromTopic(t, &stats)
		out.Usage = wire.FromUsage(usage)
		return p.json(e.stdout, out)
	}
	tw := table(e.stdout)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("topic", p.cell(t.Name))
	row("status", status(t.Active))
	row("storage", storage(t)+" ("+p.cell(t.Table)+")")
	row("created", formatTime(t.Created))
	row("settings", describeSettings(repository.TopicSettings{MaxAttempts: t.MaxAttempts, BackoffBase: t.BackoffBase,
		BackoffCap: t.BackoffCap, BackoffJitter: t.BackoffJitter, QueueCap: t.QueueCap, Retention: t.Retention}))
	row("limits", describeLimits(t.TopicSettings))
	if t.Concurrency > 0 {
		row("active", fmt.Sprintf("%d of %d", usage.Active, t.Concurrency))
	} else {
		row("active", fmt.Sprint(usage.Active))
	}
	if t.KeyConcurrency > 0 || t.Fair {
		waiting := fmt.Sprint(usage.KeysWaiting)
		if usage.KeysWaiting >= 10000 {
			waiting = "10000 or more"
		}
		row("keys", fmt.Sprintf("%d at their limit, %s with READY tasks", usage.KeysAtLimit, waiting))
	}
	if t.Rate > 0 {
		row("tokens", fmt.Sprintf("%.1f of %d", usage.Tokens, t.RateBurst))
	}
	capped := stats.Capped
	row("tasks", fmt.Sprintf("%s READY (%s of them delayed), %s ACTIVE, %s EXPIRED, %s FAILED, %s SUSPENDED",
		atLeast(stats.Ready, capped.Ready), atLeast(stats.Delayed, capped.Delayed), atLeast(stats.Active, capped.Active),
		atLeast(stats.Expired, capped.Expired), atLeast(stats.Failed, capped.Failed), atLeast(stats.Suspended, capped.Suspended)))
	if stats.OldestReady > 0 {
		row("oldest ready", shortDuration(stats.OldestReady.Round(time.Millisecond)))
	}
	return tw.Flush()
}

// storage says where a topic's tasks are: "shared" or "dedicated".
func storage(t repository.Topic) string {
	if t.Dedicated {
		return "dedicated"
	}
	return "shared"
}

func runTopicDedicate(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic dedicate", "NAME [flags]",
		`Gives topic NAME a table of its own and moves its tasks there. A dedicated topic is
vacuumed and analyzed alone, and purging or destroying it truncates or drops its table.
A topic with tasks must be paused (pgtask pause NAME) with none of its tasks ACTIVE.
The other topics of its bucket wait while PostgreSQL checks the tables; each attempt
waits for them a second at most, and the command tries up to 8 times before it gives up,
having changed nothing.`)
	url := f.databaseURL()
	pos, err := f.topicArg(args, "topic NAME")
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	return dedicate(ctx, e, c, pos[0])
}

// dedicate gives a topic a table of its own and says what happened.
func dedicate(ctx context.Context, e *env, c *conn, topic string) error {
	done, err := c.repo.Dedicate(ctx, c.pool, topic)
	if err != nil {
		return err
	}
	return reportDedicated(ctx, e, c, topic, done)
}

// retryLocked runs op, again after a pause when it failed for a lock not available
// within its lock_timeout (repository.ErrLockTimeout: a VACUUM of the topic's bucket,
// say), as Repository.Dedicate does outside a transaction: 8 attempts in all.
func retryLocked(ctx context.Context, op func() error) error {
	pause := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := op()
		if attempt == 8 || !errors.Is(err, repository.ErrLockTimeout) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// reportDedicated says where the tasks of a topic dedicated now (done) or before are.
func reportDedicated(ctx context.Context, e *env, c *conn, topic string, done bool) error {
	t, err := c.repo.Topic(ctx, c.pool, topic)
	if err != nil {
		return err
	}
	if done {
		fmt.Fprintf(e.stdout, "topic %q dedicated: its tasks are in table %s\n", topic, t.Table)
	} else {
		fmt.Fprintf(e.stdout, "topic %q already has a table of its own: %s\n", topic, t.Table)
	}
	return nil
}

func runTopicDestroy(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic destroy", "NAME [flags]",
		"Removes topic NAME with ALL its tasks (drops its table when dedicated) and its schedules,\nwhich it names. There is no undo.")
	url := f.databaseURL()
	pos, err := f.topicArg(args, "topic NAME")
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	// the schedules go with the topic (ON DELETE CASCADE): read before, to name them
	of, err := c.repo.SchedulesOf(ctx, c.pool, pos[0])
	if err != nil {
		return err
	}
	schedules := make([]string, len(of))
	for i, s := range of {
		schedules[i] = strconv.Quote(s.Name)
	}
	destroyed, err := c.repo.Destroy(ctx, c.pool, pos[0])
	if err != nil {
		return err
	}
	if !destroyed {
		return fmt.Errorf("topic destroy: topic %q: %w", pos[0], repository.ErrUnknownTopic)
	}
	fmt.Fprintf(e.stdout, "topic %q destroyed\n", pos[0])
	if len(schedules) > 0 {
		fmt.Fprintf(e.stdout, "removed with it: schedule %s\n", strings.Join(schedules, ", schedule "))
	}
	return nil
}

func runPause(ctx context.Context, e *env, args []string) error {
	return setActive(ctx, e, args, false)
}

func runResume(ctx context.Context, e *env, args []string) error {
	return setActive(ctx, e, args, true)
}

func setActive(ctx context.Context, e *env, args []string, active bool) error {
	verb, about := "pause", "Pauses TOPIC: every processor of it, in every process, stops polling within a second.\nThe pause is stored in the database and survives restarts; 'pgtask resume' undoes it."
	if active {
		verb, about = "resume", "Resumes a paused TOPIC: its processors start polling again within a second."
	}
	f := newFlags(e, "pgtask "+verb, "TOPIC [flags]", about)
	url := f.databaseURL()
	pos, err := f.topicArg(args, "TOPIC")
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.repo.SetActive(ctx, c.pool, pos[0], active); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "topic %q %s\n", pos[0], map[bool]string{false: "paused", true: "resumed"}[active])
	return nil
}

// topicsJSON is the --json output of "topic list" and "stats" (as GET /topics answers).
type topicsJSON struct {
	Topics []wire.Topic `json:"topics"`
}

func describeSettings(s repository.TopicSettings) string {
	out := fmt.Sprintf("max attempts %d, backoff %s..%s + jitter below %s, queue cap %s, retention %s",
		s.MaxAttempts, shortDuration(s.BackoffBase), shortDuration(s.BackoffCap), shortDuration(s.BackoffJitter),
		orNone(s.QueueCap, "unlimited"), orForever(s.Retention))
	if s.Limited() {
		out += ", limits: " + describeLimits(s)
	}
	return out
}

// describeLimits says a topic's limits: "none" without any.
func describeLimits(s repository.TopicSettings) string {
	var parts []string
	if s.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("concurrency %d", s.Concurrency))
	}
	if s.KeyConcurrency > 0 {
		parts = append(parts, fmt.Sprintf("key concurrency %d", s.KeyConcurrency))
	}
	if s.Rate > 0 {
		parts = append(parts, fmt.Sprintf("rate %d/%s burst %d", s.Rate, shortDuration(s.RatePeriod), s.RateBurst))
	}
	if s.Fair {
		parts = append(parts, "fair")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func status(active bool) string {
	if active {
		return "active"
	}
	return "paused"
}

func orNone(n int64, none string) string {
	if n == 0 {
		return none
	}
	return fmt.Sprint(n)
}

func orForever(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return shortDuration(d)
}

// atLeast is a count of TopicStats, followed by "+" when it stopped at
// repository.StatsCap (the topic has more such tasks).
func atLeast(n int64, capped bool) string {
	if capped {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}

// shortDuration prints 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}
