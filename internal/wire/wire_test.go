package wire

import (
	"encoding/json"
	"testing"
	"time"
)

// TestNullTimeWritesEveryStoredTime: a time is written whatever the server's zone and
// however far from now it was stored: one after 9999 as the last instant RFC 3339 can
// write, one before the year 0 as the first; one within them in UTC but not in its own
// zone (the last microsecond of 9999 east of UTC is in the year 10000) in UTC. Any
// other failed the whole JSON answer.
func TestNullTimeWritesEveryStoredTime(t *testing.T) {
	t.Parallel()
	east, west := time.FixedZone("UTC+2", 2*60*60), time.FixedZone("UTC-2", -2*60*60)
	for _, c := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"LastMicrosecondEast", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).In(east), `"9999-12-31T23:59:59.999999Z"`},
		{"FirstInstantWest", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).In(west), `"0000-01-01T00:00:00Z"`},
		{"AfterTheYear9999", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), `"9999-12-31T23:59:59.999999999Z"`},
		{"BeforeTheYear0", time.Date(-100, 1, 1, 0, 0, 0, 0, time.UTC), `"0000-01-01T00:00:00Z"`},
		{"InItsZone", time.Date(2026, 12, 7, 12, 0, 0, 0, east), `"2026-12-07T12:00:00+02:00"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(nullTime(c.at))
			if err != nil || string(b) != c.want {
				t.Errorf("%v written as %s (%v), want %s", c.at, b, err, c.want)
			}
		})
	}
}
