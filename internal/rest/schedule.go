package rest

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/wire"
	"github.com/pgtask/pgtask/repository"
)

// scheduleRequest is the body of POST /schedules and PATCH /schedules/{name}: every
// field optional in a PATCH (absent keeps the stored value).
type scheduleRequest struct {
	Name       *string          `json:"name"`
	Topic      *string          `json:"topic"`
	Spec       *string          `json:"spec"`
	TimeZone   *string          `json:"time_zone"`
	Identifier nullable[string] `json:"identifier" null:"none"`
	Input      nullable[string] `json:"input" null:"none"`
	Priority   *int16           `json:"priority"`
	Insertion  *string          `json:"insertion"`
	CatchUp    *int             `json:"catch_up"`
	Paused     *bool            `json:"paused"`
}

// insertion is the insertion given, parsed; nil when absent. UpdateSchedule writes what
// its change leaves valid, so a PATCH checks it before (a refused insertion must not
// store the other fields), and apply uses it.
func (q scheduleRequest) insertion() (*repository.Insertion, error) {
	if q.Insertion == nil {
		return nil, nil
	}
	i, err := repository.ParseInsertion(*q.Insertion)
	if err != nil {
		return nil, badRequest("field \"insertion\": %s", strings.TrimPrefix(err.Error(), repository.ErrInvalid.Error()+": "))
	}
	return &i, nil
}

// apply writes the fields given into s and checks the result.
func (q scheduleRequest) apply(s *repository.ScheduleSettings) error {
	insertion, err := q.insertion()
	if err != nil {
		return err
	}
	stored := *s
	if q.TimeZone != nil && *q.TimeZone == "" {
		return badRequest(`"time_zone" is empty: give a zone such as UTC or Europe/Paris, or leave the field out (a new schedule's zone is UTC)`)
	}
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	set(&s.Topic, q.Topic)
	set(&s.Spec, q.Spec)
	set(&s.TimeZone, q.TimeZone)
	if q.Identifier.given { // null: the schedule's name
		s.Identifier = deref(q.Identifier.value)
	}
	if q.Input.given { // null: no input
		s.Input = deref(q.Input.value)
	}
	if q.Priority != nil {
		s.Priority = *q.Priority
	}
	if insertion != nil {
		s.Insertion = insertion
	}
	if q.CatchUp != nil {
		s.CatchUp = *q.CatchUp
	}
	if q.Paused != nil {
		s.Paused = *q.Paused
	}
	// a zone or identifier stored before a check refused it still changes, unless given
	if err := s.ValidateChange(stored, q.TimeZone != nil); err != nil {
		return invalid(err)
	}
	return nil
}

func decodeSchedule(body []byte) (scheduleRequest, error) {
	var q scheduleRequest
	if err := decodeStrict(body, &q); err != nil {
		return q, err
	}
	return q, nil
}

// schedulePath is the URL path of a schedule.
func schedulePath(name string) string { return "/schedules/" + url.PathEscape(name) }

// scheduleName is the {name} of the path, checked.
func scheduleName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := repository.ValidateScheduleName(name); err != nil {
		return "", invalid(err)
	}
	return name, nil
}

// listSchedules answers a page of schedules by name (SchedulePage): q (a part of the
// name or the topic), after (the previous page's next) and limit, as GET /topics.
func (s *server) listSchedules(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	values, err := parseQuery(r)
	if err != nil {
		return 0, nil, err
	}
	q, err := decodePageQuery(values, "schedules", repository.MaxScheduleNameLength)
	if err != nil {
		return 0, nil, err
	}
	list, err := s.repo.SchedulePage(r.Context(), s.pool, q.search, q.after, q.limit+1)
	if err != nil {
		return 0, nil, err
	}
	list, next := nextPage(list, q.limit, func(sc repository.Schedule) string { return sc.Name })
	out := make([]wire.Schedule, len(list))
	for i, sc := range list {
		out[i] = wire.FromSchedule(sc)
	}
	return http.StatusOK, map[string]any{"schedules": out, "next": next}, nil
}

func (s *server) createSchedule(w http.ResponseWriter, r *http.Request) (int, any, error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	q, err := decodeSchedule(body)
	if err != nil {
		return 0, nil, err
	}
	if q.Name == nil {
		return 0, nil, badRequest("field \"name\" is required")
	}
	if err := repository.ValidateNewScheduleName(*q.Name); err != nil {
		return 0, nil, invalid(err)
	}
	if q.Topic == nil || q.Spec == nil {
		return 0, nil, badRequest("fields \"topic\" and \"spec\" are required")
	}
	var settings repository.ScheduleSettings
	if err := q.apply(&settings); err != nil {
		return 0, nil, err
	}
	sc, err := s.repo.CreateSchedule(r.Context(), s.pool, *q.Name, settings)
	if err != nil {
		return 0, nil, err
	}
	w.Header().Set("Location", schedulePath(sc.Name))
	return http.StatusCreated, wire.FromSchedule(sc), nil
}

func (s *server) getSchedule(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	sc, err := s.repo.Schedule(r.Context(), s.pool, name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(sc), nil
}

func (s *server) updateSchedule(w http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	q, err := decodeSchedule(body)
	if err != nil {
		return 0, nil, err
	}
	if q.Name != nil && *q.Name != name {
		return 0, nil, badRequest("field \"name\": a schedule cannot be renamed (remove it and create another)")
	}
	// before UpdateSchedule, which writes what apply leaves valid (apply's validation is
	// UpdateSchedule's own)
	if _, err := q.insertion(); err != nil {
		return 0, nil, err
	}
	// In a transaction of its own, which a refusal of apply's rolls back: UpdateSchedule
	// writes what its own validation takes, and apply's is stricter (a zone given is
	// checked as at creation, even the one stored: pgtask schedule set does the same).
	// Atomically's, READ COMMITTED whatever the database's default: the row is locked,
	// maybe after a processor's fire, and read as it is then (a REPEATABLE READ default
	// failed the PATCH with a serialization error).
	var sc repository.Schedule
	err = repository.Atomically(r.Context(), s.pool, func(tx pgx.Tx) error {
		var bad, err error
		sc, err = s.repo.UpdateSchedule(r.Context(), tx, name, func(st *repository.ScheduleSettings) { bad = q.apply(st) })
		return cmp.Or(bad, err)
	})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(sc), nil
}

func (s *server) deleteSchedule(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	removed, err := s.repo.RemoveSchedule(r.Context(), s.pool, name)
	if err != nil {
		return 0, nil, err
	}
	if !removed {
		return 0, nil, fmt.Errorf("remove schedule %q: %w", name, repository.ErrUnknownSchedule)
	}
	return http.StatusOK, map[string]any{"removed": name}, nil
}

func (s *server) pauseSchedule(_ http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	sc, err := s.repo.PauseSchedule(r.Context(), s.pool, name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(sc), nil
}

func (s *server) resumeSchedule(w http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return 0, nil, err
	}
	var q struct {
		Replay bool `json:"replay"`
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := decodeStrict(body, &q); err != nil {
			return 0, nil, err
		}
	}
	sc, err := s.repo.ResumeSchedule(r.Context(), s.pool, name, q.Replay)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(sc), nil
}

func (s *server) runSchedule(w http.ResponseWriter, r *http.Request) (int, any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return 0, nil, err
	}
	task, err := s.repo.RunSchedule(r.Context(), s.pool, name)
	if err != nil {
		return 0, nil, err
	}
	w.Header().Set("Location", taskPath(task.Topic, task.Sequence))
	return http.StatusCreated, map[string]any{"task": wire.FromTask(task)}, nil
}
