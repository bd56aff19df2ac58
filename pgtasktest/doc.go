// Package pgtasktest helps the tests of a program that uses pgtask: a migrated, isolated
// PostgreSQL database per test, assertions on what was pushed, a way to run any handler
// on given tasks and inspect its decisions (with or without a database), and a
// processor and a logger tied to the test's life. It is the harness pgtask tests
// itself with: tests talk to a real PostgreSQL, never a mock.
//
// # Databases
//
// A test package calls Main from TestMain, then each test asks for its own database:
//
//	func TestMain(m *testing.M) { pgtasktest.Main(m) }
//
// (Main exits the process; a TestMain with a teardown of its own calls RunTests.)
//
//	func TestSignUp(t *testing.T) {
//		pool := pgtasktest.NewPool(t) // pgtask's schema, migrated; dropped when t ends
//		...
//	}
//
// Every database is cloned from a template migrated once (per schema, on the server), so
// a new one takes a few tens of milliseconds and tests run in parallel. Give a Template
// to add the program's own tables. The server is TEST_DATABASE_URL when it is set (a
// maintenance database whose user may create databases; tests fail when it is not
// usable, with no fallback); otherwise PostgreSQL on 127.0.0.1:5432 as user postgres
// without password (PGTASK_TEST_LOCAL_URL names another), else a throwaway cluster
// started from the PostgreSQL server binaries installed on the machine (and removed by
// Main). Without any, tests fail, never skip, saying how to get one.
//
// # Assertions
//
// RequirePushed, RequirePushedTx, RequireManyPushed and RequireNotPushed check the tasks a
// topic holds, through a pool or inside the transaction that pushed them, and fail the
// test with a message listing what the topic holds instead.
//
// # Handlers
//
// Run hands tasks to any handler (processor.TaskFunc, Typed, BatchFunc, Buffer, Composite
// or a Handler of your own) as one batch and returns its decisions and follow-ups,
// without a database; NewTasks makes the tasks. Work does the same inside a transaction:
// it pushes, leases, runs the handler and commits its decisions in the transaction, which
// the test then inspects and rolls back.
//
// # Processors
//
// Start runs a processor for the rest of a test and stops it gracefully at the end;
// processor.Processor.Wait waits for the tasks a test pushed to finish. Logger sends a
// processor's logs to the test's log.
package pgtasktest
