// Package pgcluster starts and stops throwaway PostgreSQL clusters.
//
// A cluster is created with initdb in a fresh directory and started with
// pg_ctl. It listens only on a unix socket inside its own directory (no TCP
// port), so any number of clusters can run side by side without port
// clashes. The settings favour speed over durability (fsync=off and
// friends): a cluster is meant for tests and local development, never for
// data that matters.
//
// PostgreSQL refuses to run as root. When the current process runs as root,
// initdb, pg_ctl and the server run as the unprivileged user "postgres"
// (created by Debian's postgresql packages) or, failing that, "nobody".
//
// Lifetime: pg_ctl detaches the server from the calling process, so the
// server keeps running if the process that started it dies without calling
// [Cluster.Stop] (for example on SIGKILL or a test timeout panic). To bound
// the damage, every non-kept cluster records the PID of its owner, and
// [Start] stops and removes clusters in the same parent directory whose
// owner is no longer alive.
package pgcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Superuser is the name of the superuser created by initdb in every cluster.
const Superuser = "postgres"

// DefaultPort is the port number used when Options.Port is zero. The cluster
// does not listen on TCP; the port only names the unix socket file
// (.s.PGSQL.<port>).
const DefaultPort = 5432

const (
	dirPrefix     = "pgcluster-"
	ownerFile     = "pgcluster.owner"
	dataSubdir    = "data"
	logFile       = "postgres.log"
	maxSocketPath = 107 // sizeof(sockaddr_un.sun_path) - 1 on Linux
)

// Options configures [Start]. The zero value is ready to use.
type Options struct {
	// Dir is the parent directory in which the cluster directory is
	// created. Empty means os.TempDir(). It is created if missing.
	Dir string
	// Keep leaves the cluster directory in place on Stop, and exempts it
	// from the automatic removal of clusters whose owner has died.
	Keep bool
	// Logger receives progress messages. Nil discards them.
	Logger *slog.Logger
	// Port names the unix socket (.s.PGSQL.<port>); no TCP port is opened.
	// Zero means DefaultPort.
	Port int
	// BinDir is the directory holding initdb, pg_ctl and postgres. Empty
	// means [FindBinaries].
	BinDir string
	// Conf is appended to postgresql.conf after pgcluster's own settings (so it
	// overrides them), one setting per line, as PostgreSQL reads it:
	// "shared_preload_libraries = 'citus'".
	Conf []string
}

// Cluster is a running PostgreSQL cluster started by [Start]. Its methods are
// safe for concurrent use.
type Cluster struct {
	dir     string // cluster directory; also the unix socket directory
	dataDir string
	binDir  string
	port    int
	keep    bool
	log     *slog.Logger
	cred    *syscall.Credential // nil unless running as root
	conf    []string            // Options.Conf

	stopOnce sync.Once
	stopErr  error
}

// FindBinaries returns a directory holding the PostgreSQL server programs
// initdb and pg_ctl (and postgres). It looks on PATH first, then in
// /usr/lib/postgresql/*/bin (Debian and Ubuntu layout), preferring the
// highest version.
func FindBinaries() (dir string, err error) {
	var searched []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		d := filepath.Dir(p)
		if hasServerBinaries(d) {
			return d, nil
		}
		searched = append(searched, d+" (found initdb on PATH but not pg_ctl and postgres next to it)")
	} else {
		searched = append(searched, "PATH ("+os.Getenv("PATH")+")")
	}

	const pattern = "/usr/lib/postgresql/*/bin"
	matches, _ := filepath.Glob(pattern)
	slices.SortFunc(matches, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a))) // descending
	})
	for _, d := range matches {
		if hasServerBinaries(d) {
			return d, nil
		}
	}
	searched = append(searched, pattern)
	return "", fmt.Errorf("pgcluster: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; searched %s; "+
		"install the PostgreSQL server (e.g. `apt-get install postgresql`) or put its bin directory on PATH",
		strings.Join(searched, " and "))
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// compareVersions compares dotted version strings numerically ("9.6" < "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

// Start creates a new cluster directory under opts.Dir, runs initdb and
// starts the server, waiting until it accepts connections. On failure
// everything created so far is stopped and removed (unless opts.Keep). If
// ctx expires, the programs being run are killed and Start returns an error.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	port := opts.Port
	if port == 0 {
		port = DefaultPort
	}
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinaries(); err != nil {
			return nil, err
		}
	}

	parent := opts.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	parent, err := filepath.Abs(parent)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("pgcluster: create parent directory: %w", err)
	}

	reapStale(parent, log)

	c := &Cluster{binDir: binDir, port: port, keep: opts.Keep, log: log, conf: opts.Conf}

	var runAs *user.User
	if os.Geteuid() == 0 {
		runAs, c.cred, err = unprivilegedUser()
		if err != nil {
			return nil, err
		}
	}

	dir, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: create cluster directory: %w", err)
	}
	c.dir = dir
	c.dataDir = filepath.Join(dir, dataSubdir)

	if err := c.start(ctx, runAs); err != nil {
		// Clean up with a fresh context: ctx may be what failed.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := c.Stop(cctx); serr != nil {
			log.Warn("pgcluster: cleanup after failed start", "dir", dir, "err", serr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context, runAs *user.User) error {
	sock := filepath.Join(c.dir, ".s.PGSQL."+strconv.Itoa(c.port))
	if len(sock) > maxSocketPath {
		return fmt.Errorf("pgcluster: unix socket path %s is longer than %d bytes; use a shorter Options.Dir", sock, maxSocketPath)
	}
	if !c.keep {
		if err := os.WriteFile(filepath.Join(c.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: chown %s to %s: %w", c.dir, runAs.Username, err)
		}
		if err := ensureSearchable(filepath.Dir(c.dir), c.cred, runAs.Username); err != nil {
			return err
		}
	}

	c.log.Info("pgcluster: initdb", "dir", c.dir, "bin", c.binDir)
	if _, err := c.run(ctx, "initdb",
		"-D", c.dataDir, "-A", "trust", "-U", Superuser, "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		return err
	}

	conf := fmt.Sprintf(`
# Added by pgcluster: throwaway cluster for tests; durability is off.
listen_addresses = ''
unix_socket_directories = '%s'
port = %d
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 300
shared_buffers = 128MB
`, strings.ReplaceAll(c.dir, "'", "''"), c.port)
	for _, line := range c.conf {
		conf += line + "\n"
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: write postgresql.conf: %w", err)
	}

	c.log.Info("pgcluster: starting server", "dir", c.dir)
	if _, err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "120", "-s",
		"-D", c.dataDir, "-l", filepath.Join(c.dir, logFile)); err != nil {
		return fmt.Errorf("%w\n%s", err, c.logTail())
	}
	c.log.Info("pgcluster: server running", "dir", c.dir)
	return nil
}

// unprivilegedUser returns the account to run PostgreSQL as when the
// current process is root.
func unprivilegedUser() (*user.User, *syscall.Credential, error) {
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			errs = append(errs, fmt.Errorf("user %s: non-numeric uid/gid %s/%s", name, u.Uid, u.Gid))
			continue
		}
		return u, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, nil, fmt.Errorf("pgcluster: running as root, but PostgreSQL refuses to run as root and no unprivileged user to run it as was found: %w; "+
		"create a \"postgres\" user (installing the postgresql package does) or run as a non-root user", errors.Join(errs...))
}

// ensureSearchable makes sure the user described by cred can traverse every
// directory from / down to dir. Directories lacking the permission get o+x
// added when they lie below os.TempDir(); anywhere else that is an error.
func ensureSearchable(dir string, cred *syscall.Credential, username string) error {
	tmp, _ := filepath.Abs(os.TempDir())
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		if !searchable(fi, cred) {
			if tmp == "" || !strings.HasPrefix(d, tmp+string(filepath.Separator)) {
				return fmt.Errorf("pgcluster: directory %s is not searchable by user %s, which runs PostgreSQL; "+
					"choose another Options.Dir or run chmod o+x %s", d, username, d)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("pgcluster: make %s searchable for user %s: %w", d, username, err)
			}
		}
		if p := filepath.Dir(d); p == d {
			return nil
		}
	}
}

func searchable(fi fs.FileInfo, cred *syscall.Credential) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&0o001 != 0
	}
	switch {
	case st.Uid == cred.Uid:
		return perm&0o100 != 0
	case st.Gid == cred.Gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// run runs one of the PostgreSQL programs and returns its combined output.
func (c *Cluster) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, prog), args...)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.WaitDelay = 5 * time.Second
	// Own process group, so that cancellation also kills helpers such as
	// the "postgres --boot" run by initdb. (The server started by pg_ctl
	// puts itself in its own session and is not affected.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%w)", ctxErr, err)
		}
		return out.Bytes(), fmt.Errorf("pgcluster: %s %s: %w\n%s", prog, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return out.Bytes(), nil
}

// childEnv is the environment of the PostgreSQL programs: ours without PG*
// variables (PGPORT, PGDATA, ... would change their behaviour) and with a
// fixed C locale.
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG")
	})
	return append(env, "LC_ALL=C")
}

// logTail returns the last lines of the server log, for error messages.
func (c *Cluster) logTail() string {
	b, err := os.ReadFile(filepath.Join(c.dir, logFile))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "server log (" + filepath.Join(c.dir, logFile) + "):\n" + strings.Join(lines, "\n")
}

// Dir returns the cluster directory. It holds the data directory ("data"),
// the server log ("postgres.log") and the unix socket.
func (c *Cluster) Dir() string { return c.dir }

// SocketDir returns the directory of the server's unix socket (the "host" to
// connect to).
func (c *Cluster) SocketDir() string { return c.dir }

// Port returns the port number naming the unix socket.
func (c *Cluster) Port() int { return c.port }

// ConnString returns a connection URL for database dbname as the superuser
// [Superuser], e.g.
// postgres://postgres@/dbname?host=%2Ftmp%2Fpgcluster-123&port=5432&sslmode=disable.
// It is understood by pgx and libpq (psql).
func (c *Cluster) ConnString(dbname string) string {
	q := url.Values{}
	q.Set("host", c.dir)
	q.Set("port", strconv.Itoa(c.port))
	q.Set("sslmode", "disable")
	u := url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + dbname, RawQuery: q.Encode()}
	return u.String()
}

// Stop stops the server and, unless Options.Keep was set, removes the
// cluster directory. A kept cluster is shut down cleanly (pg_ctl -m fast),
// a throwaway one with -m immediate. If pg_ctl fails (or ctx expires), the
// server is sent SIGQUIT directly. Stop is idempotent: later calls return the
// result of the first.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { c.stopErr = c.stop(ctx) })
	return c.stopErr
}

func (c *Cluster) stop(ctx context.Context) error {
	var errs []error
	if _, ok := postmasterPID(c.dataDir); ok {
		mode := "immediate"
		if c.keep {
			mode = "fast"
		}
		c.log.Info("pgcluster: stopping server", "dir", c.dir, "mode", mode)
		if _, err := c.run(ctx, "pg_ctl", "stop", "-w", "-t", "60", "-s", "-D", c.dataDir, "-m", mode); err != nil {
			c.log.Warn("pgcluster: pg_ctl stop failed; sending SIGQUIT", "dir", c.dir, "err", err)
			// Last resort; SIGQUIT is PostgreSQL's immediate shutdown.
			if pid, ok := postmasterPID(c.dataDir); ok {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
				if !waitGone(pid, 10*time.Second) {
					errs = append(errs, fmt.Errorf("pgcluster: server (pid %d) still running: %w", pid, err))
				}
			}
		}
	}
	if !c.keep {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("pgcluster: remove %s: %w", c.dir, err))
		}
	}
	return errors.Join(errs...)
}

// postmasterPID reads the server PID from dataDir/postmaster.pid and reports
// whether that process is running and really is the server of dataDir (its
// working directory is dataDir; without /proc, that it runs postgres), so that a stale
// PID file never leads to signalling an unrelated process.
func postmasterPID(dataDir string) (int, bool) {
	f, err := os.Open(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s.Text()))
	if err != nil || pid <= 0 {
		return 0, false
	}
	cwd, err := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "cwd"))
	if err != nil {
		if _, perr := os.Stat(filepath.Join(procRoot, "self")); perr != nil {
			// no /proc here (macOS, the BSDs): a live process of that PID whose
			// command is postgres (ps); without this the server was never stopped,
			// its directory removed under it. Not the PID alone: a stale file's PID
			// may be another process's by now.
			return pid, alive(pid) && isPostgres(pid)
		}
		return pid, false
	}
	want, err := filepath.EvalSymlinks(dataDir)
	if err != nil {
		want = dataDir
	}
	return pid, cwd == want
}

// isPostgres reports whether process pid runs postgres, by its command's name (ps).
func isPostgres(pid int) bool {
	out, err := exec.Command("ps", "-p", strconv.Itoa(pid), "-o", "comm=").Output()
	name := filepath.Base(strings.TrimSpace(string(out)))
	return err == nil && (name == "postgres" || name == "postmaster")
}

// procRoot is where the processes' working directories are read (a test points it
// elsewhere to be a system without /proc).
var procRoot = "/proc"

// alive reports whether process pid exists.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// waitGone waits up to d for process pid to exit, reporting whether it did.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// reapStale stops and removes clusters in parent whose owning process has
// died without stopping them. Kept clusters have no owner file and are never
// touched. Errors are logged and otherwise ignored.
func reapStale(parent string, log *slog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(parent, dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner <= 0 || alive(owner) {
			continue
		}
		log.Info("pgcluster: removing cluster left behind by dead process", "dir", dir, "pid", owner)
		if pid, ok := postmasterPID(filepath.Join(dir, dataSubdir)); ok {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
			waitGone(pid, 10*time.Second)
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("pgcluster: remove stale cluster", "dir", dir, "err", err)
		}
	}
}

// Restart stops the server at once, as a crash would (pg_ctl -m immediate), and starts
// it again on the same data directory and socket; its clients lose their connections
// and what they had not committed.
func (c *Cluster) Restart(ctx context.Context) error {
	if _, err := c.run(ctx, "pg_ctl", "restart", "-w", "-t", "120", "-s", "-m", "immediate",
		"-D", c.dataDir, "-l", filepath.Join(c.dir, logFile)); err != nil {
		return fmt.Errorf("%w\n%s", err, c.logTail())
	}
	return nil
}
