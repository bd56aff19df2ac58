package main

import "syscall"

// endWithTest has the kernel send a child SIGTERM when the test process that started it
// dies, even abruptly (a panic, a kill): pgtask stops as on Ctrl-C, and `pgtask dev`
// stops its cluster, instead of outliving the test.
func endWithTest() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
