package main

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestServeDashboard runs "pgtask serve" as a process: the dashboard answers at / unless
// --ui=false, and the REST API stays where it is either way.
func TestServeDashboard(t *testing.T) {
	f := setup(t)
	bin := buildPgtask(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGTASK_TOKEN=") {
			env = append(env, kv)
		}
	}
	for _, tc := range []struct {
		name      string
		flags     []string
		dashboard bool
	}{{"ServedAtRootByDefault", nil, true}, {"OffWithUIFalse", []string{"--ui=false"}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startChild(t, bin, env, append([]string{"serve", "--database-url", f.url, "--addr", "127.0.0.1:0"}, tc.flags...)...)
			base := c.out.waitFor(t, regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`), 30*time.Second)[1]
			status, body := send(t, http.MethodGet, base+"/", "", nil)
			switch {
			case tc.dashboard && (status != http.StatusOK || !strings.Contains(body, "<title>Overview · pgtask</title>")):
				t.Fatalf("GET / = %d, want the dashboard:\n%s", status, body)
			case !tc.dashboard && (status != http.StatusNotFound || !strings.Contains(body, "no endpoint GET /")):
				t.Fatalf("GET / = %d, want the API's 404:\n%s", status, body)
			}
			if status, body := send(t, http.MethodGet, base+"/topics", "", nil); status != http.StatusOK {
				t.Fatalf("GET /topics = %d: %s", status, body)
			}
		})
	}
}
