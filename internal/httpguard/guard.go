package httpguard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Config configures a Guard.
type Config struct {
	// Token, when not empty, is the bearer token Authenticate requires
	// ("Authorization: Bearer <token>"). It must pass CheckToken.
	Token string
	// Addr is the address the server listens on. Without a token, Protect answers only
	// requests whose Host names it: a loopback address answers localhost and loopback
	// IPs, an unspecified one (0.0.0.0, ::) any IP and localhost, another IP only itself.
	// Nil counts as a loopback address.
	Addr net.Addr
	// AllowHosts are further host names (or IPs) that requests may be addressed to
	// without a token, such as the name of the machine or of a reverse proxy; a port,
	// if given, is ignored.
	AllowHosts []string
}

// Guard protects the routes of a server: see Protect and Authenticate.
type Guard struct {
	token     bool
	tokenHash [sha256.Size]byte
	bound     netip.Addr // the listening IP; the zero Addr for a loopback one
	allow     []string
	origins   *http.CrossOriginProtection
	guesses   *guesses // wrong tokens by client address
}

// New checks cfg and returns its Guard.
func New(cfg Config) (*Guard, error) {
	if err := CheckToken(cfg.Token); err != nil {
		return nil, err
	}
	g := &Guard{token: cfg.Token != "", tokenHash: sha256.Sum256([]byte(cfg.Token)), origins: http.NewCrossOriginProtection(),
		guesses: newGuesses()}
	if cfg.Addr != nil {
		host, _, err := net.SplitHostPort(cfg.Addr.String())
		if err != nil {
			return nil, fmt.Errorf("listening address %q: %w", cfg.Addr, err)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("listening address %q is not an IP address", cfg.Addr)
		}
		if !ip.Unmap().IsLoopback() {
			g.bound = ip.Unmap()
		}
	}
	for _, h := range cfg.AllowHosts {
		name := hostName(h)
		_, notIP := netip.ParseAddr(name)
		if name == "" || strings.ContainsAny(h, "/@ ") || strings.Contains(name, ":") && notIP != nil {
			return nil, fmt.Errorf("allowed host %q is not a host name or IP address", h)
		}
		g.allow = append(g.allow, name)
	}
	return g, nil
}

// CheckToken refuses a token that could never match what a client sends: one with a
// line break at its end (as read from a file with a trailing newline), white space or
// any other character than visible ASCII. The empty token (no authentication) passes.
func CheckToken(token string) error {
	if trimmed := strings.TrimRight(token, "\r\n"); trimmed != token {
		return errors.New("the token ends with a line break (read from a file with a trailing newline?): remove it")
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("the token has %q at byte %d: use visible ASCII characters only (no spaces, control characters or non-ASCII)", c, i)
		}
	}
	return nil
}

// HasToken reports whether a token is configured.
func (g *Guard) HasToken() bool { return g.token }

// Protect wraps a server's whole handler with the checks every request passes before
// any route, whatever its authentication:
//
//   - without a token, a Host header that names neither the bound address nor an
//     allowed host is refused (403), so a web page cannot reach the server through a
//     DNS name it rebinds to this machine;
//   - a browser's cross-origin write (POST, PUT, PATCH, DELETE) is refused (403), going
//     by Sec-Fetch-Site or Origin; non-browser clients send neither and pass;
//   - without a token, a write whose Content-Type is not application/json is refused
//     (415), even without a body: a cross-site page cannot send that type without a
//     CORS preflight, which the server never grants.
func (g *Guard) Protect(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.token && !g.hostAllowed(r.Host) {
			refuse(w, r, http.StatusForbidden, fmt.Sprintf("requests addressed to host %q are refused: without a token the server answers only its own address "+
				"(add the name with --allow-host, or configure a token)", clip(hostName(r.Host))))
			return
		}
		if err := g.origins.Check(r); err != nil {
			refuse(w, r, http.StatusForbidden, "cross-origin writes from a browser are refused")
			return
		}
		if !g.token && !safeMethod(r.Method) {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				refuse(w, r, http.StatusUnsupportedMediaType, "without a token, writes must have the header Content-Type: application/json")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// hostAllowed reports whether a request addressed to host (the Host header) may be
// served without a token.
func (g *Guard) hostAllowed(host string) bool {
	name := hostName(host)
	if name == "" || slices.Contains(g.allow, name) {
		return true // HTTP/1.0 without Host: not a browser
	}
	local := name == "localhost" || strings.HasSuffix(name, ".localhost")
	ip, err := netip.ParseAddr(name)
	ip = ip.Unmap()
	switch {
	case !g.bound.IsValid(): // loopback
		return local || err == nil && ip.IsLoopback()
	case g.bound.IsUnspecified():
		return local || err == nil
	}
	return err == nil && ip == g.bound
}

// hostName is the host of a Host header or an allowed host: lower case, without port,
// brackets or a trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// clip shortens a client's text for an error message.
func clip(s string) string {
	const most = 100
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// Authenticate requires the bearer token, when one is configured, on the routes it
// wraps: a request without it, or with another, gets 401 and a WWW-Authenticate
// challenge. The comparison is of SHA-256 digests in constant time, so that neither the
// token nor its length leaks through timing. A client address that sent 10 wrong tokens
// gets 429, its token not checked, until one more may be tried (one every 6 s): see
// TryToken.
func (g *Guard) Authenticate(next http.Handler) http.Handler {
	if !g.token {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait, err := g.checkThrottled(r)
		switch {
		case wait > 0:
			w.Header().Set("Retry-After", RetryAfter(wait))
			refuse(w, r, http.StatusTooManyRequests, ThrottledText(wait))
		case err == errNoToken:
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgtask"`)
			refuse(w, r, http.StatusUnauthorized, "missing bearer token: send the header Authorization: Bearer <token>")
		case err == errWrongToken:
			w.Header().Set("WWW-Authenticate", `Bearer realm="pgtask", error="invalid_token"`)
			refuse(w, r, http.StatusUnauthorized, "invalid bearer token")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// TryToken checks token, given by the client of r (a login form's), as Authenticate
// checks a bearer token: ok when it is the token, or none is configured. A client
// address that sent 10 wrong tokens (to either) is refused without a check until one
// more may be tried, one every 6 s: wait is then how long until that.
func (g *Guard) TryToken(r *http.Request, token string) (ok bool, wait time.Duration) {
	if !g.token {
		return true, 0
	}
	wait, err := g.throttled(r, func() error {
		switch {
		case token == "":
			return errNoToken
		case !g.matches(token):
			return errWrongToken
		}
		return nil
	})
	return err == nil, wait
}

// checkThrottled is check, throttled (throttled).
func (g *Guard) checkThrottled(r *http.Request) (wait time.Duration, err error) {
	return g.throttled(r, func() error { return g.check(r) })
}

// throttled runs check, a check of r's token, for a client address not throttled,
// counting a wrong token against it; wait is how long until it may try one more when it
// is throttled (its token then not checked: errWrongToken).
func (g *Guard) throttled(r *http.Request, check func() error) (wait time.Duration, err error) {
	addr := clientAddr(r)
	if wait := g.guesses.take(addr); wait > 0 {
		return wait, errWrongToken
	}
	err = check()
	if err != errWrongToken {
		g.guesses.refund(addr) // the right token, or none: not a guess
	}
	return 0, err
}

// ThrottledText is what a client refused by TryToken, or by Authenticate's 429, is told.
func ThrottledText(wait time.Duration) string {
	return fmt.Sprintf("too many wrong tokens from this address: try again in %s", RetryAfter(wait)+" s")
}

// RetryAfter is wait in whole seconds, rounded up, for a Retry-After header.
func RetryAfter(wait time.Duration) string {
	return fmt.Sprint(int64((wait + time.Second - 1) / time.Second))
}

// Authorized reports whether r may see what the routes behind Authenticate show: it
// carries the token, or none is configured. A public route uses it to say more to
// those who may know it.
//
// It counts a wrong token against the client's address as Authenticate does, and says
// false, the token not checked, while the address is throttled.
func (g *Guard) Authorized(r *http.Request) bool {
	if !g.token {
		return true
	}
	_, err := g.checkThrottled(r)
	return err == nil
}

var (
	errNoToken    = errors.New("no bearer token")
	errWrongToken = errors.New("wrong bearer token")
)

func (g *Guard) check(r *http.Request) error {
	scheme, given, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(given) == "" {
		return errNoToken
	}
	if !g.matches(strings.TrimSpace(given)) {
		return errWrongToken
	}
	return nil
}

// matches reports whether given is the token, comparing SHA-256 digests in constant time.
func (g *Guard) matches(given string) bool {
	digest := sha256.Sum256([]byte(given))
	return given != "" && subtle.ConstantTimeCompare(digest[:], g.tokenHash[:]) == 1
}

// refuse answers a refused request with a JSON error, {"error": message}. The body, if
// any, is left unread: see closeAfter.
func refuse(w http.ResponseWriter, r *http.Request, status int, message string) {
	if r.ContentLength != 0 {
		closeAfter(w)
	}
	WriteError(w, status, message)
}

// bodyGrace is how long the server goes on reading the unread rest of a refused
// request's body after its answer (so that the client reads the answer rather than a
// reset connection) before it closes the connection.
const bodyGrace = time.Second

// closeAfter closes the connection after the answer, at most bodyGrace after it: a
// client cannot hold the server by sending slowly a body the server will not use.
func closeAfter(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyGrace))
}

// WriteError answers {"error": message} with the status, as JSON that browsers will
// not sniff into another type.
func WriteError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Error string `json:"error"`
	}{message})
}
