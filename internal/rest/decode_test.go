package rest

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
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
		{"UnknownFieldInABatchTask", `{"tasks":[{"identifier":"a"},{"identifier":"b","colour":"red"}]}`, `tasks[1]: unknown field "colour"`},
		{"WrongTypeInABatchTask", `{"tasks":[{"identifier":"a"},{"identifier":"b"},{"identifier":"c","priority":"x"}]}`,
			`tasks[2]: field "priority": got a JSON string, want an integer from -32768 to 32767`},
		{"Null", `null`, "the body is a JSON null: want a JSON object"},
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
		{"InvalidUTF8InAString", "{\"identifier\":\"a\",\"input\":\"\xff\"}", "not valid UTF-8: byte 27"},
		{"UnpairedSurrogate", `{"identifier":"a\ud800"}`, "unpaired"},
		{"IdentifierTooLong", `{"identifier":"` + strings.Repeat("é", 501) + `"}`, "501 characters long, at most 500"},
		{"ReferenceTooLongInABatch", `{"tasks":[{"identifier":"a","reference":"` + strings.Repeat("r", 501) + `"}]}`, "tasks[0]: reference is 501"},
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
		if err := wire.CheckText(body); err != nil {
			t.Fatalf("decode %q accepted text that is not UTF-8: %v", body, err)
		}
		for i, c := range got.creations {
			if err := c.Validate(); err != nil {
				t.Fatalf("decode %q: creation %d = %+v, which the repository refuses: %v", body, i, c, err)
			}
			if c.Delay > 0 && !c.NotBefore.IsZero() {
				t.Fatalf("decode %q: creation %d has both a delay and a not-before time", body, i)
			}
		}
	})
}

// wantBadRequestOrNil fails unless err is nil or a bad request.
func wantBadRequestOrNil(t *testing.T, input any, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, errBadRequest) {
		t.Fatalf("decode %q: error %v is not a bad request", input, err)
	}
}

// FuzzDecodeCancel checks the cancel body: a bad request or a canceller the repository
// accepts, never empty.
func FuzzDecodeCancel(f *testing.F) {
	for _, seed := range []string{``, ` `, `{}`, `{"by":"alice"}`, `{"by":""}`, `{"by":7}`, `{"who":"x"}`, `{"by":"a\ud800"}`, "{\"by\":\"\xff\"}", `{"by":[1:]}`, `[:`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		by, err := decodeCancel(body)
		wantBadRequestOrNil(t, body, err)
		if err == nil && (by == "" || repository.ValidateCanceller(by) != nil) {
			t.Fatalf("decode %q = %q, which the repository refuses", body, by)
		}
	})
}

// FuzzDecodeRevive checks the revive body: a bad request or exactly one of a valid mode
// and a valid result.
func FuzzDecodeRevive(f *testing.F) {
	for _, seed := range []string{`{"mode":"reset"}`, `{"mode":"APPEND"}`, `{"result":"success"}`, `{"mode":"x","result":"y"}`, `{}`, `[]`, `{"mode":null}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeRevive(body)
		wantBadRequestOrNil(t, body, err)
		if err != nil {
			return
		}
		if (got.mode == nil) == (got.result == nil) {
			t.Fatalf("decode %q = %+v: want exactly one of mode and result", body, got)
		}
		if got.result != nil && !got.result.Valid() {
			t.Fatalf("decode %q: result %v is not valid", body, *got.result)
		}
	})
}

// FuzzDecodeList checks the listing's query string: a bad request or a query the
// repository accepts, with the limit in range.
func FuzzDecodeList(f *testing.F) {
	for _, seed := range []string{``, `state=READY&limit=10`, `direction=backward&cursor=5`, `identifier=%FF`, `limit=0`, `state=a&state=b`,
		`reference=r&identifier=i`, `cursor=-1`, `x=1`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return // the server answers 400 for it before any decoder
		}
		got, err := decodeList(q)
		wantBadRequestOrNil(t, query, err)
		if err != nil {
			return
		}
		if got.limit < 1 || got.limit > ListLimitMax || got.cursor < 0 {
			t.Fatalf("decode %q = %+v", query, got)
		}
		if err := repository.ValidateFilter(got.filter); err != nil {
			t.Fatalf("decode %q: filter %+v refused by the repository: %v", query, got.filter, err)
		}
	})
}

// FuzzParseSequence checks the {sequence} path segment: a bad request or a positive
// sequence.
func FuzzParseSequence(f *testing.F) {
	for _, seed := range []string{"1", "0", "-1", "+7", "007", "9223372036854775807", "9223372036854775808", "1e3", " 1", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, segment string) {
		seq, err := parseSequence(segment)
		wantBadRequestOrNil(t, segment, err)
		if err == nil && seq <= 0 {
			t.Fatalf("parse %q = %d, want a positive sequence", segment, seq)
		}
	})
}
