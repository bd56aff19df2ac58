package repository

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// NotificationChannel is the LISTEN/NOTIFY channel every pgtask notification uses.
const NotificationChannel = "task_notification"

// Event is the kind of a notification.
type Event string

// The notification events (design §6).
const (
	// EventWork: a topic received pollable work (push, revival, junction release).
	EventWork Event = "WORK"
	// EventActivation: a topic was paused or resumed.
	EventActivation Event = "ACTIVATION"
	// EventCancel: an ACTIVE task was cancelled; the notification carries its sequence.
	EventCancel Event = "CANCEL"
)

// Notification is a parsed task_notification payload: "<EVENT> <md5(topic)>[ <detail>]".
type Notification struct {
	Event Event
	// TopicHash is the hex MD5 of the topic name (see TopicHash).
	TopicHash string
	// Sequence is the cancelled task's sequence for EventCancel.
	Sequence int64
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
	case EventWork, EventActivation:
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
	return fmt.Sprintf("%s %s", n.Event, n.TopicHash)
}
