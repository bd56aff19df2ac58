package httpguard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestWrongTokensThrottled: an address that sent 10 wrong tokens, to the API or the
// login form, is refused (429 with Retry-After, its token not checked, the right one
// neither) until one more may be tried, one every 6 s; another address is not; a right
// token refills nothing. Before, a weak token could be guessed as fast as the server
// answered.
func TestWrongTokensThrottled(t *testing.T) {
	g, err := New(Config{Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	g.guesses.now = func() time.Time { return now }
	api := g.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	call := func(addr, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/topics", nil)
		r.RemoteAddr = addr + ":40000"
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w
	}
	login := func(addr, token string) (bool, time.Duration) {
		r := httptest.NewRequest(http.MethodPost, "/ui/login", nil)
		r.RemoteAddr = addr + ":40000"
		return g.TryToken(r, token)
	}
	for i := range 5 {
		if w := call("192.0.2.1", fmt.Sprintf("guess-%d", i)); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, w.Code)
		}
		if ok, wait := login("192.0.2.1", fmt.Sprintf("form-%d", i)); ok || wait != 0 {
			t.Fatalf("wrong token %d at the login: %v, %v; want refused, checked", i, ok, wait)
		}
	}
	if w := call("192.0.2.1", "s3cret"); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" ||
		!strings.Contains(w.Body.String(), "too many wrong tokens") {
		t.Errorf("the right token after 10 wrong ones: %d, Retry-After %q, %s; want 429, 6 s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if ok, wait := login("192.0.2.1", "s3cret"); ok || wait != guessEvery {
		t.Errorf("the right token at the login after 10 wrong ones: %v, %v; want refused, %v to wait", ok, wait, guessEvery)
	}
	if w := call("198.51.100.7", "s3cret"); w.Code != http.StatusNoContent {
		t.Errorf("another address with the right token: %d, want 204", w.Code)
	}
	now = now.Add(guessEvery)
	if w := call("192.0.2.1", "s3cret"); w.Code != http.StatusNoContent {
		t.Errorf("the right token 6 s later: %d, want 204", w.Code)
	}
	if w := call("192.0.2.1", "guess-again"); w.Code != http.StatusUnauthorized {
		t.Errorf("a wrong token 6 s later: %d, want 401 (checked)", w.Code)
	}
	if w := call("192.0.2.1", "s3cret"); w.Code != http.StatusTooManyRequests {
		t.Errorf("the right token after that one: %d, want 429 (the right one refilled nothing)", w.Code)
	}
}

// TestWrongTokensAddressesBounded: past guessAddresses addresses, those whose buckets
// are full again are forgotten, else the one whose last wrong token is oldest.
func TestWrongTokensAddressesBounded(t *testing.T) {
	g := newGuesses()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	throttled := func(addr string) bool {
		if g.take(addr) > 0 {
			return true
		}
		g.refund(addr)
		return false
	}
	for i := range guessAddresses {
		g.take(fmt.Sprintf("a%d", i))
		now = now.Add(time.Microsecond) // none refilled by the end
	}
	for range guessBurst - 1 {
		g.take("a0") // a0 throttled: the oldest now is a1
	}
	g.take("new")
	if len(g.seen) != guessAddresses {
		t.Fatalf("%d addresses remembered, want %d", len(g.seen), guessAddresses)
	}
	if _, ok := g.seen["a1"]; ok {
		t.Error("a1, whose last wrong token is the oldest, is still remembered")
	}
	if !throttled("a0") {
		t.Error("a0, throttled, was forgotten")
	}
	now = now.Add(guessEvery) // every bucket but a0's full again
	g.take("newer")
	if _, ok := g.seen["a0"]; !ok || len(g.seen) != 2 {
		t.Errorf("%d addresses remembered after the buckets refilled (a0 among them: %v), want 2 (a0, newer)", len(g.seen), ok)
	}
}

// TestWrongTokensOfAnIPv6Network: the addresses of one IPv6 /64 (what one host may hold
// many of) share their count; an IPv4 address in IPv6 form is the IPv4 one's.
func TestWrongTokensOfAnIPv6Network(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"[2001:db8:1:2::1]:5000", "[2001:db8:1:2:ffff::9]:6000"},
		{"192.0.2.1:5000", "[::ffff:192.0.2.1]:6000"},
	} {
		a := clientAddr(&http.Request{RemoteAddr: tc.a})
		b := clientAddr(&http.Request{RemoteAddr: tc.b})
		if a != b {
			t.Errorf("%s counts as %s, %s as %s: want one address", tc.a, a, tc.b, b)
		}
	}
	if a, b := clientAddr(&http.Request{RemoteAddr: "[2001:db8:1:2::1]:1"}), clientAddr(&http.Request{RemoteAddr: "[2001:db8:1:3::1]:1"}); a == b {
		t.Errorf("two /64s count as one: %s", a)
	}
}
