package rest

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/repository"
)

func TestDecodeEnqueue(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name, body string
		want       enqueue
	}{
		{"SingleTaskDefaultsToAppend", `{"identifier":"a"}`,
			enqueue{insertion: repository.Append, single: true, creations: []repository.Creation{{Identifier: "a"}}}},
		{"InsertionIsCaseInsensitive", `{"identifier":"a","insertion":"SuperSede"}`,
			enqueue{insertion: repository.Supersede, single: true, creations: []repository.Creation{{Identifier: "a"}}}},
		{"ObjectInputBecomesCompactJSON", `{"identifier":"a","input":{ "k" : [1, 2] }}`,
			enqueue{single: true, creations: []repository.Creation{{Identifier: "a", Input: `{"k":[1,2]}`}}}},
		{"NullInputIsNone", `{"identifier":"a","input":null}`,
			enqueue{single: true, creations: []repository.Creation{{Identifier: "a"}}}},
		{"NumberInputIsItsText", `{"identifier":"a","input":42}`,
			enqueue{single: true, creations: []repository.Creation{{Identifier: "a", Input: "42"}}}},
		{"DelayParsesGoDurations", `{"identifier":"a","delay":"1m30s"}`,
			enqueue{single: true, creations: []repository.Creation{{Identifier: "a", Delay: 90 * time.Second}}}},
		{"DelayMsIsMilliseconds", `{"identifier":"a","delay_ms":1500}`,
			enqueue{single: true, creations: []repository.Creation{{Identifier: "a", Delay: 1500 * time.Millisecond}}}},
		{"BatchSharesTheInsertion", `{"insertion":"delete","tasks":[{"identifier":"a","priority":-3},{"identifier":"b","suspended":true,"reference":"r"}]}`,
			enqueue{insertion: repository.Delete, creations: []repository.Creation{{Identifier: "a", Priority: -3}, {Identifier: "b", Suspended: true, Reference: "r"}}}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeEnqueue([]byte(tc.body))
			if err != nil {
				t.Fatalf("decode %s: %v", tc.body, err)
			}
			if got.insertion != tc.want.insertion || got.single != tc.want.single || len(got.creations) != len(tc.want.creations) {
				t.Fatalf("decode %s = %+v, want %+v", tc.body, got, tc.want)
			}
			for i := range got.creations {
				if got.creations[i] != tc.want.creations[i] {
					t.Errorf("creation %d = %+v, want %+v", i, got.creations[i], tc.want.creations[i])
				}
			}
		})
	}
	t.Run("NotBeforeParsesRFC3339", func(t *testing.T) {
		t.Parallel()
		got, err := decodeEnqueue([]byte(`{"identifier":"a","not_before":"2030-01-02T03:04:05.5+01:00"}`))
		want := time.Date(2030, 1, 2, 2, 4, 5, 5e8, time.UTC)
		if err != nil || !got.creations[0].NotBefore.Equal(want) {
			t.Errorf("not_before = %v, %v; want %v", got.creations[0].NotBefore, err, want)
		}
	})

	bad := []struct{ name, body, fragment string }{
		{"Empty", ``, "empty"},
		{"NotAnObject", `[{"identifier":"a"}]`, "want a JSON object"},
		{"Malformed", `{"identifier":`, "malformed"},
		{"TrailingData", `{"identifier":"a"} {}`, "after the JSON object"},
		{"UnknownField", `{"identifier":"a","colour":"red"}`, `"colour"`},
		{"UnknownFieldInABatchTask", `{"tasks":[{"identifier":"a","colour":"red"}]}`, `"colour"`},
		{"WrongType", `{"identifier":7}`, `"identifier"`},
		{"PriorityOutOfRange", `{"identifier":"a","priority":40000}`, "-32768 to 32767"},
		{"MissingIdentifier", `{"input":"x"}`, "identifier"},
		{"UnknownInsertion", `{"identifier":"a","insertion":"upsert"}`, "upsert"},
		{"BadDelay", `{"identifier":"a","delay":"10 seconds"}`, "duration"},
		{"NegativeDelay", `{"identifier":"a","delay":"-1s"}`, "negative"},
		{"NegativeDelayMs", `{"identifier":"a","delay_ms":-1}`, "delay_ms"},
		{"HugeDelayMs", `{"identifier":"a","delay_ms":9223372036854775807}`, "delay_ms"},
		{"BadNotBefore", `{"identifier":"a","not_before":"tomorrow"}`, "RFC 3339"},
		{"TwoDelays", `{"identifier":"a","delay":"1s","delay_ms":5}`, "at most one"},
		{"EmptyBatch", `{"tasks":[]}`, "empty"},
		{"TaskFieldsBesideTasks", `{"identifier":"a","tasks":[{"identifier":"b"}]}`, "inside each task"},
		{"InsertionInsideABatchTask", `{"tasks":[{"identifier":"a","insertion":"replace"}]}`, "tasks[0]"},
		{"NestedTasks", `{"tasks":[{"identifier":"a","tasks":[]}]}`, "nested"},
	}
	for _, tc := range bad {
		t.Run("Rejects"+tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeEnqueue([]byte(tc.body))
			if !errors.Is(err, errBadRequest) || !strings.Contains(err.Error(), tc.fragment) {
				t.Errorf("decode %s: error %v, want a bad request mentioning %q", tc.body, err, tc.fragment)
			}
		})
	}
}

func TestDecodeList(t *testing.T) {
	t.Parallel()
	t.Run("DefaultsToTheFirstPageForward", func(t *testing.T) {
		t.Parallel()
		got, err := decodeList(url.Values{})
		if err != nil || got.cursor != repository.MinSequence || got.limit != ListLimitDefault || got.direction != repository.Forward || got.filter.State != nil {
			t.Errorf("decodeList() = %+v, %v", got, err)
		}
	})
	t.Run("BackwardStartsAfterEverything", func(t *testing.T) {
		t.Parallel()
		got, err := decodeList(url.Values{"direction": {"Backward"}})
		if err != nil || got.cursor != repository.MaxSequence || got.direction != repository.Backward {
			t.Errorf("decodeList(backward) = %+v, %v", got, err)
		}
	})
}

// FuzzDecodeEnqueue checks that no body makes decodeEnqueue panic, that every refusal is
// a bad request, and that every accepted body is valid JSON yielding creations the
// repository's own checks would not refuse for reasons the decoder owns.
func FuzzDecodeEnqueue(f *testing.F) {
	for _, seed := range []string{
		`{"identifier":"a"}`,
		`{"identifier":"a","input":{"to":"bob"},"insertion":"replace","delay":"10s","priority":-1,"reference":"r","suspended":true}`,
		`{"identifier":"a","delay_ms":250}`,
		`{"identifier":"a","not_before":"2030-01-02T03:04:05Z"}`,
		`{"tasks":[{"identifier":"a"},{"identifier":"b","input":"x"}],"insertion":"delete"}`,
		`{"tasks":[]}`,
		`{"tasks":[{"identifier":"a","insertion":"append"}]}`,
		`{"identifier":"a","delay":"1s","not_before":"2030-01-02T03:04:05Z"}`,
		`{"identifier":"a","priority":99999}`,
		`{"identifier":"a","unknown":1}`,
		`{"identifier":`,
		`[]`,
		`null`,
		``,
		`{"identifier":"a"}garbage`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeEnqueue(body)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("decode %q: error %v is not a bad request", body, err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("decode %q accepted invalid JSON", body)
		}
		if !got.insertion.Valid() || len(got.creations) == 0 || (got.single && len(got.creations) != 1) {
			t.Fatalf("decode %q = %+v", body, got)
		}
		for i, c := range got.creations {
			if c.Identifier == "" || c.Delay < 0 {
				t.Fatalf("decode %q: creation %d = %+v", body, i, c)
			}
			if c.Delay > 0 && !c.NotBefore.IsZero() {
				t.Fatalf("decode %q: creation %d has both a delay and a not-before time", body, i)
			}
		}
	})
}
