package wire_test

import (
	"encoding/json"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/internal/wire"
)

func TestCheckText(t *testing.T) {
	t.Parallel()
	for text, fragment := range map[string]string{
		`{"a":"plain é 😀"}`:                "",
		`{"a":"\u00e9 \ud83d\ude00"}`:      "",
		`{"a":"\\ud800"}`:                  "", // an escaped backslash, then text
		`{"a":"\\\ud83d\ude00"}`:           "",
		`{"a":"\u12"}`:                     "", // malformed: the decoder's to report
		"{\"a\":\"\xff\"}":                 "byte 6 (0xff)",
		"{\"a\":\"\xc3\"}":                 "not valid UTF-8",
		`{"a":"\ud800"}`:                   `\ud800 at byte 6`,
		`{"a":"\udc00"}`:                   "unpaired",
		`{"a":"\ud83d\u0041"}`:             "unpaired",
		`{"a":"\ud83d"}`:                   "unpaired",
		`{"a":"\\\ud800"}`:                 "unpaired",
		`{"a":"\ud83d\ude00\ude00"}`:       "unpaired",
		`["\ud83d\ude00", "\uDBFF\uDFFF"]`: "",
	} {
		err := wire.CheckText([]byte(text))
		switch {
		case fragment == "" && err != nil:
			t.Errorf("CheckText(%s) = %v, want nil", text, err)
		case fragment != "" && (err == nil || !strings.Contains(err.Error(), fragment)):
			t.Errorf("CheckText(%q) = %v, want an error mentioning %q", text, err, fragment)
		}
	}
}

// FuzzCheckText checks CheckText against encoding/json: a JSON string it passes decodes
// without a replacement character (U+FFFD) that the text did not spell itself.
func FuzzCheckText(f *testing.F) {
	for _, seed := range []string{`"a"`, `"\ud800"`, "\"\xff\"", `"\ud83d\ude00"`, `"\\ud800"`, `"\ufffd"`, "\"\uFFFD\""} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s string
		if json.Unmarshal(b, &s) != nil {
			return // not a JSON string: nothing to compare
		}
		err := wire.CheckText(b)
		if err != nil {
			return
		}
		spelled := strings.Contains(string(b), "\uFFFD") || strings.Contains(strings.ToLower(string(b)), `\ufffd`)
		if strings.ContainsRune(s, '\uFFFD') && !spelled {
			t.Fatalf("CheckText passed %q, which decodes to a replacement character", b)
		}
	})
}

// TestDecodeObject: the object a request or a JSON line holds is refused when a field is
// given twice (encoding/json keeps the last one without a word), in a task of a batch
// too, but not inside an input, which is stored as the text it is; and when anything
// follows the object.
func TestDecodeObject(t *testing.T) {
	t.Parallel()
	type task struct {
		Identifier string          `json:"identifier"`
		Input      json.RawMessage `json:"input"`
		Priority   int16           `json:"priority"`
		Count      int32           `json:"count"`
		Tasks      []task          `json:"tasks"`
	}
	for text, fragment := range map[string]string{
		`{"identifier":"a","input":{"x":1,"x":2}}`:          "",
		`{"tasks":[{"identifier":"a"},{"identifier":"b"}]}`: "",
		` {"identifier":"a"} `:                              "",
		`{"identifier":"a","identifier":"b"}`:               `field "identifier" is given twice`,
		`{"identifier":"a","Identifier":"b"}`:               `field "Identifier" is given twice`,
		// a long s (U+017F) fills the field of an "s" for encoding/json
		`{"tasks":[],"taſks":[{"identifier":"b"}]}`:                          `field "taſks" is given twice`,
		`{"identifier":"a","Input":{"x":1,"x":2}}`:                           "",
		`{"tasks":[{"identifier":"a"},{"identifier":"b","identifier":"c"}]}`: `tasks[1]: field "identifier" is given twice`,
		`{"identifier":"a"}}`:                                                "unexpected data after the JSON object",
		`{"identifier":"a"} {"identifier":"b"}`:                              "unexpected data after the JSON object",
		`{"identifier":"a","colour":1}`:                                      `unknown field "colour"`,
		`{"priority":40000}`:                                                 `field "priority": got a JSON number 40000, want an integer from -32768 to 32767`,
		``:                                                                   "the body is empty",
		`[1]`:                                                                "the body is a JSON array",
		` null `:                                                             "the body is a JSON null: want a JSON object",
		`{"count":3000000000}`:                                               `field "count": got a JSON number 3000000000, want an integer from -2147483648 to 2147483647`,
		`{"identifier":`:                                                     "unexpected end",
		"{\"identifier\":\"\xff\"}":                                          "not valid UTF-8",
	} {
		var v task
		err := wire.DecodeObject([]byte(text), &v)
		switch {
		case fragment == "" && err != nil:
			t.Errorf("DecodeObject(%s) = %v, want nil", text, err)
		case fragment != "" && (err == nil || !strings.Contains(err.Error(), fragment)):
			t.Errorf("DecodeObject(%q) = %v, want an error mentioning %q", text, err, fragment)
		}
	}
}

// TestDecodeObjectRefusesNull: a null where the field's type has none is refused as a
// value of the wrong type, naming the field, in a task of a batch too; encoding/json
// left such a field as it was, so a PATCH whose setting was null answered 200 and changed
// nothing. A field that reads null itself (tagged null:"none") and an input (a
// json.RawMessage, where null is a value) take it.
func TestDecodeObjectRefusesNull(t *testing.T) {
	t.Parallel()
	type limit struct {
		Concurrency *int32 `json:"concurrency" null:"none"`
	}
	type Common struct {
		Reference *string `json:"reference"`
	}
	type task struct {
		Common
		Identifier string            `json:"identifier"`
		Input      json.RawMessage   `json:"input"`
		Inputs     []json.RawMessage `json:"inputs"`
		Any        any               `json:"any"`
		Labels     map[string]string `json:"labels"`
		Priority   int16             `json:"priority"`
		Delay      *string           `json:"delay"`
		NotBefore  *time.Time        `json:"not_before"`
		Paused     *bool             `json:"paused"`
		Limit      *limit            `json:"limit"`
		Tasks      []task            `json:"tasks"`
		Keys       []string          `json:"keys"`
	}
	for text, fragment := range map[string]string{
		`{"identifier":"a","input":null}`:                  "",
		`{"limit":{"concurrency":null}}`:                   "",
		`{"input":{"x":null}}`:                             "",
		`{"priority":null}`:                                `field "priority": got a JSON null, want an integer from -32768 to 32767`,
		`{"delay":null}`:                                   `field "delay": got a JSON null, want a string`,
		`{"not_before":null}`:                              `field "not_before": got a JSON null, want a string`,
		`{"paused":null}`:                                  `field "paused": got a JSON null, want true or false`,
		`{"Paused":null}`:                                  `field "Paused": got a JSON null, want true or false`,
		`{"identifier":null}`:                              `field "identifier": got a JSON null, want a string`,
		`{"limit":null}`:                                   `field "limit": got a JSON null, want an object`,
		`{"tasks":null}`:                                   `field "tasks": got a JSON null, want an array`,
		`{"tasks":[{"identifier":"a"},{"priority":null}]}`: `field "tasks[1].priority": got a JSON null`,
		`{"tasks":[{"identifier":"a"},null]}`:              `field "tasks[1]": got a JSON null, want an object`,
		`{"keys":["a",null]}`:                              `field "keys[1]": got a JSON null, want a string`,
		// what reads null itself, and a field of an embedded struct
		`{"inputs":[1,null],"any":null}`: "",
		`{"reference":null}`:             `field "reference": got a JSON null, want a string`,
		`{"labels":{"a":null}}`:          `field "labels.a": got a JSON null`,
	} {
		var v task
		err := wire.DecodeObject([]byte(text), &v)
		switch {
		case fragment == "" && err != nil:
			t.Errorf("DecodeObject(%s) = %v, want nil", text, err)
		case fragment != "" && (err == nil || !strings.Contains(err.Error(), fragment)):
			t.Errorf("DecodeObject(%s) = %v, want an error mentioning %q", text, err, fragment)
		}
	}
}

// TestDecodeObjectMalformedArray: a byte the JSON decoder refuses inside an array (which
// it leaves unread) ends the search for fields given twice; it made that search ask for
// the array's next value forever, holding a request's goroutine on a core (found by
// FuzzDecodeCancel). The decoder's error names the byte and its offset.
func TestDecodeObjectMalformedArray(t *testing.T) {
	t.Parallel()
	for _, text := range []string{`[:`, `[,`, `{"tasks":[:]}`, `{"tasks":[{"identifier":"a"},]}`, `{"by":[1:]}`, `{"tasks":[[[,`} {
		done := make(chan error, 1)
		go func() {
			var v struct {
				Tasks []struct {
					Identifier string `json:"identifier"`
				} `json:"tasks"`
			}
			done <- wire.DecodeObject([]byte(text), &v)
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "invalid character") {
				t.Errorf("DecodeObject(%q) = %v, want an error naming the invalid character", text, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("DecodeObject(%q) has not returned after 10 s", text)
		}
	}
}

// FuzzDecodeObject checks DecodeObject against encoding/json on any body: it returns
// (a malformed array made it spin, TestDecodeObjectMalformedArray), it accepts only what
// encoding/json accepts too, and what it accepts has no field given twice outside an
// input.
func FuzzDecodeObject(f *testing.F) {
	for _, seed := range []string{`{"identifier":"a"}`, `{"tasks":[{"identifier":"a"},{"identifier":"b"}]}`,
		`{"identifier":"a","identifier":"b"}`, `{"input":{"x":1,"x":2}}`, `[:`, `{"tasks":[,]}`, `{"tasks":[[[`, ``} {
		f.Add([]byte(seed))
	}
	type task struct {
		Identifier string          `json:"identifier"`
		Input      json.RawMessage `json:"input"`
		Tasks      []task          `json:"tasks"`
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got task
		if err := wire.DecodeObject(body, &got); err != nil {
			return
		}
		var want task
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("DecodeObject accepted %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeObject(%q) = %+v, encoding/json %+v", body, got, want)
		}
	})
}

// TestDecodeObjectDeepNesting: a body of deeply nested arrays, in an input or anywhere
// else, is refused as encoding/json refuses it, without the memory its depth squared: the
// search for fields given twice built each level's path as a string of its own, all kept
// until the walk returned (1.5 GB for a body of 32 KB, a crash of the server at 100 KB).
func TestDecodeObjectDeepNesting(t *testing.T) {
	const depth = 20_000
	deep := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	type task struct {
		Identifier string          `json:"identifier"`
		Input      json.RawMessage `json:"input"`
		Tasks      []task          `json:"tasks"`
	}
	for _, text := range []string{`{"identifier":"a","input":` + deep + `}`, `{"tasks":` + deep + `}`, deep} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var v task
		err := wire.DecodeObject([]byte(text), &v)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "exceeded max depth") {
			t.Errorf("DecodeObject(%.40s…) = %v, want encoding/json's error on the depth", text, err)
		}
		if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 64<<20 {
			t.Errorf("DecodeObject(%.40s…) allocated %d MB, want less than 64", text, allocated>>20)
		}
	}
	// as deep as encoding/json goes, a field given twice after it is still found
	var at task
	edge := `{"identifier":"a","input":` + strings.Repeat("[", 9999) + "0" + strings.Repeat("]", 9999) + `,"identifier":"b"}`
	if err := wire.DecodeObject([]byte(edge), &at); err == nil || !strings.Contains(err.Error(), `field "identifier" is given twice`) {
		t.Errorf("DecodeObject of 9 999 arrays then a field given twice = %v, want the field refused", err)
	}
	// a path is still named in full when a field is given twice below arrays
	var v task
	err := wire.DecodeObject([]byte(`{"tasks":[{"identifier":"a"},{"tasks":[{"identifier":"b","identifier":"c"}]}]}`), &v)
	if err == nil || !strings.Contains(err.Error(), `tasks[1]: tasks[0]: field "identifier" is given twice`) {
		t.Errorf("DecodeObject = %v, want the error to name tasks[1]: tasks[0]", err)
	}
}
