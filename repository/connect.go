package repository

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnectAsPool makes one connection outside a pool as the pool makes its own: with
// config's connection settings and its BeforeConnect and AfterConnect hooks (a password
// rotated before each connection, a search_path set after). A processor's heartbeat and
// notifier connect so, and the metrics' queue collector when the pool has no connection
// to spare. The caller closes it.
func ConnectAsPool(ctx context.Context, config *pgxpool.Config) (*pgx.Conn, error) {
	conn := config.ConnConfig.Copy()
	if config.BeforeConnect != nil {
		if err := config.BeforeConnect(ctx, conn); err != nil {
			return nil, err
		}
	}
	c, err := pgx.ConnectConfig(ctx, conn)
	if err != nil {
		return nil, err
	}
	if config.AfterConnect != nil {
		if err := config.AfterConnect(ctx, c); err != nil {
			_ = c.Close(ctx)
			return nil, err
		}
	}
	return c, nil
}
