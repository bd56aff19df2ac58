package main

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/internal/dashboard"
	"github.com/pgtask/pgtask/internal/httpguard"
)

// uiFlag is the flag of "serve" and "dev" that turns the web dashboard off.
func (f *flags) uiFlag() *bool {
	return f.Bool("ui", true, "serve the web dashboard at / (--ui=false: the REST API and /metrics only)")
}

// withDashboard puts the web dashboard in front of the REST API when ui is set: it
// serves "/" and /ui/, the API every other path. A purge from the dashboard answers
// well within the server's read timeout (which cancels a request still running).
func withDashboard(ui bool, pool *pgxpool.Pool, guard *httpguard.Guard, token string, api http.Handler, logger *slog.Logger,
	readTimeout time.Duration) (http.Handler, error) {
	if !ui {
		return api, nil
	}
	return dashboard.New(dashboard.Config{Pool: pool, API: api, Guard: guard, Token: token, Logger: logger,
		PurgeFor: min(dashboard.PurgeForDefault, readTimeout*2/3)})
}
