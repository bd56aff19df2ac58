package httpguard

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Wrong tokens are counted per client address in a bucket of guessBurst that refills one
// every guessEvery: an address that has sent guessBurst wrong tokens is refused without
// its token being checked (429) until the bucket holds one again, so that a weak token
// cannot be found by trying many. A right token does not refill it.
const (
	guessBurst = 10
	guessEvery = 6 * time.Second
	// guessAddresses bounds the addresses remembered: past it, those whose buckets are
	// full again are forgotten, and if none is, the oldest entry goes.
	guessAddresses = 10_000
)

// guesses is the wrong tokens of each client address.
type guesses struct {
	mu   sync.Mutex
	now  func() time.Time
	seen map[string]*bucket
}

type bucket struct {
	left float64   // wrong tokens the address may still send
	at   time.Time // when left was counted
	last time.Time // when the last wrong token came
}

func newGuesses() *guesses {
	return &guesses{now: time.Now, seen: make(map[string]*bucket)}
}

// clientAddr is the address the request came from, without its port, an IPv6 address
// cut to its /64 (what one host may hold many of): behind a reverse proxy, the proxy's
// (its X-Forwarded-For is the client's to write, and not believed).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// refill brings b's count to now.
func (b *bucket) refill(now time.Time) {
	b.left = min(guessBurst, b.left+float64(now.Sub(b.at))/float64(guessEvery))
	b.at = now
}

// take counts a token from the address as wrong before it is checked, so that
// concurrent guesses count each: 0 when it may be checked now (refund gives the count
// back when it was right, or none), else how long until the address may try one more.
func (g *guesses) take(addr string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	b, ok := g.seen[addr]
	if !ok {
		g.forget(now)
		b = &bucket{left: guessBurst, at: now}
		g.seen[addr] = b
	}
	b.refill(now)
	if b.left < 1 {
		return time.Duration((1 - b.left) * float64(guessEvery))
	}
	b.left--
	b.last = now
	return 0
}

// refund gives back what take counted, for a token that was right (or none at all).
func (g *guesses) refund(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b, ok := g.seen[addr]; ok {
		b.left = min(guessBurst, b.left+1)
	}
}

// forget makes room for one more address, when the map is full: the addresses whose
// buckets are full again go, or if none, the one whose last wrong token is the oldest.
func (g *guesses) forget(now time.Time) {
	if len(g.seen) < guessAddresses {
		return
	}
	var oldest string
	for addr, b := range g.seen {
		if b.refill(now); b.left >= guessBurst {
			delete(g.seen, addr)
			continue
		}
		if oldest == "" || b.last.Before(g.seen[oldest].last) {
			oldest = addr
		}
	}
	if len(g.seen) >= guessAddresses {
		delete(g.seen, oldest)
	}
}
