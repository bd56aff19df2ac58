package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/dashboard"
	"github.com/pgtask/pgtask/internal/httpguard"
	"github.com/pgtask/pgtask/internal/pgtest"
	"github.com/pgtask/pgtask/internal/rest"
	"github.com/pgtask/pgtask/repository"
	"github.com/pgtask/pgtask/sql/schema"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fixture is one test's database, with topic "mail" (one attempt per task), and the
// dashboard served on it in front of the REST API, as `pgtask serve` serves them.
type fixture struct {
	srv   *httptest.Server // the dashboard and the API, behind the guard's Protect
	repo  *repository.Repository
	pool  *pgxpool.Pool
	t     *testing.T
	ctx   context.Context
	token string // required by the server, when not empty
}

// setup serves the dashboard on a fresh database; token, when not empty, is required.
func setup(t *testing.T, token string) *fixture {
	t.Helper()
	t.Parallel()
	f := &fixture{t: t, ctx: t.Context(), pool: pgtest.NewPool(t, schema.Hash(), repository.Migrate), token: token}
	repo, err := repository.New(repository.Config{Owner: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.repo = repo
	f.createTopic("mail")
	f.srv = serve(t, f.pool, repo, token)
	return f
}

// serve starts the dashboard and the REST API on pool, as `pgtask serve` mounts them,
// until the test ends; options change the dashboard's configuration.
func serve(t *testing.T, pool *pgxpool.Pool, repo *repository.Repository, token string, options ...func(*dashboard.Config)) *httptest.Server {
	t.Helper()
	guard, err := httpguard.New(httpguard.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	api, err := rest.New(rest.Config{Pool: pool, Repository: repo, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dashboard.Config{Pool: pool, Repository: repo, API: api, Guard: guard, Token: token, Refresh: refresh}
	for _, o := range options {
		o(&cfg)
	}
	h, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(guard.Protect(h))
	t.Cleanup(srv.Close)
	return srv
}

// createTopic creates a topic whose tasks get one attempt: a failure is final.
func (f *fixture) createTopic(topic string) {
	f.t.Helper()
	if _, err := f.repo.CreateTopic(f.ctx, f.pool, topic); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.repo.UpdateSettings(f.ctx, f.pool, topic, func(s *repository.TopicSettings) { s.MaxAttempts = 1 }); err != nil {
		f.t.Fatal(err)
	}
}

// push pushes creations to topic and returns the tasks.
func (f *fixture) push(topic string, creations ...repository.Creation) []repository.Task {
	f.t.Helper()
	tasks, err := f.repo.Push(f.ctx, f.pool, topic, repository.Append, creations...)
	if err != nil {
		f.t.Fatalf("push: %v", err)
	}
	return tasks
}

// get fetches path without following redirects, with the bearer token when the fixture
// has one and bearer is set.
func (f *fixture) get(path string, headers ...string) (int, http.Header, string) {
	f.t.Helper()
	return f.do(http.MethodGet, path, "", headers...)
}

// post sends body as JSON.
func (f *fixture) post(path, body string, headers ...string) (int, string) {
	f.t.Helper()
	status, _, text := f.do(http.MethodPost, path, body, append([]string{"Content-Type", "application/json"}, headers...)...)
	return status, text
}

func (f *fixture) do(method, path, body string, headers ...string) (int, http.Header, string) {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return res.StatusCode, res.Header, string(b)
}

// page fetches a page that must answer 200 and returns its HTML.
func (f *fixture) page(path string, headers ...string) string {
	f.t.Helper()
	status, _, body := f.get(path, headers...)
	if status != http.StatusOK {
		f.t.Fatalf("GET %s: status %d, want 200: %s", path, status, body)
	}
	return body
}

// form encodes form values.
func form(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

// mustContain fails unless every want is in body.
func mustContain(t *testing.T, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Errorf("page lacks %q", w)
		}
	}
}
