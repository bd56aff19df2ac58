package faultproxy

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// TestCloseWhileDialling: a session cut (here by Close) while it dials the server
// closes the server's connection once it has one, so that Close returns. Before, close
// found no server connection to close, the session then waited for the server to speak
// first, and Close waited for the session: until PostgreSQL's authentication timeout (a
// minute), forever against a server that waits (the upstream here).
func TestCloseWhileDialling(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	held := make(chan net.Conn, 1)
	go func() { // accepts and waits, as a server waits for the startup message
		if c, err := upstream.Accept(); err == nil {
			held <- c
		}
	}()
	defer func() {
		select {
		case c := <-held:
			c.Close()
		default:
		}
	}()
	dialling, release := make(chan struct{}), make(chan struct{})
	testHookDial = func() { close(dialling); <-release }
	t.Cleanup(func() { testHookDial = nil })
	p, err := Start(fmt.Sprintf("postgres://u@127.0.0.1:%d/db", upstream.Addr().(*net.TCPAddr).Port))
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	<-dialling
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	// Close has cut the session (it waits for it now); then the dial goes on
	for {
		p.mu.Lock()
		done := p.closed
		p.mu.Unlock()
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return: the session cut while dialling kept its server connection")
	}
}
