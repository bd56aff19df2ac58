// Package pgpool holds what the pools of pgtask's binaries (pgtask, processor) share
// beyond pgx's defaults: their isolation, and the check of the schema's version.
package pgpool

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5/pgxpool"
)

// IsolationParam is the connection parameter ReadCommitted has open set.
const IsolationParam = "default_transaction_isolation"

// ReadCommitted opens a pool with open(false) and returns it, unless its sessions begin
// transactions in another isolation than READ COMMITTED (a database's or role's
// default_transaction_isolation; READ UNCOMMITTED is run as READ COMMITTED) and its
// configuration does not set the isolation itself: it then closes it and returns
// open(true), whose pool sets IsolationParam to READ COMMITTED. The processor's
// statements need it (processor.Run refuses a pool without it). The parameter is not
// sent otherwise: a connection pooler such as PgBouncer refuses a startup parameter it
// does not know.
func ReadCommitted(ctx context.Context, open func(readCommitted bool) (*pgxpool.Pool, error)) (*pgxpool.Pool, error) {
	pool, err := open(false)
	if err != nil {
		return nil, err
	}
	var level string
	if err := pool.QueryRow(ctx, "SELECT current_setting('default_transaction_isolation')").Scan(&level); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if level == "read committed" || level == "read uncommitted" || pool.Config().ConnConfig.RuntimeParams[IsolationParam] != "" {
		return pool, nil
	}
	pool.Close()
	return open(true)
}

// quotedURL is the URL a pgx parse error quotes.
var quotedURL = regexp.MustCompile("`[^`]*`")

// ParseConfig is pgxpool.ParseConfig whose error leaves the URL out: pgx quotes it with
// its password masked, but not all of a password that holds an unescaped @
// ("postgres://u:p@ss@host:99999/db" is quoted "u:xxxxx@ss@host…").
func ParseConfig(url string) (*pgxpool.Config, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errors.New(quotedURL.ReplaceAllString(err.Error(), "the URL"))
	}
	return config, nil
}
