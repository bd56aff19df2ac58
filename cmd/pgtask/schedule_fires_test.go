package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

// TestComingFires: `schedule show --next` lists the next fire time and those after it,
// an @every spec's D apart from it (it listed 12:00:29, 12:00:59… for a next fire at
// 12:00:00 of @every 30s).
func TestComingFires(t *testing.T) {
	noon := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		spec string
		next time.Time
		want []time.Time
	}{
		{"@every 30s", noon, []time.Time{noon, noon.Add(30 * time.Second), noon.Add(time.Minute)}},
		{"0 3 * * *", noon.Add(15 * time.Hour), []time.Time{noon.Add(15 * time.Hour), noon.Add(39 * time.Hour), noon.Add(63 * time.Hour)}},
	} {
		s := repository.Schedule{ScheduleSettings: repository.ScheduleSettings{Spec: c.spec}, NextFire: c.next}
		if got := comingFires(s, 3, noon.Add(-time.Hour)); !slices.Equal(got, c.want) {
			t.Errorf("%s from %v: %v, want %v", c.spec, c.next, got, c.want)
		}
	}
	// no next fire time yet: the first after now
	s := repository.Schedule{ScheduleSettings: repository.ScheduleSettings{Spec: "0 3 * * *"}}
	if got := comingFires(s, 1, noon); len(got) != 1 || !got[0].Equal(noon.Add(15*time.Hour)) {
		t.Errorf("without a next fire time: %v", got)
	}
}

// TestShowOverdueSchedule: a schedule whose next fire time has passed unfired (no
// processor ran) shows that time as overdue, not it and the times after it as coming.
func TestShowOverdueSchedule(t *testing.T) {
	next := time.Now().Add(-5 * time.Minute).Truncate(time.Second)
	s := repository.Schedule{Name: "ping", ScheduleSettings: repository.ScheduleSettings{Spec: "@every 30s", TimeZone: "UTC"}, NextFire: next}
	var out bytes.Buffer
	printSchedule(&out, &printer{}, s, 5)
	text := out.String()
	coming := text[strings.Index(text, "coming fire times:"):]
	if lines := strings.Split(strings.TrimSpace(coming), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "overdue") ||
		!strings.Contains(lines[1], next.UTC().Format("2006-01-02 15:04:05")) {
		t.Errorf("schedule show of an overdue schedule:\n%s\nwant its next fire time alone, said to be overdue", text)
	}
}
