package httpguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/internal/httpguard"
)

// TestInternalTextHidesTheDatabase: what a 500 tells of a failure to connect names none of
// the user, the database or the address that the error itself carries.
func TestInternalTextHidesTheDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// port 1 on the loopback: refused at once
	_, err := pgconn.Connect(ctx, "postgres://alice:s3cret@127.0.0.1:1/ledger?connect_timeout=5")
	if err == nil {
		t.Fatal("connected to port 1")
	}
	wrapped := fmt.Errorf("page topic %q: %w", "mail", err)
	if !strings.Contains(wrapped.Error(), "alice") && !strings.Contains(wrapped.Error(), "127.0.0.1") {
		t.Fatalf("the connect error names neither user nor address (%v): the test proves nothing", wrapped)
	}
	text := httpguard.InternalText(wrapped)
	for _, secret := range []string{"alice", "s3cret", "ledger", "127.0.0.1"} {
		if strings.Contains(text, secret) {
			t.Errorf("InternalText = %q, names %q", text, secret)
		}
	}
	if !strings.Contains(text, "could not connect") {
		t.Errorf("InternalText = %q, want it to say the database could not be reached", text)
	}
	if text := httpguard.InternalText(context.DeadlineExceeded); !strings.Contains(text, "timed out") {
		t.Errorf("InternalText(deadline) = %q", text)
	}
	if text := httpguard.InternalText(errors.New("dial tcp 10.0.0.7:5432: broken pipe")); strings.Contains(text, "10.0.0.7") {
		t.Errorf("InternalText(other) = %q, names the address", text)
	}
}
