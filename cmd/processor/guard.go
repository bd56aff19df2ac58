package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// A program run by --exec must not outlive its processor, however the processor dies:
// after a kill -9 the task's lease expires and another processor runs the task again.
// So every program runs in a process group led by a guard, a small process whose
// standard input is the read end of the processor's lifeline: a pipe whose write end
// only the processor holds and never writes to. When the processor dies, by SIGKILL
// too, the kernel closes the write end, each guard reads end of file and kills its
// whole group: the program, whatever it started, and itself.
//
// A pipe, rather than a parent-death signal (Linux's Pdeathsig), because its end of
// file comes with the death of the process, not of the OS thread that started the
// child, works on every Unix, and reaches the program's children too. The guard leads
// the group and the program joins it, rather than the guard starting the program, so
// that the program stays the processor's child: its exit status, its standard streams
// and a failure to start it reach the processor as before, and the guard starts up
// beside the program instead of before it. There is no window at a fork either: a child
// of the processor holds a copy of the write end until it execs (close-on-exec), and by
// then it has joined its guard's group, so end of file comes only once every program
// the processor started is in a group whose guard will kill it.
//
// The guard is a one-line /bin/sh script (about 1 ms of CPU), or where there is no
// /bin/sh (a distroless image) the processor's own binary run as guardName (about 6 ms:
// all its packages initialize before main can tell it is a guard).

// guardName is the argv[0] under which the processor's binary runs as a guard, and the
// $0 of the shell guard, so that both are recognizable in ps.
const guardName = "pgtask-exec-guard"

// guardScript is the shell guard: SIGKILL its group once standard input ends. `read`
// returns at end of file (or on an error: then too the group dies). The signals that
// reach a whole process group, such as systemd's SIGTERM to every process of a unit,
// are ignored: only its task's end or its processor's ends a guard.
const guardScript = `trap '' HUP INT QUIT TERM; read line; kill -s KILL 0`

// lifeline starts the guards of one processor.
type lifeline struct {
	// path and args start a guard (args[0] is its argv[0]).
	path string
	args []string
	// read is every guard's standard input. write is never written to, and no child
	// keeps it past its exec (close-on-exec): it closes when this process dies.
	read, write *os.File
}

func newLifeline() (*lifeline, error) {
	l := &lifeline{path: "/bin/sh", args: []string{"sh", "-c", guardScript, guardName}}
	if _, err := exec.LookPath(l.path); err != nil {
		path, args, err := selfGuard()
		if err != nil {
			return nil, err
		}
		l.path, l.args = path, args
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("lifeline pipe: %w", err)
	}
	l.read, l.write = r, w
	return l, nil
}

// selfGuard is how the processor's own binary is started as a guard.
func selfGuard() (string, []string, error) {
	// /proc/self/exe names the running binary even after it was replaced or deleted on
	// disk (a deployment); os.Executable is the way elsewhere.
	path := "/proc/self/exe"
	if _, err := os.Stat(path); err != nil {
		if path, err = os.Executable(); err != nil {
			return "", nil, fmt.Errorf("find the processor's executable for the guards: %w", err)
		}
	}
	return path, []string{guardName}, nil
}

// guard starts a guard in a new process group, whose ID is the guard's PID. The caller
// kills the group (-PID) when the task is over, and waits for the guard.
func (l *lifeline) guard() (*exec.Cmd, error) {
	cmd := &exec.Cmd{
		Path:        l.path,
		Args:        l.args,
		Env:         []string{}, // none: neither the shell nor the Go runtime needs any
		Stdin:       l.read,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start guard: %w", err)
	}
	return cmd, nil
}

// isGuard reports whether this process was started as a guard.
func isGuard(args []string) bool { return len(args) == 1 && args[0] == guardName }

// runGuard is the whole life of the processor's binary as a guard: guardScript in Go.
func runGuard() {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM)
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = syscall.Kill(0, syscall.SIGKILL)
	os.Exit(1) // not reached: the signal killed this process too
}
