//go:build unix

package processor

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process of this id runs on this machine (signal 0
// checks without sending anything; EPERM means it runs under another user).
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // unknown: not known to be gone
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
