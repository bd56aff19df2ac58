// Package bench is the engine of "pgtask bench": it measures pgtask against a database.
//
// [Run] registers the run's topics, starts the processors, runs one [Mode] (burn-down,
// sustained load or latency), prints progress lines and a summary (with Config.JSON, one
// JSON object as the last line) and destroys its topics, also when interrupted.
//
// The processors run in this process or, with Config.Processes, in child processes. A
// child is this same engine on the other side of a pipe: the parent starts each one with
// the command Config.ChildCommand returns, and the child's main calls [RunChild], which
// runs processors on one topic, reports what they did as JSON lines on its standard
// output and stops when its standard input closes.
//
// The package knows nothing of command lines: cmd/pgtask turns its flags into a
// [Config], checks them, and supplies how pools are opened ([Connect]) and how a child
// is started. The files follow the engine's jobs: config.go (what a run is), run.go (a
// run from its topics to its summary), modes.go (a run in progress: the three modes,
// pushing and waiting), pace.go (a paced pusher's next step), processors.go (processors
// in this process), children.go (child processes, both sides of the pipe) and stats.go
// (what the processors did).
package bench
