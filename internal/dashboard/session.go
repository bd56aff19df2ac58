package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"time"
)

// sessionLifetime is how long a session lasts after its login, whatever the browser
// does with its cookie.
const sessionLifetime = 12 * time.Hour

// sessions are the logins of a server with a token. A session is its cookie's value:
// its expiry and a random id, signed with a key derived from the token
// ("expiry.id.mac"), so that every server of the same token (replicas behind a load
// balancer) accepts it without shared state, and a changed token ends every session. A
// logout revokes its id on the server that served it, until the session would have
// expired: a copy of the cookie no longer signs in there (the browser drops its own);
// the other replicas, or this one once restarted, accept a copy until its expiry, at
// most sessionLifetime after its login.
type sessions struct {
	key     [sha256.Size]byte
	now     func() time.Time // injectable for tests
	mu      sync.Mutex
	revoked map[string]time.Time // id → the session's expiry, dropped once passed
}

func newSessions(token string) *sessions {
	// the token itself never signs: a key derived from it, for this use only
	return &sessions{key: sha256.Sum256([]byte("pgtask dashboard session\x00" + token)), now: time.Now, revoked: map[string]time.Time{}}
}

// start returns the cookie's value of a new session.
func (s *sessions) start() string {
	payload := strconv.FormatInt(s.now().Add(sessionLifetime).Unix(), 10) + "." + rand.Text() // 130 random bits
	return payload + "." + s.mac(payload)
}

func (s *sessions) mac(payload string) string {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// open checks value's signature and expiry and returns its id and expiry.
func (s *sessions) open(value string) (id string, expiry time.Time, ok bool) {
	cut := strings.LastIndexByte(value, '.')
	if cut < 0 || !hmac.Equal([]byte(value[cut+1:]), []byte(s.mac(value[:cut]))) {
		return "", time.Time{}, false
	}
	at, id, found := strings.Cut(value[:cut], ".")
	unix, err := strconv.ParseInt(at, 10, 64)
	if !found || err != nil {
		return "", time.Time{}, false
	}
	expiry = time.Unix(unix, 0)
	return id, expiry, s.now().Before(expiry)
}

// valid reports whether value is the cookie of a session that has not expired nor been
// revoked here.
func (s *sessions) valid(value string) bool {
	id, _, ok := s.open(value)
	if !ok {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, revoked := s.revoked[id]
	return !revoked
}

// end revokes the session of value (nothing for a value that signs nothing in): its
// cookie no longer signs in here. The revocations of expired sessions are dropped.
func (s *sessions) end(value string) {
	id, expiry, ok := s.open(value)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for other, at := range s.revoked {
		if !now.Before(at) {
			delete(s.revoked, other)
		}
	}
	s.revoked[id] = expiry
}
