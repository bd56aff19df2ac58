package rest

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestWriteJSONSaysWhatItCannotEncode: an answer that cannot be encoded was a 200 (the
// status written first) with an empty body; it is a 500 saying why.
func TestWriteJSONSaysWhatItCannotEncode(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	writeJSON(rec, http.StatusOK, map[string]float64{"x": math.Inf(1)})
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"error":"the answer cannot be written as JSON`) {
		t.Errorf("answer %d %q, want 500 saying the answer cannot be written", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	writeJSON(rec, http.StatusCreated, map[string]int{"x": 1})
	if rec.Code != http.StatusCreated || rec.Body.String() != "{\"x\":1}\n" || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("answer %d %q (%s), want 201 {\"x\":1}", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"))
	}
}
