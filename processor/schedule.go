package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/repository"
)

// SchedulesConfig configures RunSchedules.
type SchedulesConfig struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Repository fires the schedules; nil creates one with a random owner.
	Repository *repository.Repository
	// Logger receives what fires late and what fails; nil discards it.
	Logger *slog.Logger
	// Interval is how often the due schedules are fired: a fire is late by at most
	// this (and the round's own time). Fire times due within twice this before a round
	// are on time, each pushed whatever the schedule's CatchUp
	// (Repository.SetScheduleGrace). Default HeartbeatIntervalDefault; at least
	// HeartbeatIntervalMin.
	Interval time.Duration
	// Timeout bounds one round: its statements and its waits for a schedule another
	// process holds; a fire begun finishes (Repository.FireSchedules), and the schedules
	// not reached are fired at the next round. Default ExpiryTimeoutDefault; at least
	// SchedulesTimeoutMin, since a round that times out before its first fire fires
	// nothing, round after round.
	Timeout time.Duration
	// ErrorLogInterval is how often a failure that goes on is logged again. Default
	// ErrorLogIntervalDefault.
	ErrorLogInterval time.Duration
	// OnFire, when set, is called with what each round pushed (metrics.Metrics.OnFire).
	OnFire func([]repository.Fire)
}

// SchedulesTimeoutMin is the shortest SchedulesConfig.Timeout: a round's statements
// before its first fire (its search, the lock's wait setting) take a few round trips.
const SchedulesTimeoutMin = time.Second

// RunSchedules fires the database's due schedules every Interval until ctx is done, as
// every Processor does on its heartbeat: for a process that runs no Processor (`pgtask
// serve`). Any number of processes may run it; each fire time is pushed once
// (Repository.FireSchedules). It returns nil once ctx is done, or an error for a bad
// config.
func RunSchedules(ctx context.Context, cfg SchedulesConfig) error {
	if cfg.Pool == nil {
		return errors.New("processor: schedules config: Pool is required")
	}
	if cfg.Interval < 0 || cfg.Timeout < 0 || cfg.ErrorLogInterval < 0 {
		return fmt.Errorf("processor: schedules config: Interval %v, Timeout %v and ErrorLogInterval %v must not be negative",
			cfg.Interval, cfg.Timeout, cfg.ErrorLogInterval)
	}
	if cfg.Interval == 0 {
		cfg.Interval = HeartbeatIntervalDefault
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = ExpiryTimeoutDefault
	}
	if cfg.Interval < HeartbeatIntervalMin {
		return fmt.Errorf("processor: schedules config: Interval %v is below %v", cfg.Interval, HeartbeatIntervalMin)
	}
	if cfg.Timeout < SchedulesTimeoutMin {
		return fmt.Errorf("processor: schedules config: Timeout %v is below %v: a round may take that long before its first fire", cfg.Timeout, SchedulesTimeoutMin)
	}
	if cfg.ErrorLogInterval == 0 {
		cfg.ErrorLogInterval = ErrorLogIntervalDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Repository == nil {
		repo, err := repository.New(repository.Config{})
		if err != nil {
			return fmt.Errorf("processor: schedules config: %w", err)
		}
		cfg.Repository = repo
	}
	// a fire time due within two intervals of a round is on time, not missed
	if err := cfg.Repository.SetScheduleGrace(2 * cfg.Interval); err != nil {
		return fmt.Errorf("processor: schedules config: %w", err)
	}
	fs := newFaults(cfg.Logger, cfg.ErrorLogInterval, max(30*time.Second, 3*cfg.Interval))
	s := &scheduler{
		pool: cfg.Pool, repo: cfg.Repository, logger: cfg.Logger, interval: cfg.Interval, timeout: cfg.Timeout,
		errorLogInterval: cfg.ErrorLogInterval, onFire: cfg.OnFire,
		outcome: func(ctx context.Context, err error) {
			if err != nil {
				fs.fail(ctx, "fire schedules", err)
			} else {
				fs.ok("fire schedules")
			}
		},
	}
	s.run(ctx)
	return nil
}

// scheduler is the loop that fires schedules: a Processor's, or RunSchedules'.
type scheduler struct {
	pool             *pgxpool.Pool
	repo             *repository.Repository
	logger           *slog.Logger
	interval         time.Duration
	timeout          time.Duration
	errorLogInterval time.Duration
	onFire           func([]repository.Fire)
	// outcome records a round's database error (nil: success).
	outcome func(ctx context.Context, err error)
	// resume, when set, wakes this process's managers of a topic pushed to.
	resume func(topic string)
	// logged is when each refusal was last logged.
	logged map[string]time.Time
}

// run fires the due schedules at once, then every interval, until ctx is done.
func (s *scheduler) run(ctx context.Context) {
	ticker := time.NewTicker(s.interval)
	defer ticker.Stop()
	for {
		s.fire(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// fire runs one round of Repository.FireSchedules, its waits bounded by the timeout: it logs what
// it pushed, wakes the managers of the topics it pushed to and reports to onFire.
func (s *scheduler) fire(ctx context.Context) {
	roundCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	fires, err := s.repo.FireSchedules(roundCtx, s.pool)
	if ctx.Err() == nil {
		// FireSchedules joins the errors of the schedules it could not fire: each is
		// judged by itself, so that one schedule merely held does not hide another's
		// failure of the database from the health reports.
		var held, refusals, failures []error
		for _, e := range parts(err) {
			switch {
			case errors.Is(e, repository.ErrScheduleWait):
				// A schedule another session holds (a transaction left open on
				// task_schedule, say) past the repository's short wait, or the round's
				// timeout run out while waiting: that session's problem, not the
				// database's. The next round tries again. (A fire's own failure, even
				// after the timeout, is reported as what it is.)
				held = append(held, e)
			case repository.RefusedFire(e):
				// A schedule the repository refused to fire (its topic's queue is full, a
				// spec declared in SQL that does not parse) is the schedule's problem,
				// not the database's: logged once per error log interval.
				refusals = append(refusals, e)
			default:
				failures = append(failures, e)
			}
		}
		if len(held) > 0 {
			s.warn("schedules not fired: held by another session", errors.Join(held...))
		}
		if len(refusals) > 0 {
			s.warn("schedules not fired", errors.Join(refusals...))
		}
		s.outcome(ctx, errors.Join(failures...))
	}
	var topics []string
	for _, f := range fires {
		attrs := []any{slog.String("schedule", f.Schedule), slog.String("topic", f.Topic),
			slog.Int("pushed", len(f.Tasks)), slog.Duration("late", f.Lateness())}
		if f.Missed > 0 {
			s.logger.Info("schedule fired late: missed fire times skipped", append(attrs, slog.Int64("missed", f.Missed))...)
		} else {
			s.logger.Debug("schedule fired", attrs...)
		}
		if !slices.Contains(topics, f.Topic) {
			topics = append(topics, f.Topic)
		}
	}
	if s.resume != nil {
		for _, topic := range topics {
			s.resume(topic)
		}
	}
	if len(fires) > 0 && s.onFire != nil {
		s.onFire(fires)
	}
}

// warn logs msg with err at WARN, once per error log interval for the same text.
func (s *scheduler) warn(msg string, err error) {
	key := msg + ": " + err.Error()
	if now := time.Now(); now.Sub(s.logged[key]) >= s.errorLogInterval {
		if s.logged == nil || len(s.logged) > 1000 {
			s.logged = map[string]time.Time{}
		}
		s.logged[key] = now
		s.logger.Warn(msg, slog.Any("error", err))
	}
}

// schedules is the Processor's scheduler, run until ctx is done: a round is given the
// expiry timeout, but not less than SchedulesTimeoutMin (a heartbeat of 100 ms gives an
// expiry timeout of 500 ms, shorter than a round's statements may take).
func (p *Processor) schedules(ctx context.Context) {
	s := &scheduler{
		pool: p.pool, repo: p.repo, logger: p.logger, interval: p.cfg.HeartbeatInterval,
		timeout:          max(p.cfg.ExpiryTimeout, SchedulesTimeoutMin),
		errorLogInterval: p.cfg.ErrorLogInterval, onFire: p.onFire, resume: p.Resume,
		outcome: func(ctx context.Context, err error) { p.outcome(ctx, "fire schedules", err) },
	}
	s.run(ctx)
}

// parts returns the errors errors.Join joined into err, or err alone; none for nil.
func parts(err error) []error {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}
