package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
--queue-cap limits the READY and ACTIVE tasks of the topic (0: unlimited); --retention
is how long finished tasks are kept (0: forever), enforced by 'pgtask purge --retention'.`

// settingFlags are the per-topic settings shared by "topic add" and "topic set".
type settingFlags struct {
	maxAttempts   *int
	backoffBase   *time.Duration
	backoffCap    *time.Duration
	backoffJitter *time.Duration
	queueCap      *int64
	retention     *time.Duration
}

var settingNames = []string{"max-attempts", "backoff-base", "backoff-cap", "backoff-jitter", "queue-cap", "retention"}

func (f *flags) settingFlags() *settingFlags {
	return &settingFlags{
		maxAttempts:   f.Int("max-attempts", 0, "how many times (`N`) a task may be leased before a failure is final (1: no retry)"),
		backoffBase:   f.duration("backoff-base", 0, "first retry delay (`DURATION`)"),
		backoffCap:    f.duration("backoff-cap", 0, "longest retry delay (`DURATION`)"),
		backoffJitter: f.duration("backoff-jitter", 0, "random extra delay added to each retry, below this `DURATION`"),
		queueCap:      f.Int64("queue-cap", 0, "most READY and ACTIVE tasks (`N`); a push beyond it fails (0: unlimited)"),
		retention:     f.duration("retention", 0, "how long (`DURATION`) finished tasks are kept before purging (0: forever)"),
	}
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
	return nil
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
}

func runTopicAdd(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic add", "NAME [flags]",
		"Registers topic NAME: a row of task_topic, its tasks in the shared table of its bucket\n(or, with --dedicated, in a table of its own). Adding a topic that exists is not an\nerror; settings given are then applied to it.\n"+topicSettingsHelp)
	url := f.databaseURL()
	settings := f.settingFlags()
	dedicated := f.Bool("dedicated", false, "give the topic a table of its own (see pgtask topic dedicate)")
	pos, err := f.args(args, 1, 1, "topic NAME")
	if err != nil {
		return err
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
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if created, err = c.repo.Initialize(ctx, tx, name); err != nil {
			return err
		}
		if topic, err = c.repo.Topic(ctx, tx, name); err != nil {
			return err
		}
		if !settings.anyGiven(f) {
			return nil
		}
		settings.apply(f, &topic.TopicSettings)
		topic, err = c.repo.Configure(ctx, tx, name, topic.TopicSettings)
		return err
	})
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(e.stdout, "topic %q added\n", name)
	} else {
		fmt.Fprintf(e.stdout, "topic %q already exists\n", name)
	}
	if *dedicated {
		// after the registration committed: dedicating locks the topic's bucket until
		// its own commit, which must come at once
		if err := dedicate(ctx, e, c, name); err != nil {
			return err
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
	pos, err := f.args(args, 1, 1, "topic NAME")
	if err != nil {
		return err
	}
	if !settings.anyGiven(f) {
		return f.usagef("no setting given (want at least one of --max-attempts, --backoff-base, --backoff-cap, --backoff-jitter, --queue-cap, --retention)")
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
	var topic repository.Topic
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if topic, err = c.repo.Topic(ctx, tx, name); err != nil {
			return err
		}
		settings.apply(f, &topic.TopicSettings)
		topic, err = c.repo.Configure(ctx, tx, name, topic.TopicSettings)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "topic %q: %s\n", name, describeSettings(topic.TopicSettings))
	return nil
}

func runTopicList(ctx context.Context, e *env, args []string) error {
	f := newFlags(e, "pgtask topic list", "[flags]", "Lists the registered topics with their settings, by name.")
	url := f.databaseURL()
	asJSON := f.Bool("json", false, `print {"topics": [...]} (as GET /topics does) instead of a table`)
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
		return writeJSON(e.stdout, topicsJSON{out})
	}
	if len(topics) == 0 {
		fmt.Fprintln(e.stdout, "no topics (add one with: pgtask topic add NAME)")
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "TOPIC\tSTATUS\tSTORAGE\tMAX_ATTEMPTS\tBACKOFF_BASE\tBACKOFF_CAP\tJITTER\tQUEUE_CAP\tRETENTION\tCREATED")
	for _, t := range topics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, status(t.Active), storage(t), t.MaxAttempts,
			shortDuration(t.BackoffBase), shortDuration(t.BackoffCap), shortDuration(t.BackoffJitter),
			orNone(t.QueueCap, "unlimited"), orForever(t.Retention), formatTime(t.Created))
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
	pos, err := f.args(args, 1, 1, "topic NAME")
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
		"Removes topic NAME with ALL its tasks (drops its table when dedicated). There is no undo.")
	url := f.databaseURL()
	pos, err := f.args(args, 1, 1, "topic NAME")
	if err != nil {
		return err
	}
	c, err := f.connect(ctx, *url)
	if err != nil {
		return err
	}
	defer c.Close()
	destroyed, err := c.repo.Destroy(ctx, c.pool, pos[0])
	if err != nil {
		return err
	}
	if !destroyed {
		return fmt.Errorf("topic destroy: topic %q: %w", pos[0], repository.ErrUnknownTopic)
	}
	fmt.Fprintf(e.stdout, "topic %q destroyed\n", pos[0])
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
	pos, err := f.args(args, 1, 1, "TOPIC")
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
	return fmt.Sprintf("max attempts %d, backoff %s..%s + jitter below %s, queue cap %s, retention %s",
		s.MaxAttempts, shortDuration(s.BackoffBase), shortDuration(s.BackoffCap), shortDuration(s.BackoffJitter),
		orNone(s.QueueCap, "unlimited"), orForever(s.Retention))
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

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
