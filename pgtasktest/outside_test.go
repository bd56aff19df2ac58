package pgtasktest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/internal/pgtest"
)

// TestAProgramOutsideTheModule builds and tests testdata/app, a module of its own that
// requires this one through a replace directive, as a program using pgtask does: it
// wires metrics, logging and the test kit through the public packages alone (the Go
// tool refuses pgtask's internal packages outside the module). Its tests use the server
// this test uses.
func TestAProgramOutsideTheModule(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to test testdata/app: %v", err)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "app"))
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"TEST_DATABASE_URL="+pgtest.AdminURL(t),
		// the module's own go.mod and go.sum, as committed; a module it needs that this
		// one's tests do not (prometheus/testutil's) may be missing from a new machine's
		// module cache: the go command fetches it as for any build, go.sum checking it
		"GOWORK=off", "GOFLAGS=-mod=readonly",
	)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in testdata/app: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	imports := strings.Fields(run("list", "-f", "{{join .Imports \" \"}} {{join .XTestImports \" \"}}", "."))
	for _, want := range []string{"github.com/pgtask/pgtask/metrics", "github.com/pgtask/pgtask/pgtasktest",
		"github.com/pgtask/pgtask/processor", "github.com/pgtask/pgtask/repository"} {
		if !slices.Contains(imports, want) {
			t.Errorf("testdata/app does not import %s (imports %v)", want, imports)
		}
	}
	for _, imp := range imports {
		if strings.Contains(imp, "/internal") {
			t.Errorf("testdata/app imports %s", imp)
		}
	}
	out := run("test", "-count=1", "-v", "./...")
	if !strings.Contains(out, "app: TestMain's teardown ran after the tests") {
		t.Errorf("testdata/app's TestMain did not go on after pgtasktest.RunTests:\n%s", out)
	}
	for _, test := range []string{"TestSignUpPushesAWelcome", "TestSendDecides", "TestWorkerSendsAndCounts"} {
		if !strings.Contains(out, "--- PASS: "+test) {
			t.Errorf("testdata/app's %s did not pass:\n%s", test, out)
		}
	}
}
