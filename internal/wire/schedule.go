package wire

import (
	"time"

	"github.com/pgtask/pgtask/repository"
)

// Schedule is a schedule as the API shows it: the insertion by name, absent values as
// null (a null identifier is the schedule's name).
type Schedule struct {
	Name         string     `json:"name"`
	Topic        string     `json:"topic"`
	Spec         string     `json:"spec"`
	TimeZone     string     `json:"time_zone"`
	Identifier   *string    `json:"identifier"`
	Input        *string    `json:"input"`
	Priority     int16      `json:"priority"`
	Insertion    string     `json:"insertion"`
	CatchUp      int        `json:"catch_up"`
	Paused       bool       `json:"paused"`
	NextFire     *time.Time `json:"next_fire"`
	LastFire     *time.Time `json:"last_fire"`
	LastFiredAt  *time.Time `json:"last_fired_at"`
	LastSequence *int64     `json:"last_sequence"`
	Fires        int64      `json:"fires"`
	Created      time.Time  `json:"created"`
	Updated      time.Time  `json:"updated"`
}

// FromSchedule converts a stored schedule.
func FromSchedule(s repository.Schedule) Schedule {
	insertion := repository.Supersede
	if s.Insertion != nil {
		insertion = *s.Insertion
	}
	out := Schedule{
		Name:        s.Name,
		Topic:       s.Topic,
		Spec:        s.Spec,
		TimeZone:    s.TimeZone,
		Identifier:  nullText(s.Identifier),
		Input:       nullText(s.Input),
		Priority:    s.Priority,
		Insertion:   insertion.String(),
		CatchUp:     s.CatchUp,
		Paused:      s.Paused,
		NextFire:    nullTime(s.NextFire),
		LastFire:    nullTime(s.LastFire),
		LastFiredAt: nullTime(s.LastFiredAt),
		Fires:       s.Fires,
		Created:     s.Created,
		Updated:     s.Updated,
	}
	if s.LastSequence != 0 {
		out.LastSequence = &s.LastSequence
	}
	return out
}
