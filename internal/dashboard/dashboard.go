package dashboard

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/repository"
)

// Defaults of Config.
const (
	// OwnerTimeoutDefault is Config.OwnerTimeout's default: an owner whose heartbeat is
	// older is shown dead (the processor's default expiry timeout).
	OwnerTimeoutDefault = 5 * time.Second
	// RefreshDefault is Config.Refresh's default: how often pages refresh their live parts.
	RefreshDefault = 3 * time.Second
	// PurgeForDefault is Config.PurgeFor's default, under the server's read timeout
	// (httpguard.ReadTimeoutDefault), which cancels a request still running.
	PurgeForDefault = 20 * time.Second
	// BulkForDefault is Config.BulkFor's default.
	BulkForDefault = 5 * time.Second
)

// Prefix is the path under which the dashboard serves everything but its overview,
// which is at "/". Its scripts reach the REST API under Prefix+"api/".
const Prefix = "/ui/"

// sessionCookie is the name of the cookie the login sets.
const sessionCookie = "pgtask_session"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the dashboard.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Repository reads and changes the queue; nil creates one with a random owner name.
	Repository *repository.Repository
	// API is the REST API handler (package rest). Required: New's handler serves it at
	// every path the dashboard does not take ("/" and Prefix), and, for the dashboard's
	// own scripts, under Prefix+"api/" with the login's session standing for the token.
	API http.Handler
	// Guard is the server's guard (its Protect wraps the whole handler); nil serves
	// without a token.
	Guard *httpguard.Guard
	// Token is the guard's bearer token ("" for none). With a token every page and action
	// needs the session cookie that the login form sets when given the token (or the
	// bearer token itself, for programs).
	Token string
	// OwnerTimeout is how old an owner's last heartbeat may be for it to count as alive.
	OwnerTimeout time.Duration
	// Refresh is how often pages refresh their live parts (counts, states, the chart).
	Refresh time.Duration
	// PurgeFor is how long one purge action deletes (in batches, each committed) before it
	// answers with what it deleted so far and asks for another to go on.
	PurgeFor time.Duration
	// BulkFor is how long one bulk cancel, reassign or recreate changes tasks (in
	// statements of 1 000, each committed) before it answers with what it changed and
	// asks for another to go on: it starts no statement after that time. A statement
	// still running when PurgeFor has passed since the action began is cancelled (and
	// undone). At most PurgeFor.
	BulkFor time.Duration
	// Logger receives the errors answered with status 500; nil discards them.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.Pool == nil {
		return errors.New("dashboard: config: Pool is required")
	}
	if c.API == nil {
		return errors.New("dashboard: config: API is required")
	}
	if c.OwnerTimeout < 0 || c.Refresh < 0 || c.PurgeFor < 0 || c.BulkFor < 0 {
		return errors.New("dashboard: config: OwnerTimeout, Refresh, PurgeFor and BulkFor must not be negative")
	}
	if c.PurgeFor == 0 {
		c.PurgeFor = PurgeForDefault
	}
	if c.BulkFor == 0 {
		c.BulkFor = BulkForDefault
	}
	c.BulkFor = min(c.BulkFor, c.PurgeFor)
	if c.OwnerTimeout == 0 {
		c.OwnerTimeout = OwnerTimeoutDefault
	}
	if c.Refresh == 0 {
		c.Refresh = RefreshDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := httpguard.CheckToken(c.Token); err != nil {
		return fmt.Errorf("dashboard: config: %w", err)
	}
	if c.Guard == nil {
		g, err := httpguard.New(httpguard.Config{Token: c.Token})
		if err != nil {
			return fmt.Errorf("dashboard: config: %w", err)
		}
		c.Guard = g
	}
	if c.Guard.HasToken() != (c.Token != "") {
		return errors.New("dashboard: config: Token must be the Guard's token")
	}
	if c.Repository == nil {
		repo, err := repository.New(repository.Config{})
		if err != nil {
			return fmt.Errorf("dashboard: config: %w", err)
		}
		c.Repository = repo
	}
	return nil
}

// server serves the dashboard.
type server struct {
	cfg      Config
	pool     *pgxpool.Pool
	repo     *repository.Repository
	pages    *pages
	mux      *http.ServeMux
	sessions *sessions // the logins, when a token is configured (nil without)
	chart    chartCache
}

// New validates cfg and returns the handler of the whole server: the dashboard at "/"
// and under Prefix, the REST API (Config.API) everywhere else.
func New(cfg Config) (http.Handler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, pool: cfg.Pool, repo: cfg.Repository, pages: p, mux: http.NewServeMux()}
	if cfg.Token != "" {
		s.sessions = newSessions(cfg.Token)
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	s.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", staticHandler(http.FileServerFS(static))))
	s.mux.HandleFunc("GET "+Prefix+"login", s.loginForm)
	s.mux.HandleFunc("POST "+Prefix+"login", s.login)
	s.mux.HandleFunc("POST "+Prefix+"logout", s.logout)
	s.mux.Handle(Prefix+"api/", s.apiProxy())
	s.mux.Handle("GET /{$}", s.page(s.overview))
	s.mux.Handle("GET "+Prefix+"{$}", http.RedirectHandler("/", http.StatusSeeOther))
	s.mux.Handle("GET "+Prefix+"topics/{topic}", s.page(s.topic))
	s.mux.Handle("GET "+Prefix+"topics/{topic}/tasks/{sequence}", s.page(s.task))
	s.mux.Handle("GET "+Prefix+"processes", s.page(s.processes))
	s.mux.Handle("GET "+Prefix+"schedules", s.page(s.schedules))
	s.mux.Handle("POST "+Prefix+"topics/{topic}/settings", s.action(s.settings))
	s.mux.Handle("POST "+Prefix+"topics/{topic}/bulk", s.action(s.bulk))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, Prefix) {
			s.mux.ServeHTTP(w, r)
			return
		}
		cfg.API.ServeHTTP(w, r)
	}), nil
}

// staticHandler lets browsers cache the embedded files for a while.
func staticHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

// signedIn reports whether r may use the dashboard: no token is configured, or r carries
// the session cookie or the bearer token.
func (s *server) signedIn(r *http.Request) bool {
	if s.sessions == nil {
		return true
	}
	if c, err := r.Cookie(sessionCookie); err == nil && s.sessions.valid(c.Value) {
		return true
	}
	return r.Header.Get("Authorization") != "" && s.cfg.Guard.Authorized(r)
}

// apiProxy serves the REST API under Prefix+"api/" for the dashboard's scripts: a
// signed-in request without an Authorization header gets the token's. The REST handlers
// do the work, so the dashboard's pushes, cancels, revivals, pauses and resumes are
// exactly the API's.
func (s *server) apiProxy() http.Handler {
	strip := http.StripPrefix(strings.TrimSuffix(Prefix, "/")+"/api", s.cfg.API)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.sessions != nil && r.Header.Get("Authorization") == "" {
			if !s.signedIn(r) {
				// a session ended (expired, signed out in another tab): the API's
				// "missing bearer token" would read as the page's own fault
				httpguard.WriteError(w, http.StatusUnauthorized, "sign in first: "+Prefix+"login")
				return
			}
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+s.cfg.Token)
		}
		strip.ServeHTTP(w, r)
	})
}

// secureHeaders are set on every page: no script, style or frame but the dashboard's own.
func secureHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (s *server) loginForm(w http.ResponseWriter, r *http.Request) {
	if s.sessions == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", loginView{Next: safeNext(r.URL.Query().Get("next"))})
}

// login checks the token of the form, starts a session and sets its cookie: HttpOnly
// (scripts cannot read it), SameSite=Strict (no other site's page sends it), Secure
// over TLS.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if s.sessions == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		s.render(w, r, http.StatusBadRequest, "login", loginView{Error: "the form could not be read"})
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	ok, wait := s.cfg.Guard.TryToken(r, r.PostForm.Get("token"))
	if wait > 0 {
		w.Header().Set("Retry-After", httpguard.RetryAfter(wait))
		s.render(w, r, http.StatusTooManyRequests, "login", loginView{Next: next, Error: httpguard.ThrottledText(wait)})
		return
	}
	if !ok {
		s.render(w, r, http.StatusUnauthorized, "login", loginView{Next: next, Error: "wrong token"})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.sessions.start(), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: overHTTPS(r)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// overHTTPS reports whether the browser reached the server over HTTPS: TLS ended here,
// or at a proxy that says so (X-Forwarded-Proto). A client that claims HTTPS falsely
// only gets a cookie its browser will not send back over plain HTTP.
func overHTTPS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// logout ends the session of the request's cookie, so that no copy of it signs in
// again, and clears the cookie.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil && s.sessions != nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this server: a path of the dashboard, else "/".
// The target written is checked too: "/%2Fevil.example/{" passes as given, but its path
// escaped again ({ makes the raw path invalid) is "//evil.example/%7B", another host.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.IsAbs() || u.Host != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/"
	}
	target := u.RequestURI()
	if !strings.HasPrefix(target, "/") || strings.HasPrefix(target, "//") || strings.Contains(target, "\\") {
		return "/"
	}
	return target
}
