package rest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components map[string]map[string]json.RawMessage `json:"components"`
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	served := map[string][]string{metricsPath: {"get"}} // mounted when configured
	for _, rt := range routes {
		served[rt.path] = append(served[rt.path], strings.ToLower(rt.method))
	}

	t.Run("IsOpenAPIVersion3", func(t *testing.T) {
		t.Parallel()
		if !strings.HasPrefix(doc.OpenAPI, "3.") {
			t.Errorf("openapi %q, want 3.x", doc.OpenAPI)
		}
	})
	t.Run("DescribesEveryServedRoute", func(t *testing.T) {
		t.Parallel()
		for path, methods := range served {
			for _, m := range methods {
				if _, ok := doc.Paths[path][m]; !ok {
					t.Errorf("%s %s is served but not described", strings.ToUpper(m), path)
				}
			}
		}
	})
	t.Run("DescribesNoOtherRoute", func(t *testing.T) {
		t.Parallel()
		for path, ops := range doc.Paths {
			for m := range ops {
				if m == "parameters" {
					continue
				}
				if !slices.Contains(served[path], m) {
					t.Errorf("%s %s is described but not served", strings.ToUpper(m), path)
				}
			}
		}
	})
	t.Run("ResolvesEveryReference", func(t *testing.T) {
		t.Parallel()
		var walk func(v any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				for k, child := range v {
					if k == "$ref" {
						ref, _ := child.(string)
						parts := strings.Split(strings.TrimPrefix(ref, "#/components/"), "/")
						if len(parts) != 2 || doc.Components[parts[0]][parts[1]] == nil {
							t.Errorf("unresolved $ref %q", ref)
						}
						continue
					}
					walk(child)
				}
			case []any:
				for _, child := range v {
					walk(child)
				}
			}
		}
		var all any
		if err := json.Unmarshal(openAPI, &all); err != nil {
			t.Fatal(err)
		}
		walk(all)
	})
	// Every request passes httpguard's checks before its route (403, and 415 for a write
	// without a token), and any may be stopped before its answer (503): each operation
	// lists those statuses, as docs/rest.md's table does.
	t.Run("ListsTheStatusesOfEveryRoute", func(t *testing.T) {
		t.Parallel()
		for path, ops := range doc.Paths {
			for m, raw := range ops {
				if m == "parameters" {
					continue
				}
				var op struct {
					Responses map[string]json.RawMessage `json:"responses"`
				}
				if err := json.Unmarshal(raw, &op); err != nil {
					t.Fatalf("%s %s: %v", m, path, err)
				}
				want := []string{"403", "503"}
				if m != "get" {
					want = append(want, "415")
				}
				for _, status := range want {
					if _, ok := op.Responses[status]; !ok {
						t.Errorf("%s %s does not list %s", strings.ToUpper(m), path, status)
					}
				}
			}
		}
	})
	t.Run("IsServedAsJSON", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		serveOpenAPI(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || !json.Valid(rec.Body.Bytes()) {
			t.Errorf("GET /openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
		}
	})
}
