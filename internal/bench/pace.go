package bench

import "time"

// paceBatch decides a paced pusher's next step: perSecond is its share of Config.Rate,
// elapsed the time since the run started and done what it pushed so far. It returns how
// many tasks to push now, or 0 and how long to sleep first. A pusher pushes a full batch
// as soon as one is due; fewer only once the oldest due task has waited linger (at once
// when linger is 0), so a fixed-rate producer sends the batches Config.PushBatch asks for
// rather than whatever became due during its previous statement.
func paceBatch(perSecond float64, elapsed time.Duration, done, batch int, linger time.Duration) (int, time.Duration) {
	at := func(n int) time.Duration { // when this pusher's n-th task falls due
		return time.Duration(float64(n) * float64(time.Second) / perSecond)
	}
	due := int(float64(elapsed)*perSecond/float64(time.Second)) - done
	if due >= batch {
		return batch, 0
	}
	if due > 0 && elapsed-at(done+1) >= linger {
		return due, 0
	}
	wake := at(done + 1) // nothing due: when the next task is
	if due > 0 {
		wake = min(at(done+batch), wake+linger)
	}
	return 0, max(wake-elapsed, time.Millisecond)
}
