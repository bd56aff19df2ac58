// Package victim runs a processor that is killed mid-batch, for the crash tests: the
// test binary starts itself again as a child that processes tasks under the owner
// "victim", completes some, then hangs in a handler holding its batch's leases until the
// test kills it with SIGKILL. What the tests check is what happens to those leases.
package victim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/processor"
	"github.com/pgtask/pgtask/repository"
)

// Owner is the owner the victim's processor registers as; Output is what it completes
// tasks with (repository.Succeed(Output)).
const (
	Owner  = "victim"
	Output = "victim"
)

// env carries the Config to the child as JSON.
const env = "PGTASK_TEST_VICTIM"

// hanging is the line the child prints when it hangs.
const hanging = "victim hanging"

// Config is what the victim does.
type Config struct {
	URL   string // the database; the child connects with application_name=victim
	Topic string
	// HangAfter: the handler hangs at the task after this many.
	HangAfter int
	BatchSize int
	// PauseInterval of the manager (0: the processor's default).
	PauseInterval time.Duration
}

// Run is the body of the child's test function: it skips the test when the test binary
// runs as itself, and otherwise never returns (the victim is killed).
func Run(t *testing.T) {
	t.Helper()
	raw := os.Getenv(env)
	if raw == "" {
		t.Skip("the victim of a crash test; runs only as its child process")
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	poolCfg.ConnConfig.RuntimeParams["application_name"] = Owner
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := repository.New(repository.Config{Owner: Owner})
	if err != nil {
		t.Fatal(err)
	}
	p, err := processor.New(processor.Config{Pool: pool, Repository: repo, HeartbeatInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int64
	handler := processor.TaskFunc(func(ctx context.Context, task repository.Task) repository.Decision {
		if handled.Add(1) > int64(cfg.HangAfter) {
			fmt.Println(hanging)
			select {} // holds its batch's leases until SIGKILL
		}
		return repository.Succeed(Output)
	})
	if _, err := p.Manage(processor.ManagerConfig{Topic: cfg.Topic, Handler: handler, BatchSize: cfg.BatchSize,
		PauseInterval: cfg.PauseInterval}); err != nil {
		t.Fatal(err)
	}
	_ = p.Run(ctx)
	t.Fatal("the victim's processor stopped")
}

// Kill starts the test function test of this binary (which calls Run) as the victim,
// waits until it hangs holding leases, and kills it with SIGKILL.
func Kill(t *testing.T, test string, cfg Config) {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := Start(t, test, []string{env + "=" + string(raw)}, hanging)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// Start runs the test function test of this binary as a child process with extraEnv added
// to this one's, and returns once the child has printed a line containing line; the
// child is killed when t ends, if it has not been before. It fails t when the child ends
// first, or has not printed the line within a minute.
func Start(t *testing.T, test string, extraEnv []string, line string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	printed := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.Contains(s.Text(), line) {
				select {
				case printed <- true:
				default:
				}
			}
		}
		close(printed)
	}()
	select {
	case ok := <-printed:
		if !ok {
			t.Fatalf("%s ended before it printed %q", test, line)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s did not print %q within a minute", test, line)
	}
	return cmd
}
