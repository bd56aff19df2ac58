package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// sessionLifetime is how long a session lasts after its login, whatever the browser
// does with its cookie.
const sessionLifetime = 12 * time.Hour

// sessions are the logins of a server with a token: a random id per login, which the
// cookie holds, with its expiry, kept in the server's memory only. A logout forgets its
// id, so a copy of the cookie stops working with it; a restart forgets them all (every
// browser signs in again). Only a login with the token adds one, and each login drops
// the expired ones, so they are as many as the logins of the last sessionLifetime.
type sessions struct {
	mu  sync.Mutex
	ids map[[sha256.Size]byte]time.Time // by the SHA-256 of the id: a lookup's timing says nothing of the ids
	now func() time.Time                // injectable for tests
}

func newSessions() *sessions {
	return &sessions{ids: map[[sha256.Size]byte]time.Time{}, now: time.Now}
}

// start records a new session and returns its id, the cookie's value.
func (s *sessions) start() string {
	id := rand.Text() // 26 characters of base32, 130 bits of crypto/rand
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, expiry := range s.ids {
		if !now.Before(expiry) {
			delete(s.ids, k)
		}
	}
	s.ids[sha256.Sum256([]byte(id))] = now.Add(sessionLifetime)
	return id
}

// valid reports whether id is a session's that has not expired nor ended.
func (s *sessions) valid(id string) bool {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	expiry, ok := s.ids[key]
	return ok && s.now().Before(expiry)
}

// end forgets the session of id: its cookie no longer signs in.
func (s *sessions) end(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, key)
}
