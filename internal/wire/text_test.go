package wire_test

import (
	"encoding/json"
	"strings"
	"testing"

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
