// Package conntest helps tests that talk to a server over raw TCP, as a slow, broken or
// hostile client would: send a request written by hand, wait for the server to close the
// connection, find a port nothing listens on. The tests of package httpguard, of the
// REST API and of both binaries use it.
package conntest

import (
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// Dial connects to addr (HOST:PORT) and writes text; the connection is closed when the
// test ends.
func Dial(tb testing.TB, addr, text string) net.Conn {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, text); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// ReadUntilClosed reads conn until the server closes it (or resets it) and returns what
// the server sent. It fails the test when limit passes first: choose a limit far beyond
// the server's timeouts under test, so that reaching it means the server never cut the
// connection.
func ReadUntilClosed(tb testing.TB, conn net.Conn, limit time.Duration) string {
	tb.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(limit)); err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		tb.Fatalf("the server kept the connection open for %v; it sent %q", limit, b)
	}
	return string(b)
}

// ClosedPort returns a loopback port nothing listens on (one just freed), for a client
// that must fail to connect.
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if err := ln.Close(); err != nil {
		tb.Fatal(err)
	}
	return port
}
