package httpguard_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/internal/httpguard"
)

func TestCheckToken(t *testing.T) {
	t.Parallel()
	for token, fragment := range map[string]string{
		"":                          "",
		"s3cret-TOKEN_with.punct~!": "",
		"s3cret\n":                  "line break",
		"s3cret\r\n":                "line break",
		"s3 cret":                   "byte 2",
		"s3cret\t":                  "visible ASCII",
		"s3\x1bcret":                "visible ASCII",
		"sécret":                    "visible ASCII",
		"\n":                        "line break",
		strings.Repeat("a", 100000): "",
	} {
		err := httpguard.CheckToken(token)
		switch {
		case fragment == "" && err != nil:
			t.Errorf("CheckToken(%.20q) = %v, want nil", token, err)
		case fragment != "" && (err == nil || !strings.Contains(err.Error(), fragment)):
			t.Errorf("CheckToken(%q) = %v, want an error mentioning %q", token, err, fragment)
		}
	}
	t.Run("NewRefusesTheTokenAtStart", func(t *testing.T) {
		t.Parallel()
		if _, err := httpguard.New(httpguard.Config{Token: "s3cret\n"}); err == nil || !strings.Contains(err.Error(), "line break") {
			t.Errorf("New with a token ending in a newline: %v, want a refusal", err)
		}
	})
}

// serve runs one request through g.Protect(g.Authenticate(ok)) and returns the status.
func serve(t *testing.T, g *httpguard.Guard, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	rec := httptest.NewRecorder()
	g.Protect(g.Authenticate(ok)).ServeHTTP(rec, r)
	return rec
}

func guard(t *testing.T, cfg httpguard.Config) *httpguard.Guard {
	t.Helper()
	g, err := httpguard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func tcp(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func TestProtectHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		addr    net.Addr
		allow   []string
		allowed []string
		refused []string
	}{
		{"LoopbackAnswersLocalNamesOnly", tcp("127.0.0.1:8080"), nil,
			[]string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST.", "app.localhost:1", "[::1]:8080", "127.0.0.2", ""},
			[]string{"evil.example:8080", "192.168.1.10:8080", "localhost.evil.example", "127.0.0.1.nip.io"}},
		{"NilAddressCountsAsLoopback", nil, nil,
			[]string{"localhost", "127.0.0.1"}, []string{"evil.example"}},
		{"UnspecifiedAnswersAnyIPAndLocalhost", tcp("0.0.0.0:8080"), nil,
			[]string{"10.1.2.3:8080", "[2001:db8::1]:8080", "localhost:8080"}, []string{"evil.example:8080", "pgtask.internal"}},
		{"SpecificIPAnswersItself", tcp("192.168.1.10:8080"), nil,
			[]string{"192.168.1.10:8080", "192.168.1.10"}, []string{"192.168.1.11:8080", "localhost:8080", "evil.example"}},
		{"AllowListAddsNames", tcp("0.0.0.0:8080"), []string{"pgtask.internal", "Queue.Example.COM:443"},
			[]string{"pgtask.internal:8080", "queue.example.com"}, []string{"evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := guard(t, httpguard.Config{Addr: tc.addr, AllowHosts: tc.allow})
			for _, host := range tc.allowed {
				r := httptest.NewRequest(http.MethodGet, "/topics", nil)
				r.Host = host
				if rec := serve(t, g, r); rec.Code != http.StatusNoContent {
					t.Errorf("Host %q: %d %s, want it served", host, rec.Code, rec.Body)
				}
			}
			for _, host := range tc.refused {
				r := httptest.NewRequest(http.MethodGet, "/topics", nil)
				r.Host = host
				rec := serve(t, g, r)
				if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "--allow-host") {
					t.Errorf("Host %q: %d %s, want 403 naming --allow-host", host, rec.Code, rec.Body)
				}
			}
		})
	}
	t.Run("WithATokenAnyHostIsAnswered", func(t *testing.T) {
		t.Parallel()
		g := guard(t, httpguard.Config{Token: "s3cret", Addr: tcp("127.0.0.1:8080")})
		r := httptest.NewRequest(http.MethodGet, "/topics", nil)
		r.Host = "evil.example"
		r.Header.Set("Authorization", "Bearer s3cret")
		if rec := serve(t, g, r); rec.Code != http.StatusNoContent {
			t.Errorf("%d %s, want the request served", rec.Code, rec.Body)
		}
	})
	t.Run("RefusesAnAllowedHostThatIsNotAName", func(t *testing.T) {
		t.Parallel()
		for _, h := range []string{"", "http://pgtask.internal", "a/b", "user@host"} {
			if _, err := httpguard.New(httpguard.Config{AllowHosts: []string{h}}); err == nil {
				t.Errorf("allowed host %q accepted", h)
			}
		}
	})
}

func TestProtectWrites(t *testing.T) {
	t.Parallel()
	post := func(contentType string, header ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/topics/mail/pause", nil)
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	open := guard(t, httpguard.Config{Addr: tcp("127.0.0.1:8080")})
	locked := guard(t, httpguard.Config{Token: "s3cret", Addr: tcp("127.0.0.1:8080")})
	for _, tc := range []struct {
		name   string
		g      *httpguard.Guard
		r      *http.Request
		status int
	}{
		{"WithoutATokenJSONIsServed", open, post("application/json"), http.StatusNoContent},
		{"WithoutATokenJSONWithACharsetIsServed", open, post("application/json; charset=utf-8"), http.StatusNoContent},
		{"WithoutATokenNoContentTypeIsRefused", open, post(""), http.StatusUnsupportedMediaType},
		{"WithoutATokenAFormIsRefused", open, post("application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType},
		{"WithoutATokenTextIsRefused", open, post("text/plain"), http.StatusUnsupportedMediaType},
		{"WithoutATokenReadsNeedNoContentType", open, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/topics", nil), http.StatusNoContent},
		{"WithATokenAnyContentTypeIsServed", locked, post("application/x-www-form-urlencoded", "Authorization", "Bearer s3cret"), http.StatusNoContent},
		{"CrossSiteFetchIsRefused", open, post("application/json", "Sec-Fetch-Site", "cross-site"), http.StatusForbidden},
		{"CrossSiteFetchIsRefusedWithAToken", locked, post("application/json", "Sec-Fetch-Site", "cross-site", "Authorization", "Bearer s3cret"), http.StatusForbidden},
		{"ForeignOriginIsRefused", open, post("application/json", "Origin", "http://evil.example"), http.StatusForbidden},
		{"SameOriginFetchIsServed", open, post("application/json", "Sec-Fetch-Site", "same-origin"), http.StatusNoContent},
		{"OwnOriginIsServed", open, post("application/json", "Origin", "http://127.0.0.1:8080"), http.StatusNoContent},
		{"CrossSiteReadIsServed", open, func() *http.Request {
			r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/topics", nil)
			r.Header.Set("Sec-Fetch-Site", "cross-site")
			return r
		}(), http.StatusNoContent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := serve(t, tc.g, tc.r)
			if rec.Code != tc.status {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tc.status)
			}
			if tc.status != http.StatusNoContent && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
				t.Errorf("refusal of Content-Type %q, want a JSON error", rec.Header().Get("Content-Type"))
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	g := guard(t, httpguard.Config{Token: "s3cret"})
	clients := 0
	request := func(auth string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/topics", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		// each from an address of its own: an address's wrong tokens are throttled
		// (TestWrongTokensThrottled)
		clients++
		r.RemoteAddr = fmt.Sprintf("198.51.100.%d:40000", clients)
		return r
	}
	for auth, want := range map[string]int{
		"":                     http.StatusUnauthorized,
		"Bearer":               http.StatusUnauthorized,
		"Bearer ":              http.StatusUnauthorized,
		"Bearer s3cre":         http.StatusUnauthorized,
		"Bearer s3cret2":       http.StatusUnauthorized,
		"Basic czNjcmV0":       http.StatusUnauthorized,
		"s3cret":               http.StatusUnauthorized,
		"Bearer s3cret":        http.StatusNoContent,
		"bearer s3cret":        http.StatusNoContent,
		"Bearer   s3cret  ":    http.StatusNoContent,
		"Bearer s3cret\x00":    http.StatusUnauthorized,
		"Bearer S3CRET":        http.StatusUnauthorized,
		"Bearer s3cret s3cret": http.StatusUnauthorized,
	} {
		rec := serve(t, g, request(auth))
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", auth, rec.Code, want)
		}
		if want == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("Authorization %q: no Bearer challenge", auth)
		}
		if got := g.Authorized(request(auth)); got != (want == http.StatusNoContent) {
			t.Errorf("Authorized with %q = %v", auth, got)
		}
	}
	t.Run("WithoutATokenEveryoneIsAuthorized", func(t *testing.T) {
		t.Parallel()
		open := guard(t, httpguard.Config{})
		r := request("")
		r.Host = "localhost"
		if rec := serve(t, open, r); rec.Code != http.StatusNoContent || !open.Authorized(request("Bearer x")) || open.HasToken() {
			t.Errorf("open guard: %d", rec.Code)
		}
	})
}
