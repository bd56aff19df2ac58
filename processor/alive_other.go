//go:build !unix

package processor

// processAlive cannot tell on this system: a process is not known to be gone.
func processAlive(int) bool { return true }
