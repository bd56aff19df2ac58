package main

// TestReadme runs the examples of the repository's README.md, so that they stay true.
//
// Every fenced code block of language sh, sql or go in the README must be preceded (on
// the line before its opening fence) by an HTML comment saying what the test does
// with it; blocks of other languages (text, json, ...) need none:
//
//	<!-- test: sh -->      run with bash -euo pipefail
//	<!-- test: sql -->     run through pgx (one Exec; several statements are fine)
//	<!-- test: go -->      compile (and check gofmt)
//	<!-- test: gotest -->  compile as a test file and run it with go test (TEST_DATABASE_URL
//	                       set to the tests' server)
//	<!-- test: output -->  (before a text block) what the block before printed
//	<!-- test: dev -->     the quick start's `go run ./cmd/pgtask dev`
//	<!-- test: skip (why) -->  not run, with the reason
//
// sh and sql blocks run in README order against ONE fresh database, so a block may rely
// on what an earlier one did (a topic it added, a file it wrote). sh blocks run in one
// shared temporary directory with this environment:
//
//	PATH          prefixed with a directory holding freshly built pgtask and processor
//	DATABASE_URL  the test database
//	API, AUTH     base URL and "Authorization: Bearer …" header of a `pgtask serve`
//	              the test runs on a free port with a random token (PGTASK_TOKEN)
//	PGTASK_ADDR   127.0.0.1:0, so a processor's /metrics server never collides with
//	              another test's
//
// and need bash, curl and jq. Their standard output is checked against an output block
// that follows them: every non-blank line of the output block must match a line of the
// output, in order, after collapsing white space and treating every run of digits as
// equal (sequences, times and ports differ from run to run); "…" matches any text.
//
// A go block is compiled as its own package: a block without a package clause is a
// list of top-level declarations that gets "package main" (if it declares main) or
// "package readme" and the imports it uses (from a fixed list of the standard library,
// pgx, Prometheus and pgtask packages) added. The packages are compiled with go build
// -overlay, so nothing is written into the source tree. A gotest block is the only
// file, block_test.go, of its package, run with go test -overlay: a test file a reader
// can copy as it is.
//
// The dev block is not run as written (it runs until Ctrl-C, and a throwaway cluster is
// what TestDev covers): the test runs the built `pgtask dev --addr 127.0.0.1:0` with
// DATABASE_URL set to another fresh database, checks its banner against the output
// block that follows, and pushes a task to the demo topic through the REST API that the
// demo processor must finish. The Quick start section must hold exactly two commands:
// `go run ./cmd/pgtask dev` and `go test ./...`.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/internal/logbuf"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

// readmePath is the README, relative to this package's directory (go test's working
// directory).
const readmePath = "../../README.md"

// readmeBlock is one fenced code block of the README.
type readmeBlock struct {
	line    int    // line of the opening fence, 1-based
	section string // the "## " heading it is under
	lang    string // the fence's info string, e.g. "sh"
	kind    string // the test marker's kind ("sh", "sql", "go", "output", "dev", "skip"), "" if none
	note    string // the rest of the marker, e.g. skip's reason
	text    string
	want    *readmeBlock // the output block that follows it, if any
}

func (b *readmeBlock) String() string { return fmt.Sprintf("README.md:%d (%s block)", b.line, b.lang) }

var (
	readmeMarker = regexp.MustCompile(`^<!-- test: (\w+)(.*?)\s*-->$`)
	readmeKinds  = map[string][]string{ // marker kind → the fence languages it may precede
		"sh": {"sh", "bash"}, "sql": {"sql"}, "go": {"go"}, "gotest": {"go"}, "output": {"text"}, "dev": {"sh"}, "skip": nil,
	}
	readmeNeedMarker = map[string]bool{"sh": true, "bash": true, "shell": true, "sql": true, "go": true}
)

// parseReadme splits the README into its code blocks and checks the markers.
func parseReadme(t *testing.T) []*readmeBlock {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []*readmeBlock
		section string
		marker  []string // kind, note of a marker waiting for its block
		markAt  int
		cur     *readmeBlock
		indent  string
		body    []string
	)
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		n := i + 1
		if cur != nil {
			if strings.TrimSpace(line) == "```" {
				cur.text = strings.Join(body, "\n") + "\n"
				blocks = append(blocks, cur)
				cur = nil
				continue
			}
			body = append(body, strings.TrimPrefix(line, indent))
			continue
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			cur = &readmeBlock{line: n, section: section, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			body = nil
			if marker != nil {
				cur.kind, cur.note = marker[0], strings.TrimSpace(marker[1])
				marker = nil
			}
			continue
		case strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		}
		if marker != nil {
			t.Fatalf("README.md:%d: test marker not directly followed by a code block", markAt)
		}
		if m := readmeMarker.FindStringSubmatch(trimmed); m != nil {
			marker, markAt = m[1:], n
		} else if strings.HasPrefix(trimmed, "<!-- test") {
			t.Fatalf("README.md:%d: malformed test marker %q (want <!-- test: KIND -->)", n, trimmed)
		}
	}
	if cur != nil {
		t.Fatalf("%v: code block never closed", cur)
	}

	for i, b := range blocks {
		if b.kind == "" {
			if readmeNeedMarker[b.lang] {
				t.Errorf("%v has no test marker: add <!-- test: %s --> or <!-- test: skip (why) --> before it", b, b.lang)
			}
			continue
		}
		langs, ok := readmeKinds[b.kind]
		switch {
		case !ok:
			t.Errorf("%v: unknown test marker kind %q", b, b.kind)
		case b.kind == "skip" && strings.Trim(b.note, "() ") == "":
			t.Errorf("%v: <!-- test: skip --> needs a reason in parentheses", b)
		case langs != nil && !contains(langs, b.lang):
			t.Errorf("%v: a %q marker cannot precede a %q block", b, b.kind, b.lang)
		case b.kind == "output":
			if i == 0 || (blocks[i-1].kind != "sh" && blocks[i-1].kind != "dev") {
				t.Errorf("%v: an output block must follow a tested sh block", b)
			} else {
				blocks[i-1].want = b
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return blocks
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestReadme checks and runs the README's examples; see the top of this file.
func TestReadme(t *testing.T) {
	t.Parallel()
	blocks := parseReadme(t)
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's examples need %s, which is not on PATH (install it, e.g. apt-get install %s)", tool, tool)
		}
	}
	bin := readmeBuild(t)

	t.Run("QuickStart", func(t *testing.T) {
		t.Parallel()
		testReadmeQuickStart(t, blocks, bin)
	})
	t.Run("Go", func(t *testing.T) {
		t.Parallel()
		testReadmeGo(t, blocks)
	})
	t.Run("Examples", func(t *testing.T) {
		t.Parallel()
		testReadmeExamples(t, blocks, bin)
	})
}

// readmeBuild builds pgtask and processor into a new directory and returns it.
func readmeBuild(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build pgtask and processor: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", dir+string(filepath.Separator), ".", "../processor")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// testReadmeExamples runs the sh and sql blocks in order on one database.
func testReadmeExamples(t *testing.T, blocks []*readmeBlock, bin string) {
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Second)
	defer cancel()
	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	token := readmeRandom(t)
	api := readmeServe(t, bin, url, token)
	env := readmeEnv(map[string]string{
		"PATH":         bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DATABASE_URL": url,
		"API":          api,
		"AUTH":         "Authorization: Bearer " + token,
		"PGTASK_TOKEN": token,
		"PGTASK_ADDR":  "127.0.0.1:0",
	})
	dir := t.TempDir()

	ran := 0
	for _, b := range blocks {
		switch b.kind {
		case "sql":
			if _, err := conn.Exec(ctx, b.text); err != nil {
				t.Fatalf("%v failed: %v\n%s", b, err, b.text)
			}
		case "sh":
			stdout := readmeShell(ctx, t, b, dir, env)
			if b.want != nil {
				if err := matchOutput(stdout, b.want.text); err != nil {
					t.Fatalf("%v: output does not match %v: %v\noutput:\n%s", b, b.want, err, stdout)
				}
			}
		default:
			continue
		}
		ran++
	}
	if ran == 0 {
		t.Fatal("the README has no tested sh or sql block")
	}
}

// readmeShell runs an sh block and returns its standard output; it fails the test
// when the block fails.
func readmeShell(ctx context.Context, t *testing.T, b *readmeBlock, dir string, env []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.text)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, &stdout, &stderr
	// Its own process group, so that whatever the block started in the background is
	// ended with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // strays; ESRCH when none
	}
	if err != nil {
		t.Fatalf("%v failed: %v\n--- block:\n%s--- stdout:\n%s--- stderr:\n%s", b, err, b.text, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// readmeEnv is this process's environment without the variables the examples read,
// plus set.
func readmeEnv(set map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; ok || strings.HasPrefix(name, "PGTASK_") {
			continue
		}
		env = append(env, kv)
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		env = append(env, name+"="+set[name])
	}
	return env
}

func readmeRandom(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// readmeStart starts the built pgtask with args and env, waits until a line of its
// standard output matches ready, and returns the submatches and a function returning
// every line read so far. Cleanup stops it with SIGINT (SIGKILL after 30 s) and fails
// the test unless it exited 0; on Linux it gets SIGTERM if the test process dies first.
func readmeStart(t *testing.T, bin string, env []string, ready *regexp.Regexp, args ...string) ([]string, func() string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "pgtask"), args...)
	cmd.Env = env
	cmd.SysProcAttr = endWithTest()
	var stderr logbuf.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		lines   logbuf.Buffer
		matched = make(chan []string, 1)
		drained = make(chan struct{})
	)
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = lines.Write([]byte(sc.Text() + "\n"))
			if m := ready.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case matched <- m:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var waitErr error
	exited := make(chan struct{}) // closed when the process was waited for
	go func() {
		<-drained
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("pgtask %s did not stop within 30s of SIGINT", args[0])
		}
		if waitErr != nil {
			t.Errorf("pgtask %s exited with %v\nstdout:\n%s\nstderr:\n%s", args[0], waitErr, lines.String(), stderr.String())
		}
	})
	select {
	case m := <-matched:
		return m, lines.String
	case <-exited:
		t.Fatalf("pgtask %s exited early: %v\nstdout:\n%s\nstderr:\n%s", args[0], waitErr, lines.String(), stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("pgtask %s not ready within 30s\nstdout:\n%s\nstderr:\n%s", args[0], lines.String(), stderr.String())
	}
	return nil, nil
}

// readmeServe starts `pgtask serve` on a free port and returns its base URL.
func readmeServe(t *testing.T, bin, url, token string) string {
	t.Helper()
	env := readmeEnv(map[string]string{"DATABASE_URL": url, "PGTASK_TOKEN": token})
	m, _ := readmeStart(t, bin, env, regexp.MustCompile(`listening on (http://\S+)`), "serve", "--addr", "127.0.0.1:0")
	return m[1]
}

// testReadmeQuickStart checks the Quick start's two commands and runs pgtask dev.
func testReadmeQuickStart(t *testing.T, blocks []*readmeBlock, bin string) {
	var commands []string
	var dev *readmeBlock
	for _, b := range blocks {
		if b.section != "Quick start" || b.lang != "sh" {
			continue
		}
		commands = append(commands, strings.TrimSpace(b.text))
		if b.kind == "dev" {
			dev = b
		}
	}
	if want := []string{"go run ./cmd/pgtask dev", "go test ./..."}; strings.Join(commands, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the Quick start's commands are %q, want exactly %q", commands, want)
	}
	if dev == nil || dev.want == nil {
		t.Fatal("the Quick start's `go run ./cmd/pgtask dev` needs a <!-- test: dev --> marker and an output block")
	}

	url := pgtest.NewDatabase(t, schema.Hash(), repository.Migrate)
	env := readmeEnv(map[string]string{"DATABASE_URL": url})
	args := append(strings.Fields(strings.TrimPrefix(strings.TrimSpace(dev.text), "go run ./cmd/pgtask")), "--addr", "127.0.0.1:0")
	_, output := readmeStart(t, bin, env, regexp.MustCompile(`^pgtask dev ready$`), args...)
	if err := matchOutput(output(), dev.want.text); err != nil {
		t.Fatalf("pgtask dev's output does not match %v: %v\noutput:\n%s", dev.want, err, output())
	}

	base := regexp.MustCompile(`REST API\s+(http://\S+)`).FindStringSubmatch(output())
	if base == nil {
		t.Fatalf("pgtask dev printed no REST API address:\n%s", output())
	}
	resp, err := readmeHTTP.Post(base[1]+"/topics/demo/tasks", "application/json", strings.NewReader(`{"identifier": "hello", "input": "world"}`))
	if err != nil {
		t.Fatal(err)
	}
	var pushed struct {
		Tasks []struct{ Sequence int64 } `json:"tasks"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pushed)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || len(pushed.Tasks) != 1 {
		t.Fatalf("push to demo: status %d, %+v, %v", resp.StatusCode, pushed, err)
	}
	taskURL := base[1] + "/topics/demo/tasks/" + strconv.FormatInt(pushed.Tasks[0].Sequence, 10)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var task struct{ State string }
		resp, err := readmeHTTP.Get(taskURL)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&task)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET %s: %v", taskURL, err)
		}
		if task.State == "SUCCEEDED" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo processor did not finish the task within 30s: it is %s", task.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readmeHTTP is the client of the quick start's requests.
var readmeHTTP = &http.Client{Timeout: 10 * time.Second}

// readmeImports are the packages a go block may use without importing them, by name.
var readmeImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "log": "log", "os": "os",
	"signal": "os/signal", "syscall": "syscall", "time": "time", "strconv": "strconv",
	"strings": "strings", "json": "encoding/json", "http": "net/http", "slog": "log/slog",
	"pgx": "github.com/jackc/pgx/v5", "pgxpool": "github.com/jackc/pgx/v5/pgxpool",
	"repository": "github.com/pgtask/pgtask/repository", "processor": "github.com/pgtask/pgtask/processor",
	"metrics": "github.com/pgtask/pgtask/metrics", "pgtasktest": "github.com/pgtask/pgtask/pgtasktest",
	"testing": "testing", "prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp": "github.com/prometheus/client_golang/prometheus/promhttp",
}

// testReadmeGo compiles every go block as its own package.
func testReadmeGo(t *testing.T, blocks []*readmeBlock) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	var pkgs, testPkgs []string
	origin := map[string]*readmeBlock{} // generated file → its block
	header := map[*readmeBlock]int{}    // lines added before the block's text
	for i, b := range blocks {
		if b.kind != "go" && b.kind != "gotest" {
			continue
		}
		src, err := readmeGoSource(b.text)
		header[b] = strings.Count(src, "\n") - strings.Count(b.text, "\n")
		if err != nil {
			t.Errorf("%v: %v", b, err)
			continue
		}
		file := filepath.Join(tmp, fmt.Sprintf("block%d.go", i))
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		// A package directory that exists only in the overlay.
		pkg := fmt.Sprintf("internal/readmecheck/block%d", i)
		origin[file] = b
		if b.kind == "gotest" {
			overlay[filepath.Join(root, pkg, "block_test.go")] = file
			testPkgs = append(testPkgs, "./"+pkg)
			continue
		}
		overlay[filepath.Join(root, pkg, "block.go")] = file
		pkgs = append(pkgs, "./"+pkg)
	}
	if len(pkgs) == 0 {
		t.Fatal("the README has no tested go block")
	}
	if t.Failed() {
		return
	}
	// With several packages, go build compiles them all and writes nothing (with -o
	// it would skip the non-main ones); an empty package makes sure there are several.
	empty := filepath.Join(tmp, "empty.go")
	if err := os.WriteFile(empty, []byte("package empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay[filepath.Join(root, "internal/readmecheck/empty/empty.go")] = empty
	pkgs = append(pkgs, "./internal/readmecheck/empty")
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	report := func(what string, msg []byte, err error) {
		t.Helper()
		// Point the compiler's file:line:column at the README's lines.
		out := readmeGoPos.ReplaceAllStringFunc(string(msg), func(pos string) string {
			m := readmeGoPos.FindStringSubmatch(pos)
			b := origin[m[1]]
			line, _ := strconv.Atoi(m[2])
			if b == nil || line <= header[b] {
				return pos
			}
			return fmt.Sprintf("README.md:%d:%s", b.line+line-header[b], m[3])
		})
		t.Fatalf("the README's Go %s: %v\n%s", what, err, out)
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"build", "-overlay", ovFile}, pkgs...)...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		report("examples do not compile", msg, err)
	}
	if len(testPkgs) == 0 {
		return
	}
	// Compiled with go test -c and run here: the package directory exists only in the
	// overlay, and a test binary runs in its package's directory under go test.
	for _, pkg := range testPkgs {
		bin := filepath.Join(tmp, filepath.Base(pkg)+".test")
		cmd := exec.CommandContext(t.Context(), "go", "test", "-c", "-vet=off", "-overlay", ovFile, "-o", bin, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			report("test files do not compile", msg, err)
		}
		cmd = exec.CommandContext(t.Context(), bin, "-test.count=1")
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "TEST_DATABASE_URL="+pgtest.AdminURL(t))
		if msg, err := cmd.CombinedOutput(); err != nil {
			report("test files fail", msg, err)
		}
	}
}

// readmeGoPos matches a position in a compiler message.
var readmeGoPos = regexp.MustCompile(`(\S+\.go):(\d+):(\d+)`)

// readmeGoSource turns a go block into a Go file: as it is if it has a package clause,
// else with a package clause and the imports it uses. It also checks that the block is
// gofmt-formatted.
func readmeGoSource(block string) (string, error) {
	if strings.HasPrefix(strings.TrimSpace(block), "package ") {
		formatted, err := format.Source([]byte(block))
		if err != nil {
			return "", err
		}
		if string(formatted) != block {
			return "", errors.New("not gofmt-formatted")
		}
		return block, nil
	}
	head := "package readme\n\n"
	f, err := parser.ParseFile(token.NewFileSet(), "block.go", head+block, parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	if formatted, err := format.Source([]byte(head + block)); err != nil || string(formatted) != head+block {
		return "", fmt.Errorf("not gofmt-formatted (%v)", err)
	}
	used := map[string]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
			head = "package main\n\n"
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && readmeImports[id.Name] != "" {
				used[readmeImports[id.Name]] = true
			}
		}
		return true
	})
	paths := make([]string, 0, len(used))
	for p := range used {
		paths = append(paths, strconv.Quote(p))
	}
	sort.Strings(paths)
	src := head
	if len(paths) > 0 {
		src += "import (\n\t" + strings.Join(paths, "\n\t") + "\n)\n\n"
	}
	return src + block, nil
}

var readmeDigits = regexp.MustCompile(`[0-9]+`)

// readmeNormalize collapses white space and makes every run of digits "0".
func readmeNormalize(line string) string {
	return readmeDigits.ReplaceAllString(strings.Join(strings.Fields(line), " "), "0")
}

// matchOutput reports whether every non-blank line of want matches a line of got, in
// order (see the top of this file).
func matchOutput(got, want string) error {
	var gotLines []string
	for _, l := range strings.Split(got, "\n") {
		gotLines = append(gotLines, readmeNormalize(l))
	}
	i := 0
	for _, w := range strings.Split(want, "\n") {
		w = readmeNormalize(w)
		if w == "" {
			continue
		}
		parts := strings.Split(w, "…")
		for j, p := range parts {
			parts[j] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		for i < len(gotLines) && !re.MatchString(gotLines[i]) {
			i++
		}
		if i == len(gotLines) {
			return fmt.Errorf("no line (after the previous match) matches %q", w)
		}
		i++
	}
	return nil
}
