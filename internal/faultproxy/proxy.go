// Package faultproxy is a TCP proxy in front of PostgreSQL that makes the faults a
// queue must survive, for tests and fault scripts: it loses the reply to a chosen
// statement after the server has executed (and, outside a transaction block, committed)
// it, delays requests, refuses new connections, and cuts every connection at once.
//
// It reads just enough of the wire protocol to know which statement a reply belongs to:
// the client's Parse, Bind, Query and Sync messages, and the server's ReadyForQuery,
// which ends the reply to each Sync or Query. A reply that is to be lost is held back
// whole until the server's ReadyForQuery (so the server has finished the request, and
// committed it when it ran in no transaction block or was a COMMIT), then both
// connections are closed without a byte of it reaching the client: the client sees its
// connection lost with the outcome unknown, as when a primary fails over or a network
// path breaks right after a commit.
//
// The proxy answers a client's SSLRequest and GSSENCRequest with "no" itself, so the
// session it relays is always plaintext.
package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Proxy relays connections to one PostgreSQL server.
type Proxy struct {
	network, upstream string
	ln                net.Listener

	mu     sync.Mutex
	cuts   []*Cut
	refuse bool
	delay  time.Duration
	conns  map[*session]struct{}
	closed bool
	wg     sync.WaitGroup
	lost   atomic.Int64
}

// Cut is a rule that loses replies: each request whose statements include one that
// Match accepts loses its reply with probability Probability (1 when 0), until Times
// replies have been lost (unlimited when 0). With Hold, the rule holds the end of such a
// request's reply (its ReadyForQuery) for Hold before passing it on instead, or until
// the connection is closed: the server has done the request, and the client hears
// nothing and sees no reset, as from a server gone silent.
type Cut struct {
	Match       func(sql string) bool
	Probability float64
	Times       int64
	Hold        time.Duration

	lost atomic.Int64
}

// Lost returns how many replies the rule has lost so far.
func (c *Cut) Lost() int64 { return c.lost.Load() }

// claim decides whether a request whose statements are sqls loses its reply by c.
func (c *Cut) claim(sqls []string) bool {
	if !slices.ContainsFunc(sqls, c.Match) {
		return false
	}
	if c.Probability > 0 && c.Probability < 1 && rand.Float64() >= c.Probability {
		return false
	}
	for {
		n := c.lost.Load()
		if c.Times > 0 && n >= c.Times {
			return false
		}
		if c.lost.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Statement returns a Match for the sqlc statement called name (its text starts with
// "-- name: <name> "), or for a simple COMMIT when name is "COMMIT".
func Statement(name string) func(sql string) bool {
	if strings.EqualFold(name, "COMMIT") {
		return func(sql string) bool { return strings.EqualFold(strings.TrimSpace(sql), "commit") }
	}
	prefix := "-- name: " + name + " "
	return func(sql string) bool { return strings.HasPrefix(sql, prefix) }
}

// Start starts a proxy in front of the server that connString names (its first host;
// a Unix socket directory works too) on a free port of 127.0.0.1.
func Start(connString string) (*Proxy, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{network: "tcp", upstream: net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), conns: map[*session]struct{}{}}
	if strings.HasPrefix(cfg.Host, "/") {
		p.network, p.upstream = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cfg.Host, cfg.Port)
	}
	if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// PoolConfig parses connString and points it at the proxy (without TLS, and without the
// fallback hosts it may name).
func (p *Proxy) PoolConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	addr := p.ln.Addr().(*net.TCPAddr)
	cc := cfg.ConnConfig
	cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = "127.0.0.1", uint16(addr.Port), nil, nil
	return cfg, nil
}

// AddCut arms a rule; it stays armed until RemoveCut or Close.
func (p *Proxy) AddCut(c *Cut) *Cut {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, c)
	return c
}

// RemoveCut disarms a rule.
func (p *Proxy) RemoveCut(c *Cut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.cuts {
		if x == c {
			p.cuts = append(p.cuts[:i:i], p.cuts[i+1:]...)
			return
		}
	}
}

// Lost returns how many replies the proxy has lost in all.
func (p *Proxy) Lost() int64 { return p.lost.Load() }

// Refuse makes the proxy close new connections at once (true) or accept them again.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = on
}

// Delay holds every request for d before passing it on (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// CutAll closes every open connection, as a server restart would.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.conns {
		s.close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for s := range p.conns {
		s.close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.refuse || p.closed {
			p.mu.Unlock()
			client.Close()
			continue
		}
		s := &session{p: p, client: client, closed: make(chan struct{})}
		p.conns[s] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go s.run()
	}
}

// session is one client connection and its server connection.
type session struct {
	p              *Proxy
	client, server net.Conn
	once           sync.Once
	closed         chan struct{} // closed by close

	mu       sync.Mutex
	requests []*request // sent to the server, reply not yet complete
}

// request is what the server answers with one ReadyForQuery.
type request struct {
	sqls []string
	lose bool
	hold time.Duration
}

func (s *session) close() {
	s.once.Do(func() {
		close(s.closed)
		s.client.Close()
		if s.server != nil {
			s.server.Close()
		}
	})
}

func (s *session) run() {
	defer s.p.wg.Done()
	defer func() {
		s.p.mu.Lock()
		delete(s.p.conns, s)
		s.p.mu.Unlock()
	}()
	defer s.close()
	if testHookDial != nil {
		testHookDial()
	}
	server, err := net.DialTimeout(s.p.network, s.p.upstream, 10*time.Second)
	if err != nil {
		return
	}
	s.p.mu.Lock()
	s.server = server
	s.p.mu.Unlock()
	select {
	case <-s.closed:
		// cut (CutAll, Close) while dialling: close saw no server to close
		server.Close()
		return
	default:
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.fromServer()
		s.close()
	}()
	s.fromClient()
	s.close()
	<-done
}

// testHookDial, when set (by tests only), runs in a session before it dials the server.
var testHookDial func()

// Startup codes of the untyped first messages.
const (
	sslRequest    = 80877103
	gssRequest    = 80877104
	cancelRequest = 80877102
)

// fromClient relays the client's messages, noting which statements each request runs.
func (s *session) fromClient() {
	r := bufio.NewReader(s.client)
	w := bufio.NewWriter(s.server)
	// The startup: untyped messages, of which SSL and GSS requests are refused here.
	for {
		msg, err := readUntyped(r)
		if err != nil {
			return
		}
		code := binary.BigEndian.Uint32(msg[4:8])
		if code == sslRequest || code == gssRequest {
			if _, err := s.client.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		}
		if code != cancelRequest {
			// the server's reply to the startup ends with its first ReadyForQuery
			s.push(&request{})
		}
		if _, err := w.Write(msg); err != nil || w.Flush() != nil {
			return
		}
		break
	}
	stmts := map[string]string{}
	var sqls []string
	for {
		typ, msg, err := readTyped(r)
		if err != nil {
			return
		}
		end := false
		switch typ {
		case 'P': // Parse: statement name, query
			name, rest := cstring(msg[5:])
			query, _ := cstring(rest)
			stmts[name] = query
		case 'B': // Bind: portal name, statement name
			_, rest := cstring(msg[5:])
			name, _ := cstring(rest)
			sqls = append(sqls, stmts[name])
		case 'Q': // simple Query
			query, _ := cstring(msg[5:])
			sqls = append(sqls, query)
			end = true
		case 'S': // Sync
			end = true
		}
		if end {
			s.push(s.p.judge(sqls))
			sqls = nil
			if d := s.p.delayOf(); d > 0 {
				if err := w.Flush(); err != nil {
					return
				}
				time.Sleep(d)
			}
		}
		if _, err := w.Write(msg); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

func (p *Proxy) delayOf() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// judge makes the request that runs sqls, deciding whether its reply is lost.
func (p *Proxy) judge(sqls []string) *request {
	req := &request{sqls: sqls}
	if len(sqls) == 0 {
		return req
	}
	p.mu.Lock()
	cuts := p.cuts
	p.mu.Unlock()
	for _, c := range cuts {
		if c.claim(sqls) {
			if c.Hold > 0 {
				req.hold = c.Hold
			} else {
				req.lose = true
			}
			break
		}
	}
	return req
}

func (s *session) push(r *request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
}

// head returns the request the server is answering, nil when none is outstanding.
func (s *session) head() *request {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		return nil
	}
	return s.requests[0]
}

func (s *session) pop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = s.requests[1:]
}

// fromServer relays the server's messages, holding back and dropping a reply to lose.
func (s *session) fromServer() {
	r := bufio.NewReader(s.server)
	w := bufio.NewWriter(s.client)
	for {
		typ, msg, err := readTyped(r)
		if err != nil {
			return
		}
		req := s.head()
		if req != nil && req.lose {
			if typ == 'Z' {
				// The server has finished the request: lose its reply and the connection.
				s.p.lost.Add(1)
				return
			}
			continue
		}
		if typ == 'Z' && req != nil {
			s.pop()
		}
		if req != nil && req.hold > 0 && typ == 'Z' {
			// The server has finished the request: its reply goes on after the hold, or
			// never if the connection closes first.
			if err := w.Flush(); err != nil {
				return
			}
			select {
			case <-time.After(req.hold):
			case <-s.closed:
				return
			}
		}
		if _, err := w.Write(msg); err != nil {
			return
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}

// maxMessage bounds a message's length: larger is a protocol error (or not PostgreSQL).
const maxMessage = 1 << 30

// readUntyped reads a startup-phase message: int32 length (itself included), body.
func readUntyped(r *bufio.Reader) ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n < 8 || n > maxMessage {
		return nil, errors.New("faultproxy: bad startup message length")
	}
	msg := make([]byte, n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[4:])
	return msg, err
}

// readTyped reads a message: type byte, int32 length (itself included), body; msg holds
// all of it.
func readTyped(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > maxMessage {
		return 0, nil, errors.New("faultproxy: bad message length")
	}
	msg := make([]byte, 1+n)
	copy(msg, head[:])
	_, err := io.ReadFull(r, msg[5:])
	return head[0], msg, err
}

// cstring splits b at its first NUL.
func cstring(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return string(b), nil
}
