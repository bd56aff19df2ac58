package repository

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NotificationChannel is the LISTEN/NOTIFY channel every pgtask notification uses.
const NotificationChannel = "task_notification"

// Event is the kind of a notification.
type Event string

// The notification events, each "<EVENT> <md5(topic)>[ <detail>]" on NotificationChannel.
const (
	// EventWork: a topic received READY work: a push, a retry, a snooze or a task handed
	// back by a completion, an expiry, a revival, a junction release. Pushes, completions
	// and expiries say where the work is (Notification.From) and, when none of it is
	// due yet, when it will be (Notification.Delay, Notification.Due): "WORK
	// <md5(topic)> <priority> <sequence>[ <milliseconds>[ <due>]]".
	EventWork Event = "WORK"
	// EventActivation: a topic was paused or resumed, or its settings changed (limits
	// among them): its processors read it again.
	EventActivation Event = "ACTIVATION"
	// EventCancel: an ACTIVE task was cancelled; the notification carries its sequence.
	EventCancel Event = "CANCEL"
)

// Notification is a parsed task_notification payload: "<EVENT> <md5(topic)>[ <detail>]".
type Notification struct {
	// Event is what happened.
	Event Event
	// TopicHash is the hex MD5 of the topic name (see TopicHash).
	TopicHash string
	// Sequence is the cancelled task's sequence for EventCancel.
	Sequence int64
	// From is, for an EventWork, the position of the first task the write made READY in
	// FIFO poll order: a poll from there sees every one of them. Zero when the work may
	// lie anywhere in the topic.
	From Position
	// Delay is, for an EventWork whose tasks are all delayed, how long after the writing
	// statement ended the earliest of them falls due (by the database's clock, rounded
	// up to the millisecond): a listener counts it from the notification's arrival,
	// which follows the commit by a millisecond or so. Zero when one is due at once.
	Delay time.Duration
	// Due is, with Delay, when the earliest of them falls due by the database's clock
	// (the payload's sixth field, whole milliseconds since the Unix epoch rounded up;
	// written from schema 53 on). Delay counts from the writing statement, which a long
	// transaction commits long after: its tasks are then due before the notification's
	// arrival plus Delay. Zero when the payload has none (an earlier release's write, a
	// notification of your own, a time past the year 9999).
	Due time.Time
}

// TopicHash returns the hex MD5 of a topic name, as notifications carry it: fixed length
// and safe for any topic text.
func TopicHash(topic string) string {
	sum := md5.Sum([]byte(topic))
	return hex.EncodeToString(sum[:])
}

// ParseNotification parses a task_notification payload.
func ParseNotification(payload string) (Notification, error) {
	fields := strings.Fields(payload)
	if len(fields) < 2 || len(fields[1]) != 32 {
		return Notification{}, invalid("notification %q: want \"<EVENT> <md5(topic)>\"", payload)
	}
	n := Notification{Event: Event(fields[0]), TopicHash: fields[1]}
	switch n.Event {
	case EventActivation:
	case EventWork:
		// "WORK <md5(topic)> <priority> <sequence>[ <milliseconds>[ <due>]]" from a push,
		// a completion or an expiry; fields beyond are ignored, as a later version may
		// add some.
		if len(fields) >= 6 {
			ms, err := strconv.ParseInt(fields[5], 10, 64)
			if err != nil || ms <= 0 {
				return Notification{}, invalid("notification %q: due time %q is not a number of milliseconds since 1970", payload, fields[5])
			}
			if ms <= maxDueMs {
				n.Due = time.UnixMilli(ms)
			}
		}
		if len(fields) >= 5 {
			ms, err := strconv.ParseInt(fields[4], 10, 64)
			if err != nil {
				return Notification{}, invalid("notification %q: delay %q is not a number of milliseconds", payload, fields[4])
			}
			// Below 0: due now. The senders read the clock twice (is the task due yet, and
			// how long until it is), so a backend paused between the two reads sends a
			// task falling due meanwhile with a delay of -1 or less.
			n.Delay = time.Duration(min(max(ms, 0), int64(maxDelay/time.Millisecond))) * time.Millisecond
		}
		if len(fields) >= 4 {
			priority, err := strconv.ParseInt(fields[2], 10, 16)
			if err != nil {
				return Notification{}, invalid("notification %q: priority: %v", payload, err)
			}
			seq, err := strconv.ParseInt(fields[3], 10, 64)
			if err != nil || seq <= 0 {
				return Notification{}, invalid("notification %q: sequence %q is not a positive number", payload, fields[3])
			}
			n.From = Position{Priority: int16(priority), Sequence: seq}
		}
	case EventCancel:
		if len(fields) != 3 {
			return Notification{}, invalid("notification %q: CANCEL carries a sequence", payload)
		}
		seq, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			return Notification{}, invalid("notification %q: sequence: %v", payload, err)
		}
		n.Sequence = seq
	default:
		return Notification{}, invalid("notification %q: unknown event %q", payload, fields[0])
	}
	return n, nil
}

// String formats the notification as its payload.
func (n Notification) String() string {
	if n.Event == EventCancel {
		return fmt.Sprintf("%s %s %d", n.Event, n.TopicHash, n.Sequence)
	}
	if n.Event == EventWork && !n.From.IsZero() {
		if n.Delay > 0 {
			delay := fmt.Sprintf("%s %s %d %d %d", n.Event, n.TopicHash, n.From.Priority, n.From.Sequence,
				(n.Delay+time.Millisecond-1)/time.Millisecond)
			if !n.Due.IsZero() {
				return fmt.Sprintf("%s %d", delay, (n.Due.UnixMicro()+999)/1000)
			}
			return delay
		}
		return fmt.Sprintf("%s %s %d %d", n.Event, n.TopicHash, n.From.Priority, n.From.Sequence)
	}
	return fmt.Sprintf("%s %s", n.Event, n.TopicHash)
}

// maxDelay caps the delays notifications and NextDue report, so that they convert to a
// time.Duration without overflow (a task delayed by centuries is simply "not soon").
const maxDelay = 100 * 365 * 24 * time.Hour

// maxDueMs is the latest due time a notification gives (the start of the year 10000):
// a later one is "not soon" (PostgreSQL's timestamptz reaches the year 294276).
const maxDueMs = 253402300800000
