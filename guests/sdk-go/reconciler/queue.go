package reconciler

import "time"

// Enqueue adds a key of the guest's primary kind to its own work queue, now (after <= 0) or
// not before after (at most 24 h; rounded up to milliseconds). Duplicate adds collapse, and
// the host never runs two reconciles of one key at once. The key's namespace must be the
// manifest's namespace when that is set; at most 10,000 keys may wait.
func Enqueue(key ObjectKey, after time.Duration) error {
	return host().enqueue(key, ceilDiv(after, time.Millisecond), after > 0)
}
