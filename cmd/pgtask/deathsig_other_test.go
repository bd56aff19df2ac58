//go:build !linux

package main

import "syscall"

// endWithTest: only Linux can tie a child's life to its parent's; elsewhere a child of
// a test process that dies abruptly outlives it.
func endWithTest() *syscall.SysProcAttr { return nil }
