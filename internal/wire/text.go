package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// CheckText refuses JSON text that encoding/json would decode into other characters than
// it holds: bytes that are not UTF-8, and \u escapes of half a UTF-16 surrogate pair.
// encoding/json turns both into U+FFFD silently; pgtask refuses them instead, so that
// what is stored is what was sent. The error names the byte offset.
func CheckText(b []byte) error {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n <= 1 {
				return fmt.Errorf("the JSON is not valid UTF-8: byte %d (0x%02x)", i, b[i])
			}
			i += n
		}
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		i++ // the escaped character; a \\ pair is skipped whole
		if i >= len(b) || b[i] != 'u' {
			continue
		}
		r, ok := hex4(b, i+1)
		if !ok || !utf16.IsSurrogate(r) {
			continue // not a surrogate; malformed escapes are the decoder's to report
		}
		if r < 0xdc00 { // a high surrogate must be followed by a low one
			if low, ok := hex4(b, i+7); ok && i+6 < len(b) && b[i+5] == '\\' && b[i+6] == 'u' && low >= 0xdc00 && low <= 0xdfff {
				i += 10
				continue
			}
		}
		return fmt.Errorf("the JSON has an unpaired UTF-16 surrogate \\u%04x at byte %d: it encodes no character", r, i-1)
	}
	return nil
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	if err != nil {
		return 0, false
	}
	return rune(n), true
}

// DecodeObject decodes the JSON object body into v as the REST API, the dashboard and
// the CLI's JSON lines read one: text as CheckText wants it, no field v lacks, no field
// twice (encoding/json keeps the last one silently), and nothing after the object. The
// fields of a task's "input", which is stored as the text it is, are not looked into.
// Its errors name the field or the byte offset rather than Go types.
func DecodeObject(body []byte, v any) error {
	if err := CheckText(body); err != nil {
		return err
	}
	if err := checkFieldsOnce(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// checkFieldsOnce refuses an object of body (outside an "input") that has a field twice.
// Malformed JSON passes: the decoder reports it with its offset.
func checkFieldsOnce(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// A token the decoder refuses is not consumed: More would go on seeing it, so the
	// walk ends there (errMalformed) rather than asking again forever.
	errMalformed := errors.New("malformed")
	var value func(path string, look bool) error
	value = func(path string, look bool) error {
		tok, err := dec.Token()
		if err != nil {
			return errMalformed
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return errMalformed
				}
				// encoding/json matches a field's name whatever its case: "Identifier"
				// after "identifier" would replace it too
				key, _ := tok.(string)
				if look && seen[strings.ToLower(key)] {
					return fmt.Errorf("%sfield %q is given twice", path, key)
				}
				seen[strings.ToLower(key)] = true
				if err := value(fmt.Sprintf("%s%s: ", path, key), look && !strings.EqualFold(key, "input")); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := value(fmt.Sprintf("%s[%d]: ", strings.TrimSuffix(path, ": "), i), look); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		}
		return nil
	}
	if err := value("", true); err != errMalformed {
		return err
	}
	return nil
}

// jsonError rewrites encoding/json's errors for people.
func jsonError(err error) error {
	var (
		syntax    *json.SyntaxError
		typeError *json.UnmarshalTypeError
	)
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("the body is empty: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("malformed JSON: unexpected end of the body")
	case errors.As(err, &syntax):
		return fmt.Errorf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typeError):
		if typeError.Field == "" {
			return fmt.Errorf("the body is a JSON %s: want a JSON object", typeError.Value)
		}
		return fmt.Errorf("field %q: got a JSON %s, want %s", typeError.Field, typeError.Value, jsonKind(typeError.Type.Kind().String()))
	}
	// DisallowUnknownFields reports `json: unknown field "name"`.
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(kind string) string {
	switch {
	case kind == "int16":
		return "an integer from -32768 to 32767"
	case strings.HasPrefix(kind, "int"):
		return "an integer"
	case kind == "string":
		return "a string"
	case kind == "bool":
		return "true or false"
	case kind == "slice":
		return "an array"
	case kind == "struct":
		return "an object"
	}
	return kind
}
