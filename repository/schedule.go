package repository

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	// Time zones are read from the Go release's copy of the IANA database when the
	// machine has none (a scratch container): a schedule's zone must mean the same in
	// every process that fires it.
	_ "time/tzdata"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"

	"github.com/pgtask/pgtask/db"
)

// Limits of a schedule's definition.
const (
	// MaxScheduleNameLength bounds a schedule's name, in characters.
	MaxScheduleNameLength = 250
	// MaxScheduleSpecLength bounds a schedule's spec, in characters.
	MaxScheduleSpecLength = 250
	// MaxCatchUp bounds ScheduleSettings.CatchUp.
	MaxCatchUp = 10_000
	// ScheduleTimePlaceholder, in a schedule's identifier or input, is replaced by the
	// fire time of each task it pushes (RFC 3339, UTC, such as 2026-03-29T01:00:00Z).
	ScheduleTimePlaceholder = "{time}"
	// ScheduleReferencePrefix starts the reference of every task a schedule pushes; the
	// schedule's name follows ("schedule:nightly-report"), so that a schedule's tasks can
	// be listed with a reference filter.
	ScheduleReferencePrefix = "schedule:"
)

// fireRound bounds how many schedules one FireSchedules call fires (a variable for
// tests: SetFireRound).
var fireRound = 1000

// fireInputBudget bounds the bytes of input and identifiers one fire pushes (a variable
// for tests: SetFireInputBudget): a catch-up of up to MaxCatchUp times of a large input
// could exceed what one statement may carry (1 GB), and would fail every round.
var fireInputBudget = 64 << 20

// ScheduleGraceDefault is FireSchedules' grace until SetScheduleGrace: two of the
// processors' default heartbeat intervals.
const ScheduleGraceDefault = 2 * time.Second

// SetScheduleGrace sets FireSchedules' grace: a fire time due less than grace before
// the fire is on time, not missed, and is pushed whatever the schedule's CatchUp. The
// firers call FireSchedules once per interval, and a schedule whose spec fires more
// often finds several fire times due at each call: with CatchUp 0 (the latest missed
// time only) all but the latest were dropped while processors ran. A processor sets
// twice its HeartbeatInterval (RunSchedules twice its Interval), which covers a round
// that starts late; zero restores ScheduleGraceDefault; negative is an error.
func (r *Repository) SetScheduleGrace(grace time.Duration) error {
	if grace < 0 {
		return invalid("schedule grace %v is negative", grace)
	}
	r.graceNs.Store(int64(grace))
	return nil
}

// scheduleGrace returns the grace SetScheduleGrace set, or ScheduleGraceDefault.
func (r *Repository) scheduleGrace() time.Duration {
	if g := time.Duration(r.graceNs.Load()); g > 0 {
		return g
	}
	return ScheduleGraceDefault
}

// ScheduleSettings define a schedule: when it fires, and the task each fire pushes.
type ScheduleSettings struct {
	// Topic receives the tasks; it must be registered. Removing the topic removes its
	// schedules.
	Topic string
	// Spec says when the schedule fires: a cron expression of 5 fields (minute hour
	// day-of-month month day-of-week) or 6 (seconds first), with the ranges (1-5), steps
	// (*/15), lists (1,15) and names (jan, mon-fri) of github.com/robfig/cron/v3; or one
	// of @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly; or
	// "@every D" with D a Go duration of whole seconds, at least 1s ("@every 90s": fires
	// every D from the time the schedule was created or its spec last changed, a resume
	// keeping that phase). A spec
	// is ASCII; what the library would read without a word though it is not a value,
	// a range or a step ("*-5", "+5") is refused, and so is a spec that never fires
	// ("0 0 30 2 *"). SQL's task_schedule accepts the same specs (migration 000029).
	Spec string
	// TimeZone is the IANA zone the spec is read in, such as "Europe/Paris"; empty is
	// UTC. A fire time is an instant whose wall-clock time in the zone matches the spec,
	// and across a daylight-saving change Vixie cron's rule holds. A fixed-time spec (its
	// seconds, when given, minute and hour fields start with neither * nor ?: @daily,
	// @weekly, "30 2 * * *", "0 9-17 * * *") fires once a day as on any other: a
	// wall-clock time the clocks skip (02:30 when they jump from 02:00 to 03:00) fires
	// at the first instant after the gap (03:00), once however many of its times the gap
	// holds (and in place of a fire time at that instant: "0 2,3 * * *" fires once at
	// 03:00 that day), and one they pass twice (02:30 when they fall back from 03:00 to 02:00)
	// fires the first time only; whatever the size of the change and its hour
	// (half-hour changes as in Australia/Lord_Howe, changes at midnight as in
	// America/Havana, whose @daily fires at 01:00 on the day it has no midnight). The
	// others (@hourly, "*/30 * * * *", "0 */2 * * *") fire at each real instant whose
	// wall-clock time matches: not in the skipped hour, twice in the repeated one. @every
	// counts real time and ignores the zone.
	TimeZone string
	// Identifier is the identifier of each task pushed; empty is the schedule's name.
	// ScheduleTimePlaceholder in it is replaced by the fire time, giving each fire a task
	// of its own identifier.
	Identifier string
	// Input is the input of each task pushed (ScheduleTimePlaceholder replaced as in
	// Identifier); empty pushes none.
	Input string
	// Priority is each task's priority (lower first).
	Priority int16
	// Insertion is how each task is pushed; nil is Supersede: a task of the schedule
	// still READY when the next fires is made REDUNDANT, so a backlog never piles up when
	// tasks share an identifier (new(repository.Append) keeps every one).
	Insertion *Insertion
	// CatchUp is how many missed fire times are pushed when the schedule is found late
	// (nothing fired it while processes were down, or it was resumed with replay): 0
	// pushes the latest missed time only, n > 0 the n latest, oldest first (at most
	// MaxCatchUp); or, when more fell due within the grace before the fire
	// (SetScheduleGrace: two heartbeats of the processors), every one of those: they
	// are on time, not missed, so a spec that fires more often than the processors'
	// heartbeat loses nothing while they run. One fire pushes at most 64 MiB of inputs
	// and identifiers: the latest times that fit (at least one), the others missed.
	CatchUp int
	// Paused stops the schedule firing (PauseSchedule, ResumeSchedule).
	Paused bool
}

// Schedule is a stored schedule: its name, its settings and its state.
type Schedule struct {
	// Name identifies the schedule (1 to MaxScheduleNameLength characters).
	Name string
	ScheduleSettings
	// NextFire is the next fire time; zero when not computed yet (a schedule declared in
	// SQL, or whose spec or cron zone was changed by hand: the first FireSchedules that
	// sees it computes it). A paused schedule keeps the one it had; one resumed by hand
	// may show an earlier one until FireSchedules moves it past the resume.
	NextFire time.Time
	// LastFire is the latest fire time pushed (zero before the first).
	LastFire time.Time
	// LastFiredAt is when that fire was pushed, by the firer's clock: LastFiredAt minus
	// LastFire is how late it was.
	LastFiredAt time.Time
	// LastSequence is the sequence of the latest task pushed for a fire.
	LastSequence int64
	// Fires counts the fire times pushed since the schedule was created (RunSchedule's
	// tasks are not counted).
	Fires int64
	// Created and Updated are when the schedule was created and its settings last
	// changed.
	Created, Updated time.Time
}

// Fire is what FireSchedules did for one schedule.
type Fire struct {
	// Schedule names the schedule.
	Schedule string
	// Topic is the topic the tasks went to.
	Topic string
	// Times are the fire times pushed, oldest first: one, or up to the schedule's
	// CatchUp when it was found late.
	Times []time.Time
	// Missed counts the fire times that were due but not pushed (beyond CatchUp).
	Missed int64
	// Tasks are the tasks pushed, one per fire time, in the same order, except under the
	// DELETE insertion, which keeps one task per identifier: fire times that give the
	// same identifier (one without {time}) push the last of them only.
	Tasks []Task
	// At is the firer's clock when it fired.
	At time.Time
}

// Lateness is how long after its latest fire time the fire was pushed.
func (f Fire) Lateness() time.Duration {
	if len(f.Times) == 0 {
		return 0
	}
	return f.At.Sub(f.Times[len(f.Times)-1])
}

// ValidateScheduleName returns nil when name may name a schedule: 1 to
// MaxScheduleNameLength characters of valid UTF-8 without a NUL byte; otherwise an error
// wrapping ErrInvalid. A new schedule's name is checked by ValidateNewScheduleName.
func ValidateScheduleName(name string) error {
	if name == "" {
		return invalid("schedule name is empty")
	}
	if n := utf8.RuneCountInString(name); n > MaxScheduleNameLength {
		return invalid("schedule name is %d characters long, at most %d allowed", n, MaxScheduleNameLength)
	}
	if p := unstorable(name); p != "" {
		return invalid("schedule name %s", p)
	}
	return nil
}

// ValidateNewScheduleName returns nil when CreateSchedule accepts name: a name
// ValidateScheduleName accepts, other than "." and ".." (the REST API's
// /schedules/{name} would resolve them to other resources); otherwise an error wrapping
// ErrInvalid; nor a name with a control character (U+0001–U+001F, U+007F–U+009F), as
// for a topic. task_schedule_check refuses them in SQL too (migrations 000041 and
// 000048); a schedule of such a name stored before stays usable.
func ValidateNewScheduleName(name string) error {
	if err := ValidateScheduleName(name); err != nil {
		return err
	}
	if name == "." || name == ".." {
		return invalid("schedule name %q is not allowed (the REST API's /schedules/%s would name another resource)", name, name)
	}
	if r, i, ok := controlChar(name); ok {
		return invalid("schedule name has a control character (%U) at byte %d: choose a name without", r, i)
	}
	return nil
}

// Validate returns nil when the settings define a schedule CreateSchedule accepts
// (whatever the topic's existence): a topic name, a spec that parses, a known time zone,
// an identifier and input that stay valid once the fire time is in them, a known
// insertion and a catch-up in 0..MaxCatchUp. Otherwise its error wraps ErrInvalid and
// names the field.
func (s ScheduleSettings) Validate() error {
	if err := checkZoneName(s.TimeZone); err != nil {
		return err
	}
	return s.validate()
}

// ValidateKeepingZone is Validate for a change that keeps the schedule's stored time
// zone: the zone's name is not checked again, so that a schedule stored before Validate
// refused its zone (right/…) still changes, as UpdateSchedule takes it.
func (s ScheduleSettings) ValidateKeepingZone() error { return s.validate() }

// ValidateChange is Validate for settings changed from stored, as UpdateSchedule checks
// them: an identifier kept (equal to the stored one) is not checked again, so that one
// stored before a check refused it (too long once {time} is replaced, written by hand
// before migration 000044) still takes other changes; a spec kept is read as the
// schedule's firing reads it, so that one stored before migration 000029 refused it
// ("*-5", which the cron library reads as *) still takes other changes (a pause); the
// time zone is checked as at creation with newZone, else as ValidateKeepingZone does.
func (s ScheduleSettings) ValidateChange(stored ScheduleSettings, newZone bool) error {
	if s.Identifier == stored.Identifier {
		s.Identifier = ""
	}
	if newZone {
		if err := checkZoneName(s.TimeZone); err != nil {
			return err
		}
	}
	return s.validateSpec(strings.Trim(s.Spec, asciiSpace) != strings.Trim(stored.Spec, asciiSpace))
}

// validate is Validate without checkZoneName: an update that keeps a schedule's zone
// keeps one stored before the check (schedules fire in it as they did).
func (s ScheduleSettings) validate() error { return s.validateSpec(true) }

// validateSpec is validate, the spec read as it is accepted now with newSpec, else as
// a stored one is fired (parseStoredSchedule).
func (s ScheduleSettings) validateSpec(newSpec bool) error {
	if err := validTopic(s.Topic); err != nil {
		return err
	}
	if _, err := parseSpec(s.Spec, s.TimeZone, newSpec); err != nil {
		return err
	}
	if s.Identifier != "" {
		if err := validIdentifier(fireText(s.Identifier, fireSample)); err != nil {
			return err
		}
	}
	if p := unstorable(s.Input); p != "" {
		return invalid("input %s", p)
	}
	if s.Insertion != nil && !s.Insertion.Valid() {
		return invalid("unknown insertion %d", int16(*s.Insertion))
	}
	if s.CatchUp < 0 {
		return invalid("catch-up %d is negative", s.CatchUp)
	}
	if s.CatchUp > MaxCatchUp {
		return invalid("catch-up %d is above %d", s.CatchUp, MaxCatchUp)
	}
	return nil
}

// ValidateScheduleSpec returns nil when spec parses in the time zone tz (empty is UTC)
// and fires at least once more; otherwise an error wrapping ErrInvalid that says what is
// wrong.
func ValidateScheduleSpec(spec, tz string) error {
	if err := checkZoneName(tz); err != nil {
		return err
	}
	_, err := parseSchedule(spec, tz)
	return err
}

// checkZoneName refuses the names of zones Go loads but the database does not list
// (pg_timezone_names, which task_schedule checks): a name spelt other than clean
// (Europe//Paris), and the leap-second zones (right/…); and, as task_schedule does
// (migration 000038), the names both list from a host's files that processors would not
// read alike: localtime (the host's own zone), posixrules, and posix/… (copies of the
// zones, which Go's built-in zone database, used on a host without one, lacks).
func checkZoneName(tz string) error {
	if path.Clean(tz) != tz && tz != "" {
		return invalid("unknown time zone %q (want an IANA name such as UTC or Europe/Paris)", tz)
	}
	if name, ok := strings.CutPrefix(tz, "right/"); ok {
		return invalid("time zone %q counts leap seconds, which schedules do not: give %q", tz, name)
	}
	if name, ok := strings.CutPrefix(tz, "posix/"); ok {
		return invalid("time zone %q is not an IANA zone name that every processor reads alike: give %q", tz, name)
	}
	if tz == "localtime" || tz == "posixrules" {
		return invalid("time zone %q is not an IANA zone name that every processor reads alike (want one such as UTC or Europe/Paris)", tz)
	}
	return nil
}

// NextFires returns the next n fire times of a spec in the time zone tz (empty is UTC)
// after from, for showing what a schedule would do before it is created. For "@every
// D" the times are from + D, from + 2D, …, from truncated to the second.
func NextFires(spec, tz string, from time.Time, n int) ([]time.Time, error) {
	c, err := parseSchedule(spec, tz)
	if err != nil {
		return nil, err
	}
	return c.fires(from, n), nil
}

// FiresAfter returns the schedule's next n fire times after from, its stored spec read
// as firing reads it: NextFires, but a spec stored before migration 000029 refused it
// ("*-5", which the cron library reads as *) gives the times it fires at.
func (s Schedule) FiresAfter(from time.Time, n int) ([]time.Time, error) {
	c, err := parseStoredSchedule(s.Spec, s.TimeZone)
	if err != nil {
		return nil, err
	}
	return c.fires(from, n), nil
}

// fires returns the next n fire times after from (fewer when the spec has no more).
func (c *cronSchedule) fires(from time.Time, n int) []time.Time {
	var out []time.Time
	for t := from; len(out) < n; {
		t = c.next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// cronParser reads the specs: 5 fields, or 6 with seconds first, and the descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSchedule is a parsed spec in its time zone.
type cronSchedule struct {
	// spec is the spec read on a clock without daylight saving (UTC): next maps its
	// wall-clock times onto the zone's instants itself. Nil for @every.
	spec  *cron.SpecSchedule
	every time.Duration
	loc   *time.Location
	// fixed marks a fixed-time spec, as Vixie cron tells them: neither its seconds (when
	// given), minute nor hour field starts with * or ? (@daily, "30 2 * * *", "0 9-17 * *
	// *"). Across a daylight-saving change it fires once a day: a wall-clock time the
	// clocks skip fires right after the gap, one they pass twice fires the first time
	// only (next). The others (@hourly, "*/15 * * * *", "0 */2 * * *") fire at each
	// real instant whose wall-clock time matches.
	fixed bool
}

// parseSchedule parses spec in the zone tz, refusing what the library would take in a
// way a user would not expect: a zone inside the spec, a negative or sub-second
// interval (it would round them up to a second), the process's local zone.
func parseSchedule(spec, tz string) (*cronSchedule, error) { return parseSpec(spec, tz, true) }

// parseStoredSchedule is parseSchedule for a stored spec, which a process fires: without
// the checks migration 000029 added (a spec in ASCII, each field's parts values, ranges
// or steps), so that a schedule stored before them fires as it did, the cron library
// reading "*-5" as * and "+5" as 5.
func parseStoredSchedule(spec, tz string) (*cronSchedule, error) { return parseSpec(spec, tz, false) }

// parseSpec is parseSchedule, its checks of migration 000029 only when strict.
func parseSpec(spec, tz string, strict bool) (*cronSchedule, error) {
	if tz == "" {
		tz = "UTC"
	}
	trimmed := strings.Trim(spec, asciiSpace)
	if trimmed == "" {
		return nil, invalid("spec is empty")
	}
	if n := utf8.RuneCountInString(spec); n > MaxScheduleSpecLength {
		return nil, invalid("spec is %d characters long, at most %d allowed", n, MaxScheduleSpecLength)
	}
	if strict {
		if i := strings.IndexFunc(spec, func(r rune) bool { return r > unicode.MaxASCII && r != 'µ' && r != 'μ' || r == 0 }); i >= 0 {
			r, _ := utf8.DecodeRuneInString(spec[i:])
			return nil, invalid("spec %q: character %q is not allowed (a spec is written in ASCII)", spec, r)
		}
	}
	upper := strings.ToUpper(trimmed)
	if strings.HasPrefix(upper, "TZ=") || strings.HasPrefix(upper, "CRON_TZ=") {
		return nil, invalid("spec %q names a time zone: give it as the time zone instead", spec)
	}
	if tz == "Local" || !utf8.ValidString(tz) {
		return nil, invalid("unknown time zone %q (want an IANA name such as UTC or Europe/Paris)", tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, invalid("unknown time zone %q (want an IANA name such as UTC or Europe/Paris)", tz)
	}
	c := &cronSchedule{loc: loc}
	if rest, ok := strings.CutPrefix(strings.ToLower(trimmed), "@every"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
		text := strings.TrimSpace(trimmed[len("@every"):])
		d, err := time.ParseDuration(text)
		switch {
		case err != nil:
			return nil, invalid("spec %q: interval %q is not a duration such as 90s or 1h30m", spec, text)
		case d < 0:
			return nil, invalid("spec %q: interval %s is negative", spec, text)
		case d < time.Second:
			return nil, invalid("spec %q: interval %s is shorter than 1s", spec, text)
		case d%time.Second != 0:
			return nil, invalid("spec %q: interval %s is not a whole number of seconds", spec, text)
		}
		c.every = d
		return c, nil
	}
	if strings.HasPrefix(trimmed, "@") {
		trimmed = strings.ToLower(trimmed) // the library's descriptors are lower case only
	} else if strict {
		if err := checkCronFields(spec, trimmed); err != nil {
			return nil, err
		}
	}
	parsed, err := cronParser.Parse(trimmed)
	if err != nil {
		return nil, invalid("spec %q: %s", spec, err.Error())
	}
	wall, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, invalid("spec %q: not a cron spec", spec)
	}
	utc := *wall
	utc.Location = time.UTC
	c.spec = &utc
	c.fixed = fixedTime(trimmed)
	if c.next(time.Now()).IsZero() {
		return nil, invalid("spec %q never fires", spec)
	}
	return c, nil
}

// fixedTime reports whether a cron spec (trimmed; a descriptor in lower case) is a
// fixed-time one, as Vixie cron tells them: its seconds (with 6 fields), minute and hour
// fields start with neither * nor ?. Of the descriptors, all but @hourly are.
func fixedTime(spec string) bool {
	if strings.HasPrefix(spec, "@") {
		return spec != "@hourly"
	}
	fields := strings.FieldsFunc(spec, func(r rune) bool { return strings.ContainsRune(asciiSpace, r) })
	if len(fields) < 5 {
		return false
	}
	// the seconds (when given), minute and hour fields: those before the last three
	for _, f := range fields[:len(fields)-3] {
		if strings.HasPrefix(f, "*") || strings.HasPrefix(f, "?") {
			return false
		}
	}
	return true
}

// asciiSpace is the white space that separates a spec's fields: ASCII's alone, as
// task_schedule_spec_problem reads it (Go's TrimSpace and Fields also take Unicode's).
const asciiSpace = " \t\n\v\f\r"

// cronPart is one part of a cron field's list: * or ?, or a value or a range of values
// (numbers or names), then an optional step.
var cronPart = regexp.MustCompile(`^(?:[*?]|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/[0-9]+)?$`)

// cronKinds names a spec's fields, seconds first; cronBounds are their values' ranges.
var (
	cronKinds  = [...]string{"second", "minute", "hour", "day of month", "month", "day of week"}
	cronBounds = [...][2]int{{0, 59}, {0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 6}}
)

// checkCronFields refuses a part of a field that the library would read without a
// word though it is not a value, a range or a step: "*-5" (the library reads *), "+5"
// (it reads 5). It leaves the count of fields and the values to the library. The same
// reading as task_schedule_spec_problem's, so that SQL and Go accept the same specs.
func checkCronFields(spec, trimmed string) error {
	fields := strings.FieldsFunc(trimmed, func(r rune) bool { return strings.ContainsRune(asciiSpace, r) })
	if len(fields) != 5 && len(fields) != 6 {
		return nil
	}
	first := 6 - len(fields)
	for i, field := range fields {
		for _, part := range strings.Split(strings.ToLower(field), ",") {
			if part != "" && !cronPart.MatchString(part) {
				return invalid("spec %q: %s field %q is not a value, a range or a step", spec, cronKinds[first+i], part)
			}
			// a step of ten digits or more, which the library takes (to step past the
			// field's end), as task_schedule_spec_problem refuses it
			values, step, ok := strings.Cut(part, "/")
			if ok && len(strings.TrimLeft(step, "0")) > 9 {
				return invalid("spec %q: %s step %s is not a positive number", spec, cronKinds[first+i], step)
			}
			// a value out of its field's range, named as task_schedule_spec_problem
			// names it (the library's "above maximum (6)" left Sunday as 7 a riddle)
			for _, v := range strings.Split(values, "-") {
				n, err := strconv.Atoi(v)
				if bounds := cronBounds[first+i]; err == nil && (n < bounds[0] || n > bounds[1]) {
					return invalid("spec %q: %s %s is out of range %d-%d", spec, cronKinds[first+i], v, bounds[0], bounds[1])
				}
			}
		}
	}
	return nil
}

// nextHorizon is how far next searches: the library's own horizon (five years), plus a
// day for the zone's offset.
const nextHorizon = 5*366*24*time.Hour + 24*time.Hour

// next returns the first fire time strictly after t, or zero when there is none within
// nextHorizon. A fire time is an instant whose wall-clock time in the zone matches the
// spec; for a fixed-time spec (Vixie cron's rule), a wall-clock time the clocks skip
// fires at the instant the gap ends (once, however many of its times fall in the gap),
// and one they pass twice fires the first time only. For the others, a wall-clock time
// the clocks skip has none, one they pass twice has two.
//
// The library's own stepping through a zone's days and hours assumes whole-hour
// changes at other times than midnight: it skipped or moved fire times in zones whose
// clocks change by half an hour (Australia/Lord_Howe: "45 1 * * *" fired at 02:45) or
// at midnight (America/St_Johns until 2011: "0 0 * * *" missed a day). So next reads
// the spec on UTC, where the library is exact, one stretch of constant offset at a
// time (time.Time.ZoneBounds): in a stretch, wall-clock time is the instant plus the
// offset, so the first matching wall-clock time at or after the stretch's start is the
// first fire time in it, if it falls before the stretch's end.
func (c *cronSchedule) next(t time.Time) time.Time {
	if c.spec == nil {
		return t.Truncate(time.Second).Add(c.every).UTC()
	}
	horizon := t.Add(nextHorizon)
	for at := t.Truncate(time.Second).Add(time.Second); at.Before(horizon); {
		local := at.In(c.loc)
		_, offset := local.Zone()
		end := stretchEnd(local, offset)
		wall := time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), local.Minute(), local.Second(), 0, time.UTC)
		if c.fixed {
			if begin, change := stretchBegin(local, offset); change > 0 && at.Equal(begin) {
				// sprung forward at begin: the wall-clock times [wall - change, wall)
				// were skipped; one the spec names fires now, right after the gap
				if m := c.spec.Next(wall.Add(-change - time.Second)); !m.IsZero() && m.Before(wall) {
					return begin.UTC()
				}
			} else if change < 0 {
				// fell back at begin: the wall-clock times [begin's, begin's - change)
				// were passed before it, and fired then
				if repeated := begin.Add(time.Duration(offset)*time.Second - change).UTC(); wall.Before(wallOf(repeated)) {
					wall = wallOf(repeated)
				}
			}
		}
		match := c.spec.Next(wall.Add(-time.Second)) // the first at or after wall
		if match.IsZero() {
			return match
		}
		fire := match.Add(-time.Duration(offset) * time.Second)
		if end.IsZero() || fire.Before(end) {
			return fire.UTC()
		}
		at = end // none before the offset changes: go on from there
	}
	return time.Time{}
}

// after returns the first fire time strictly after floor, from start, a fire time at
// or before floor: for @every the next point of start's grid (start + k·every), so
// that a schedule resumed or re-zoned keeps its phase; for a cron spec the first fire
// time after floor.
func (c *cronSchedule) after(start, floor time.Time) time.Time {
	if c.spec != nil || start.IsZero() {
		return c.next(floor)
	}
	if start.After(floor) {
		return start
	}
	d := floor.Sub(start)
	if d > math.MaxInt64/2 { // centuries apart: a new grid from floor
		return c.next(floor)
	}
	return start.Add((d/c.every + 1) * c.every).UTC()
}

// wallOf reads an instant's UTC fields as wall-clock time (for instants already shifted
// by an offset).
func wallOf(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// stretchBegin returns the first instant of local's stretch of constant offset (offset,
// local's own) and how far the clocks moved then (the offset minus the one before; 0
// when unknown or none).
func stretchBegin(local time.Time, offset int) (time.Time, time.Duration) {
	begin, _ := local.ZoneBounds()
	if begin.IsZero() || begin.After(local) {
		return time.Time{}, 0
	}
	_, before := begin.Add(-time.Second).In(local.Location()).Zone()
	if _, own := begin.In(local.Location()).Zone(); own != offset {
		return time.Time{}, 0 // Go's bounds astray (stretchEnd): treated as no change
	}
	return begin, time.Duration(offset-before) * time.Second
}

// stretchEnd returns the first instant after local whose offset from UTC is not offset
// (local's own), or zero when there is none. It is time.Time.ZoneBounds's end, except
// where that is not after local: on the last day of a leap year in a zone's future
// (after its table of changes, where the zone's rule gives them) Go answers an end a
// day early; the end is then looked for hour by hour over the next two days, which
// changes of offset never come closer together than, and found to the second.
func stretchEnd(local time.Time, offset int) time.Time {
	_, end := local.ZoneBounds()
	if end.IsZero() || end.After(local) {
		return end
	}
	differs := func(t time.Time) bool {
		_, o := t.In(local.Location()).Zone()
		return o != offset
	}
	for h := 1; h <= 48; h++ {
		hi := local.Add(time.Duration(h) * time.Hour)
		if !differs(hi) {
			continue
		}
		lo := hi.Add(-time.Hour) // the offset is local's at lo, another at hi
		for hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
			if differs(mid) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	return local.Add(48 * time.Hour)
}

// due returns the fire times from start (a fire time) to now, the n latest of them,
// oldest first, how many earlier ones were left out, and the fire time after them. It
// does not walk every missed time: @every is arithmetic, and a cron spec is searched
// backwards from now in a window that doubles until it holds n times or reaches start.
func (c *cronSchedule) due(start, now time.Time, n int) (times []time.Time, missed int64, next time.Time) {
	if c.spec == nil {
		// A start more than 146 years back is moved on by whole periods, counted missed:
		// now.Sub saturates at 292 years, and (k+1)·every must not overflow either.
		var skipped int64
		for now.Sub(start) > math.MaxInt64/2 {
			m := max(1, int64(math.MaxInt64/4/c.every))
			start = start.Add(time.Duration(m) * c.every)
			skipped += m
		}
		k := int64(now.Sub(start) / c.every) // the last due time is start + k·every
		first := max(0, k-int64(n)+1)
		for i := first; i <= k; i++ {
			times = append(times, start.Add(time.Duration(i)*c.every))
		}
		return times, skipped + first, start.Add(time.Duration(k+1) * c.every)
	}
	for window := time.Minute; ; window *= 2 {
		from := now.Add(-window)
		// a window past 73 years reads from start: doubling on would overflow the
		// Duration at 292 (a stored start centuries ago, written by hand, hung here)
		whole := !from.After(start) || window > math.MaxInt64/4
		if whole {
			from = start.Add(-time.Nanosecond) // start is a fire time: it is the first
		}
		times = times[:0]
		var counted int64
		for t := c.next(from); !t.IsZero() && !t.After(now); t = c.next(t) {
			counted++
			times = append(times, t)
			if len(times) > n {
				times = times[1:]
			}
		}
		if len(times) == n || whole {
			if whole {
				missed = counted - int64(len(times))
			} else {
				missed = c.count(start, from) + counted - int64(len(times))
			}
			return times, missed, c.next(now)
		}
	}
}

// countAfter counts the fire times after from up to now (inclusive), from start (a fire
// time: an @every schedule's grid), at most limit.
func (c *cronSchedule) countAfter(start, from, now time.Time, limit int) int {
	if c.spec == nil {
		if now.Before(start) || now.Sub(start) > math.MaxInt64/2 {
			return 0
		}
		last := int64(now.Sub(start) / c.every) // start + last·every is the latest due
		first := int64(0)
		if !from.Before(start) {
			first = int64(from.Sub(start)/c.every) + 1
		}
		return int(min(int64(limit), max(0, last-first+1)))
	}
	n := 0
	for t := c.next(later(from, start.Add(-time.Nanosecond))); !t.IsZero() && !t.After(now) && n < limit; t = c.next(t) {
		n++
	}
	return n
}

// countLimit bounds how many missed fire times count walks; beyond it the count says
// "at least".
const countLimit = 100_000

// count counts the fire times from start to before (inclusive), at most countLimit.
func (c *cronSchedule) count(start, before time.Time) int64 {
	var n int64
	for t := start; !t.IsZero() && !t.After(before) && n < countLimit; t = c.next(t) {
		n++
	}
	return n
}

// fireSample is a fire time, for the length of a text once fireText has put one in it
// (every fire time is 20 characters in RFC 3339 in UTC).
var fireSample = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// CheckNameAsIdentifier refuses (ErrInvalid) a schedule of name and settings s that
// would never fire because its tasks' identifier, its name when s gives none, is too
// long once each {time} is replaced by the fire time (a name of 250 characters holds 41
// {time}, 820 so replaced). task_schedule_check refuses it too (migration 000044).
func CheckNameAsIdentifier(name string, s ScheduleSettings) error {
	if s.Identifier != "" {
		return nil
	}
	if n := utf8.RuneCountInString(fireText(name, fireSample)); n > MaxIdentifierLength {
		return invalid("schedule name, the identifier of its tasks when none is given, is %d characters long once {time} is replaced by the fire time, at most %d allowed: give an identifier",
			n, MaxIdentifierLength)
	}
	return nil
}

// fireText puts the fire time in a schedule's identifier or input.
func fireText(s string, at time.Time) string {
	return strings.ReplaceAll(s, ScheduleTimePlaceholder, at.UTC().Format(time.RFC3339))
}

// databaseNow returns the injected clock, or the database's (its statement's time,
// statement_timestamp(), as task_schedule_check reads it): fire times are computed by
// the clock FireSchedules fires by, so that a process whose clock is behind or ahead
// neither pushes a time twice (a spec set just after a fire, from a host two seconds
// behind, restarted from before it) nor skips one. Not the transaction's start (now()):
// an edit made late in a long transaction would start its fire times in the past, and
// the next round would fire a time that had gone by before the edit.
func (r *Repository) databaseNow(ctx context.Context, h Handle) (time.Time, error) {
	if t := r.clock(); t != nil {
		return *t, nil
	}
	var now time.Time
	if err := h.QueryRow(ctx, "SELECT statement_timestamp()").Scan(&now); err != nil {
		return time.Time{}, mapError("read the database's time", err)
	}
	return now, nil
}

// checkZone asks the database whether it lists the time zone tz (empty is UTC) as
// task_schedule_check reads it (pg_timezone_names, exactly spelt): a zone Go loaded
// may still be one the database does not list, such as europe/paris on a
// case-insensitive file system, which processors on Linux would not load. A refusal
// wraps ErrInvalid and names the zone; asked before writing, it leaves the caller's
// transaction usable.
func (r *Repository) checkZone(ctx context.Context, h Handle, tz string) error {
	problem, err := r.q.ScheduleZoneProblem(ctx, h, zoneName(tz))
	if err != nil {
		return mapError("check the time zone", err)
	}
	if problem != "" {
		return invalid("%s", problem)
	}
	return nil
}

// CreateSchedule stores a new schedule, in the caller's transaction when h is one, and
// returns it with its first fire time (the first after now, by the database's clock). A
// bad name or setting returns ErrInvalid naming it, an unregistered topic
// ErrUnknownTopic, a name taken ErrScheduleExists; nothing is written then. SQL's
// task_schedule and `pgtask schedule add` do the same.
func (r *Repository) CreateSchedule(ctx context.Context, h Handle, name string, s ScheduleSettings) (Schedule, error) {
	if err := ValidateNewScheduleName(name); err != nil {
		return Schedule{}, fmt.Errorf("create schedule: %w", err)
	}
	if err := s.Validate(); err != nil {
		return Schedule{}, fmt.Errorf("create schedule %q: %w", name, err)
	}
	if err := CheckNameAsIdentifier(name, s); err != nil {
		return Schedule{}, fmt.Errorf("create schedule %q: %w", name, err)
	}
	if err := r.checkZone(ctx, h, s.TimeZone); err != nil {
		return Schedule{}, fmt.Errorf("create schedule %q: %w", name, err)
	}
	c, _ := parseSchedule(s.Spec, s.TimeZone)
	now, err := r.databaseNow(ctx, h)
	if err != nil {
		return Schedule{}, fmt.Errorf("create schedule %q: %w", name, err)
	}
	arg := db.ScheduleCreateParams{
		Name: name, Topic: s.Topic, Spec: strings.TrimSpace(s.Spec), TimeZone: zoneName(s.TimeZone),
		Identifier: ptr(s.Identifier), Input: ptr(s.Input), Priority: s.Priority,
		Insertion: int16(insertionOf(s)), CatchUp: int32(s.CatchUp), Paused: s.Paused,
		NextFire: c.next(now), Now: r.clock(),
	}
	row, err := r.q.ScheduleCreate(ctx, h, arg)
	if SQLState(err) == sqlstateFKViolation {
		// the topic destroyed meanwhile (its foreign key, on Citus its trigger)
		return Schedule{}, fmt.Errorf("create schedule %q: topic %q: %w", name, s.Topic, ErrUnknownTopic)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := r.Topic(ctx, h, s.Topic); err != nil {
			return Schedule{}, fmt.Errorf("create schedule %q: %w", name, err)
		}
		return Schedule{}, fmt.Errorf("create schedule %q: %w", name, ErrScheduleExists)
	}
	if err != nil {
		return Schedule{}, mapError(fmt.Sprintf("create schedule %q", name), err)
	}
	return scheduleFrom(row), nil
}

// Schedule returns one schedule, or ErrUnknownSchedule.
func (r *Repository) Schedule(ctx context.Context, h Handle, name string) (Schedule, error) {
	if err := ValidateScheduleName(name); err != nil {
		return Schedule{}, fmt.Errorf("get schedule: %w", err)
	}
	row, err := r.q.ScheduleGet(ctx, h, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, unknownSchedule("get", name)
	}
	if err != nil {
		return Schedule{}, mapError(fmt.Sprintf("get schedule %q", name), err)
	}
	return scheduleFrom(row), nil
}

// Schedules lists every schedule, by name, with its next fire time.
func (r *Repository) Schedules(ctx context.Context, h Handle) ([]Schedule, error) {
	rows, err := r.q.ScheduleList(ctx, h)
	if err != nil {
		return nil, mapError("list schedules", err)
	}
	out := make([]Schedule, len(rows))
	for i, row := range rows {
		out[i] = scheduleFrom(row)
	}
	return out, nil
}

// SchedulesOf returns the schedules of topic, by name: those that go with it when it is
// destroyed. An unknown topic has none.
func (r *Repository) SchedulesOf(ctx context.Context, h Handle, topic string) ([]Schedule, error) {
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	rows, err := r.q.ScheduleListOfTopic(ctx, h, topic)
	if err != nil {
		return nil, mapError(fmt.Sprintf("list schedules of topic %q", topic), err)
	}
	out := make([]Schedule, len(rows))
	for i, row := range rows {
		out[i] = scheduleFrom(row)
	}
	return out, nil
}

// ExistingSchedules returns which of names are schedules now, by name: for a process
// that keeps something per schedule (metrics series) to drop what removed schedules
// left. Unknown and invalid names are simply left out.
func (r *Repository) ExistingSchedules(ctx context.Context, h Handle, names ...string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	existing, err := r.q.ScheduleExisting(ctx, h, names)
	if err != nil {
		return nil, mapError("read schedules", err)
	}
	return existing, nil
}

// SchedulePageMax is the most schedules SchedulePage returns at once.
const SchedulePageMax = 1000

// SchedulePage returns up to size schedules (1..SchedulePageMax) by name after the name
// after ("" starts at the first), those whose name or topic contains search
// (case-insensitive; "" keeps every one): a listing's page, read through the
// schedules' primary key whatever their number. Pass the last name of a page as after
// for the next.
func (r *Repository) SchedulePage(ctx context.Context, h Handle, search, after string, size int) ([]Schedule, error) {
	if size < 1 || size > SchedulePageMax {
		return nil, fmt.Errorf("%w: schedule page size %d is outside 1..%d", ErrInvalid, size, SchedulePageMax)
	}
	if p := unstorable(search); p != "" {
		return nil, invalid("schedule search %s", p)
	}
	if p := unstorable(after); p != "" {
		return nil, invalid("schedule page position (after) %s", p)
	}
	rows, err := r.q.SchedulePage(ctx, h, db.SchedulePageParams{After: after, Search: search, Size: int32(size)})
	if err != nil {
		return nil, mapError("page schedules", err)
	}
	out := make([]Schedule, len(rows))
	for i, row := range rows {
		out[i] = scheduleFrom(row)
	}
	return out, nil
}

// UpdateSchedule changes some settings of a schedule and keeps the others: change
// receives the settings as stored and modifies what it wants; the result is validated
// and written back (ErrInvalid naming the field, ErrUnknownTopic for an unregistered
// topic, nothing written), and the schedule returned as stored. The row is locked from
// the read to the write, in a nested transaction of h. A new spec, or a new time zone of
// a cron spec, restarts the fire times from now (an @every spec counts real time: a
// change of its zone alone does not move it); pausing keeps the next fire time and
// resuming moves it to the first after now, so the fires skipped while paused are not
// replayed (ResumeSchedule can replay them); an @every schedule keeps its phase. The
// database checks the spec and the zone too (task_schedule_check, migration 000041): a
// zone Go loads but the database does not list (europe/paris, which a case-insensitive
// file system lets Go load) returns ErrInvalid naming the time zone.
func (r *Repository) UpdateSchedule(ctx context.Context, h Handle, name string, change func(*ScheduleSettings)) (Schedule, error) {
	return r.updateSchedule(ctx, h, name, "update", false, change)
}

// PauseSchedule stops a schedule firing until ResumeSchedule; it returns the schedule
// as stored, or ErrUnknownSchedule.
func (r *Repository) PauseSchedule(ctx context.Context, h Handle, name string) (Schedule, error) {
	return r.updateSchedule(ctx, h, name, "pause", false, func(s *ScheduleSettings) { s.Paused = true })
}

// ResumeSchedule lets a paused schedule fire again. Without replay its next fire time
// is the first after now: the fire times it skipped while paused are not pushed; for
// @every the next point of its grid (the time it was created or its spec last changed
// plus whole periods), so a schedule resumed before it skipped anything keeps its next
// fire time. With
// replay it keeps the next fire time it had, so the next FireSchedules pushes the skipped
// times as for any late schedule: the latest one, or up to CatchUp of them. Resuming a
// running schedule changes nothing.
func (r *Repository) ResumeSchedule(ctx context.Context, h Handle, name string, replay bool) (Schedule, error) {
	return r.updateSchedule(ctx, h, name, "resume", replay, func(s *ScheduleSettings) { s.Paused = false })
}

// unchanged reports whether writing p would leave the schedule's row as it is.
func unchanged(row db.TaskSchedule, p db.ScheduleUpdateParams) bool {
	same := func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	return row.Topic == p.Topic && row.Spec == p.Spec && row.TimeZone == p.TimeZone &&
		same(row.Identifier, p.Identifier) && same(row.Input, p.Input) && row.Priority == p.Priority &&
		row.Insertion == p.Insertion && row.CatchUp == p.CatchUp && row.Paused == p.Paused
}

func (r *Repository) updateSchedule(ctx context.Context, h Handle, name, op string, replay bool, change func(*ScheduleSettings)) (Schedule, error) {
	if err := ValidateScheduleName(name); err != nil {
		return Schedule{}, fmt.Errorf("%s schedule: %w", op, err)
	}
	var out Schedule
	err := inTx(ctx, h, func(tx pgx.Tx) error {
		row, err := r.q.ScheduleGetForUpdate(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return unknownSchedule(op, name)
		}
		if err != nil {
			return mapError(fmt.Sprintf("%s schedule %q", op, name), err)
		}
		old := scheduleFrom(row)
		s := old.ScheduleSettings
		change(&s)
		// a new zone is checked as at creation, in the database too
		newZone := zoneName(s.TimeZone) != old.TimeZone
		err = s.ValidateChange(old.ScheduleSettings, newZone)
		if err == nil && newZone {
			err = r.checkZone(ctx, tx, s.TimeZone)
		}
		if err != nil {
			return fmt.Errorf("%s schedule %q: %w", op, name, err)
		}
		if s.Identifier != old.Identifier {
			if err := CheckNameAsIdentifier(name, s); err != nil {
				return fmt.Errorf("%s schedule %q: %w", op, name, err)
			}
		}
		if s.Topic != old.Topic {
			// on Citus task_schedule has no foreign key to task_topic: look
			if citus, err := r.onCitus(ctx, tx); err != nil {
				return mapError(fmt.Sprintf("%s schedule %q", op, name), err)
			} else if citus {
				if _, err := r.Topic(ctx, tx, s.Topic); errors.Is(err, ErrUnknownTopic) {
					return fmt.Errorf("%s schedule %q: topic %q: %w", op, name, s.Topic, ErrUnknownTopic)
				} else if err != nil {
					return err
				}
			}
		}
		c, _ := parseStoredSchedule(s.Spec, s.TimeZone)
		// A new spec, or a new zone of a cron spec, restarts the fire times from now; an
		// @every spec counts real time, so its zone changes nothing. A resume without
		// replay passes over the fire times skipped while paused, an @every schedule
		// keeping its phase: its next fire time is the next point of its grid.
		// A spec stored untrimmed (by hand before 000041, or by 000016's task_schedule,
		// which trimmed spaces only) is kept as it is when the new one is the same
		// trimmed: written trimmed, it would be a new spec to the trigger, which
		// restarts the fire times.
		spec := strings.TrimSpace(s.Spec)
		if spec == strings.TrimSpace(old.Spec) {
			spec = old.Spec
		}
		restart := spec != old.Spec || (zoneName(s.TimeZone) != old.TimeZone && c.spec != nil)
		resume := old.Paused && !s.Paused
		params := db.ScheduleUpdateParams{
			Name: name, Topic: s.Topic, Spec: spec, TimeZone: zoneName(s.TimeZone),
			Identifier: ptr(s.Identifier), Input: ptr(s.Input), Priority: s.Priority,
			Insertion: int16(insertionOf(s)), CatchUp: int32(s.CatchUp), Paused: s.Paused,
			Now: r.clock(),
		}
		if unchanged(row, params) {
			// nothing to write (a running schedule resumed, a priority set to what it
			// is): its updated time stays when its settings last changed
			out = old
			return nil
		}
		updated, err := r.q.ScheduleUpdate(ctx, tx, params)
		if err != nil {
			if SQLState(err) == sqlstateFKViolation {
				return fmt.Errorf("%s schedule %q: topic %q: %w", op, name, s.Topic, ErrUnknownTopic)
			}
			return mapError(fmt.Sprintf("%s schedule %q", op, name), err)
		}
		// task_schedule_check marked the next fire time for recomputing (restart,
		// resume): it is computed here, by the firers' clock, and written in the same
		// transaction.
		if restart || resume {
			next, from := row.NextFire, row.FireFrom // a replay keeps them
			if restart || !replay {
				now, err := r.databaseNow(ctx, tx)
				if err != nil {
					return fmt.Errorf("%s schedule %q: %w", op, name, err)
				}
				// never before the last fire time pushed: now is the transaction's
				// start, and a fire another firer committed since then (the row lock
				// above waited for it) would be pushed again
				floor := later(now, old.LastFire)
				var t time.Time
				if restart {
					t = c.next(floor) // a new grid
				} else {
					t = c.after(old.NextFire, floor) // the grid it had
				}
				next, from = &t, nil
			}
			updated, err = r.q.ScheduleSetNextFire(ctx, tx, db.ScheduleSetNextFireParams{Name: name, NextFire: next, FireFrom: from})
			if err != nil {
				return mapError(fmt.Sprintf("%s schedule %q", op, name), err)
			}
		}
		out = scheduleFrom(updated)
		return nil
	})
	return out, err
}

// RemoveSchedule deletes a schedule; it reports false for an unknown one. The tasks it
// pushed stay.
func (r *Repository) RemoveSchedule(ctx context.Context, h Handle, name string) (bool, error) {
	if err := ValidateScheduleName(name); err != nil {
		return false, fmt.Errorf("remove schedule: %w", err)
	}
	n, err := r.q.ScheduleDelete(ctx, h, name)
	if err != nil {
		return false, mapError(fmt.Sprintf("remove schedule %q", name), err)
	}
	return n > 0, nil
}

// RunSchedule pushes a schedule's task now, as a fire at the current time would, paused
// or not, and leaves its fire times alone.
func (r *Repository) RunSchedule(ctx context.Context, h Handle, name string) (Task, error) {
	s, err := r.Schedule(ctx, h, name)
	if err != nil {
		return Task{}, fmt.Errorf("run schedule: %w", err)
	}
	now, err := r.databaseNow(ctx, h)
	if err != nil {
		return Task{}, fmt.Errorf("run schedule %q: %w", name, err)
	}
	tasks, err := r.Push(ctx, h, s.Topic, insertionOf(s.ScheduleSettings), s.creation(now.Truncate(time.Second)))
	if err != nil {
		return Task{}, fmt.Errorf("run schedule %q: %w", name, err)
	}
	return tasks[0], nil
}

// FireSchedules pushes the task of every running schedule whose next fire time has
// passed, and returns what it pushed. Each schedule is fired in a nested transaction of
// h of its own: its push and the compare-and-set that moves its next fire time on
// commit together, so each fire time is pushed exactly once however many processes call
// FireSchedules at once, and a process that dies mid-way leaves nothing behind (the
// next caller fires it). Schedules another caller holds are fired last, once that caller
// is done with them: the wait for each is bounded by half a second (a schedule still
// held then is left for the next call, its name in an error wrapping ErrScheduleWait),
// and all of them by ctx. A schedule found late pushes its latest missed fire time, or up to CatchUp of
// them. Time is the injected clock (Config.Now) or the database's.
//
// ctx's deadline bounds the waits, not a fire begun: once a schedule is found and
// locked, its fire finishes after that deadline (bounded by fireTimeout, or by the
// deadline when later), since one cut short at each call would never fire (a catch-up
// of thousands of tasks on a busy server may take longer than a processor's round);
// cancelling ctx (a shutdown) stops it. Once the deadline has passed, the schedules not
// yet found are left for the next call, without an error when none failed; a search or
// a wait for due schedules cut short by it returns an error wrapping ErrScheduleWait.
// A search, wait or fire cut short by ctx's cancellation returns an error wrapping
// context.Canceled, never ErrScheduleWait, however the connection cancels (a cancel
// request's SQLSTATE 57014 included). A ctx done before the call fires nothing and
// returns an error wrapping its error (context.Canceled or context.DeadlineExceeded),
// not ErrScheduleWait: nothing was waited for.
//
// A schedule that cannot fire (its topic's queue is full, say) is left for a later
// call and its error returned, joined with the others', after the rest have fired; once
// a topic's queue cap refused one, the other schedules of that topic are left too,
// untried. When its fire was refused (a full queue, a spec or setting that does not
// hold, its topic gone; not a failure of the database) the calls of this Repository
// then pass over it (and them) for a while: 1 s after the first refusal, doubling up to
// a minute, until a fire of it succeeds (one the queue cap refused, a second past its
// topic, whose other schedules are tried first); so that schedules refused again and again,
// whose missed fire times come first, do not take every call's tries from those that
// can fire.
// Every processor calls it on its heartbeat (processor.Config.DisableSchedules).
func (r *Repository) FireSchedules(ctx context.Context, h Handle) ([]Fire, error) {
	var (
		fires []Fire
		errs  []error
		skip  = []string{}
		// topics whose queue cap refused a fire: their other schedules wait for the
		// next round, so that thousands of them on a full topic do not take the round's
		// every try from the schedules of other topics
		skipTopics = []string{}
	)
	// and those whose fire failed in an earlier call, for a while (fireRetries)
	waitingNames, waitingTopics := r.retries.waiting(r.timeNow())
	skip = append(skip, waitingNames...)
	skipTopics = append(skipTopics, waitingTopics...)
	if err := ctx.Err(); err != nil {
		// done before anything was found or waited for: ctx's error alone, not
		// ErrScheduleWait
		return nil, fmt.Errorf("fire schedules: %w", err)
	}
	due, err := r.q.ScheduleAnyDue(ctx, customPlans{h}, db.ScheduleAnyDueParams{Now: r.clock(), Skip: skip, SkipTopics: skipTopics})
	if err != nil || !due {
		return nil, waitError(ctx, mapError("find due schedules", err))
	}
	// A fire in a transaction of its own bounds how long it may sit idle in it (a firer
	// whose host died holds the schedule's row lock until the server ends its session:
	// without a bound, until TCP keepalive notices, two hours by default). In the caller's
	// transaction the setting would outlive the fire: that transaction is the caller's.
	own := autocommit(h)
	// First the schedules no one else holds; then, waiting for them, those another
	// caller held: fired by it meanwhile, they are passed over; left due (it rolled back
	// or died), they are fired here.
	for _, wait := range []bool{false, true} {
		for range fireRound {
			if ctx.Err() != nil && (len(fires) > 0 || len(errs) > 0) {
				return fires, errors.Join(errs...) // the others at the next call
			}
			var (
				fired *Fire
				name  string
				topic string
				found bool
				held  string // the schedule another session held past scheduleLockWait
			)
			fctx, cancel := fireContext(ctx)
			// Once the fire's statements have run, a cancellation no longer stops it:
			// its COMMIT, interrupted, might still happen, unreported.
			commitCtx, cancelCommit := context.WithTimeout(context.WithoutCancel(fctx), fireTimeout)
			err := inTxCommitting(fctx, commitCtx, h, func(tx pgx.Tx) error {
				if own {
					if err := r.q.SetIdleTimeout(ctx, tx, fmt.Sprintf("%dms", fireIdleTimeout.Milliseconds())); err != nil {
						return mapError("find due schedules", err)
					}
				}
				row, err := r.due(ctx, tx, skip, skipTopics, wait, &held)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				if errors.Is(err, errFiredElsewhere) {
					name = held // waited for: its holder fired it
					return err
				}
				if err != nil {
					return mapError("find due schedules", err)
				}
				found, name, topic = true, row.TaskSchedule.Name, row.TaskSchedule.Topic
				fired, err = r.fire(fctx, tx, scheduleFrom(row.TaskSchedule), row.TaskSchedule.NextFire, row.TaskSchedule.FireFrom, row.Now)
				return err
			})
			cancelCommit()
			cancel()
			if !found && err == nil {
				break
			}
			if errors.Is(err, errFiredElsewhere) {
				skip = append(skip, name)
				continue // another caller fired it: nothing to report
			}
			if held != "" && SQLState(err) == sqlstateLockNotAvailable {
				// held by another session (a transaction left open on it, or a firer
				// whose push waits): left due for the next call, the rest go on
				errs = append(errs, fmt.Errorf("%w: schedule %q is held by another session for more than %v; left for the next call",
					ErrScheduleWait, held, scheduleLockWait))
				skip = append(skip, held)
				continue
			}
			if err != nil {
				if !found {
					return fires, errors.Join(append(errs, waitError(ctx, err))...)
				}
				errs = append(errs, cancelled(ctx, err))
				skip = append(skip, name)
				full := ""
				if errors.Is(err, ErrQueueFull) {
					skipTopics = append(skipTopics, topic)
					full = topic
				}
				if RefusedFire(err) {
					r.retries.failed(r.timeNow(), name, full)
				}
				continue
			}
			r.retries.fired(name, topic)
			if fired != nil {
				fires = append(fires, *fired)
			}
		}
	}
	return fires, errors.Join(errs...)
}

// fireIdleTimeout is the idle_in_transaction_session_timeout of a fire's own
// transaction: the server ends the session of a firer that leaves it idle longer (its
// host died, or hangs), which frees the schedule's row lock, so that another firer fires
// it within about fireIdleTimeout plus a heartbeat. A live firer's fire sends its
// statements back to back: the gaps are round trips and Go's computing of the fire
// times, milliseconds.
const fireIdleTimeout = 10 * time.Second

// fireTimeout bounds the fire of one schedule found due, which the caller's deadline
// does not cut short (FireSchedules), when the deadline leaves it less.
const fireTimeout = time.Minute

// fireContext returns the context of one schedule's fire: ctx's values, cancelled when
// ctx is cancelled but not when its deadline passes, and bounded by fireTimeout or by
// that deadline, whichever is later.
func fireContext(ctx context.Context) (context.Context, context.CancelFunc) {
	bound := fireTimeout
	if d, ok := ctx.Deadline(); ok {
		bound = max(bound, time.Until(d))
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bound)
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return fctx, func() { stop(); cancel() }
}

// waitError marks err, an error of finding or waiting for due schedules, with
// ErrScheduleWait when ctx's deadline cut it short, with context.Canceled when ctx was
// cancelled (cancelled).
func waitError(ctx context.Context, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrScheduleWait, err)
	}
	return cancelled(ctx, err)
}

// cancelled adds ctx's error to err when ctx was cancelled and err does not wrap it
// already: a statement interrupted by a cancel request (pgconn's
// CancelRequestContextWatcherHandler) fails with the server's SQLSTATE 57014, which
// says nothing of the context, where the caller tells a shutdown by context.Canceled.
func cancelled(ctx context.Context, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.Canceled) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", err, ctx.Err())
	}
	return err
}

// due locks the oldest due schedule not in skip: skipping those others hold, or
// waiting for them. A wait is for the oldest due schedule left (all others were fired
// or skipped by the first pass), bounded by scheduleLockWait: past it the statement
// fails with lock_timeout's SQLSTATE and *held names the schedule, which the caller
// leaves for its next call. (Unbounded, a schedule an application's transaction held
// made every round wait out its deadline, and schedules due every second lost fire
// times meanwhile.)
//
// Its statements are planned at each call (customPlans): a due schedule is one whose
// next fire time is NULL or past, which a custom plan reads as two ranges of
// task_schedule_due (a BitmapOr), but the generic plan a cached statement gets after
// five calls read every running schedule in next-fire order, filtering out those not
// due: the whole table at every round of every processor when none is (6 ms and 163
// buffers at 10 000 schedules; TestSchedulesDueReadOnlyTheDue).
func (r *Repository) due(ctx context.Context, tx pgx.Tx, skip, skipTopics []string, wait bool, held *string) (db.ScheduleDueRow, error) {
	if !wait {
		return r.q.ScheduleDue(ctx, customPlans{tx}, db.ScheduleDueParams{Now: r.clock(), Skip: skip, SkipTopics: skipTopics})
	}
	name, err := r.q.ScheduleDueNext(ctx, customPlans{tx}, db.ScheduleDueNextParams{Now: r.clock(), Skip: skip, SkipTopics: skipTopics})
	if err != nil {
		return db.ScheduleDueRow{}, err
	}
	previous, err := r.q.LockTimeout(ctx, tx)
	if err != nil {
		return db.ScheduleDueRow{}, err
	}
	if err := r.q.SetLockTimeout(ctx, tx, fmt.Sprintf("%dms", scheduleLockWait.Milliseconds())); err != nil {
		return db.ScheduleDueRow{}, err
	}
	*held = name
	row, err := r.q.ScheduleLockDue(ctx, tx, db.ScheduleLockDueParams{Now: r.clock(), Name: name})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			// fired (or paused) by its holder meanwhile: passed over
			return db.ScheduleDueRow{}, errFiredElsewhere
		}
		return db.ScheduleDueRow{}, err
	}
	*held = ""
	// the fire's own statements wait as long as the session lets them
	if err := r.q.SetLockTimeout(ctx, tx, previous); err != nil {
		return db.ScheduleDueRow{}, err
	}
	return db.ScheduleDueRow(row), nil
}

// scheduleLockWait bounds FireSchedules' wait for a due schedule another session holds:
// long enough for another firer's fire to commit, short enough that a transaction left
// open on a schedule costs each round no more.
const scheduleLockWait = 500 * time.Millisecond

// fire pushes the due fire times of one locked schedule and advances its next fire
// time, in tx; nil when there was nothing to push (a first fire time computed). Fire
// times at or before fireFrom (task_schedule_check's mark: a schedule changed or
// resumed in SQL) are not pushed; a NULL next fire time (expected) is the first after
// fireFrom, or after the schedule's creation.
func (r *Repository) fire(ctx context.Context, tx pgx.Tx, s Schedule, expected, fireFrom *time.Time, now time.Time) (*Fire, error) {
	c, err := parseStoredSchedule(s.Spec, s.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("fire schedule %q: %w", s.Name, err)
	}
	start := s.NextFire
	switch {
	case expected == nil && fireFrom != nil:
		start = c.next(*fireFrom)
	case expected == nil:
		start = c.next(s.Created)
	case fireFrom != nil && !start.After(*fireFrom):
		// resumed in SQL: the times skipped while paused are passed over, an @every
		// schedule keeping its phase
		start = c.after(start, *fireFrom)
	}
	if start.IsZero() {
		return nil, fmt.Errorf("fire schedule %q: %w: spec %q has no fire time after %v", s.Name, ErrInvalid, s.Spec, s.Created)
	}
	if start.After(now) {
		// Declared in SQL: its first fire time is still to come.
		return nil, r.advance(ctx, tx, s.Name, expected, db.ScheduleAdvanceParams{NextFire: start})
	}
	// the latest CatchUp times (at least one), or more when more fell due within the
	// grace: those are on time, not missed
	n := max(1, s.CatchUp, c.countAfter(start, now.Add(-r.scheduleGrace()), now, MaxCatchUp))
	// as many as fireInputBudget carries (every time's task is as large: a time is
	// written in 20 characters), the older ones missed
	first := s.creation(start)
	if size := len(first.Input) + len(first.Identifier); size > 0 {
		n = min(n, max(1, fireInputBudget/size))
	}
	times, missed, next := c.due(start, now, n)
	if next.IsZero() {
		return nil, fmt.Errorf("fire schedule %q: %w: spec %q has no fire time after %v", s.Name, ErrInvalid, s.Spec, now)
	}
	if len(times) == 0 {
		// The stored next fire time is not one of the spec's (written by hand in SQL, or
		// by an earlier pgtask, whose arithmetic erred in some zones) and no
		// fire time passed since it: nothing is due, the next one is.
		return nil, r.advance(ctx, tx, s.Name, expected, db.ScheduleAdvanceParams{NextFire: next})
	}
	tasks, err := r.pushFire(ctx, tx, s, times)
	if errors.Is(err, ErrQueueFull) && len(times) > 1 {
		// The catch-up does not fit under the topic's queue cap (it never would when it
		// exceeds the cap, and the schedule would stay due for ever): the latest time
		// alone, as without catch-up, the others missed.
		missed += int64(len(times) - 1)
		times = times[len(times)-1:]
		tasks, err = r.pushFire(ctx, tx, s, times)
	}
	if err != nil {
		return nil, fmt.Errorf("fire schedule %q: %w", s.Name, err)
	}
	last := times[len(times)-1]
	seq := tasks[len(tasks)-1].Sequence
	err = r.advance(ctx, tx, s.Name, expected, db.ScheduleAdvanceParams{
		NextFire: next, LastFire: &last, FiredAt: &now, LastSequence: &seq, Fired: int64(len(times)),
	})
	if err != nil {
		return nil, err
	}
	return &Fire{Schedule: s.Name, Topic: s.Topic, Times: times, Missed: missed, Tasks: tasks, At: now}, nil
}

// pushFire pushes the tasks of a schedule's fire times in tx; in a savepoint when there
// are several, so that a refusal of the queue cap leaves tx usable for the latest alone.
func (r *Repository) pushFire(ctx context.Context, tx pgx.Tx, s Schedule, times []time.Time) ([]Task, error) {
	creations := make([]Creation, len(times))
	for i, t := range times {
		creations[i] = s.creation(t)
	}
	if len(times) == 1 {
		return r.Push(ctx, tx, s.Topic, insertionOf(s.ScheduleSettings), creations...)
	}
	var tasks []Task
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var err error
		tasks, err = r.Push(ctx, sp, s.Topic, insertionOf(s.ScheduleSettings), creations...)
		return err
	})
	return tasks, err
}

// errFiredElsewhere rolls back a fire whose compare-and-set found the next fire time
// moved: another firer pushed it.
var errFiredElsewhere = errors.New("fired by another caller")

// advance runs the compare-and-set on next_fire.
func (r *Repository) advance(ctx context.Context, tx pgx.Tx, name string, expected *time.Time, arg db.ScheduleAdvanceParams) error {
	arg.Name, arg.Expected = name, expected
	n, err := r.q.ScheduleAdvance(ctx, tx, arg)
	if err != nil {
		return mapError(fmt.Sprintf("advance schedule %q", name), err)
	}
	if n != 1 {
		return fmt.Errorf("advance schedule %q: %w", name, errFiredElsewhere)
	}
	return nil
}

// creation is the task a fire at t pushes.
func (s Schedule) creation(t time.Time) Creation {
	id := s.Identifier
	if id == "" {
		id = s.Name
	}
	return Creation{
		Identifier: fireText(id, t),
		Input:      fireText(s.Input, t),
		Reference:  ScheduleReferencePrefix + s.Name,
		Priority:   s.Priority,
	}
}

func insertionOf(s ScheduleSettings) Insertion {
	if s.Insertion == nil {
		return Supersede
	}
	return *s.Insertion
}

func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

func unknownSchedule(op, name string) error {
	return fmt.Errorf("%s schedule %q: %w", op, name, ErrUnknownSchedule)
}

// scheduleFrom converts a generated row into a Schedule.
func scheduleFrom(row db.TaskSchedule) Schedule {
	insertion := Insertion(row.Insertion)
	s := Schedule{
		Name: row.Name,
		ScheduleSettings: ScheduleSettings{
			Topic: row.Topic, Spec: row.Spec, TimeZone: row.TimeZone, Identifier: str(row.Identifier),
			Input: str(row.Input), Priority: row.Priority, Insertion: &insertion, CatchUp: int(row.CatchUp),
			Paused: row.Paused,
		},
		NextFire:    timeOf(row.NextFire),
		LastFire:    timeOf(row.LastFire),
		LastFiredAt: timeOf(row.LastFiredAt),
		Fires:       row.Fires,
		Created:     row.Created,
		Updated:     row.Updated,
	}
	if row.LastSequence != nil {
		s.LastSequence = *row.LastSequence
	}
	return s
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
