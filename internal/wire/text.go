package wire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
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
// A field given as null is refused as a value of the wrong type, since encoding/json
// leaves the field as it was (a setting unchanged, a zero priority), unless its type is
// json.RawMessage (an input, where null is a value) or its tag says `null:"none"` (the
// field reads null itself). Its errors name the field or the byte offset rather than Go
// types.
func DecodeObject(body []byte, v any) error {
	if err := CheckText(body); err != nil {
		return err
	}
	if err := checkFieldsOnce(body); err != nil {
		return err
	}
	if string(bytes.TrimSpace(body)) == "null" {
		// encoding/json takes it as an object of no fields
		return errors.New("the body is a JSON null: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("unexpected data after the JSON object")
	}
	return checkNulls(body, reflect.TypeOf(v))
}

var (
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// checkNulls refuses a null in body (already decoded into a value of type t) for a
// field that does not read it (DecodeObject), and for an element of an array.
func checkNulls(body []byte, t reflect.Type) error {
	return nulls(body, t, "")
}

// takesNull reports whether a value of type t reads a JSON null itself: a
// json.RawMessage (an input), an interface.
func takesNull(t reflect.Type) bool {
	return t == rawMessageType || t.Kind() == reflect.Interface
}

// nulls walks the JSON value raw along its Go type t, decoding only the objects and
// arrays the type has structs or slices for (an input, a json.RawMessage, is not
// parsed again); name is where raw is ("" for the body itself).
func nulls(raw []byte, t reflect.Type, name string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if takesNull(t) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var object map[string]json.RawMessage
		if json.Unmarshal(raw, &object) != nil {
			return nil // not an object: decoded already, so a type that reads it itself
		}
		for _, k := range slices.Sorted(maps.Keys(object)) {
			f, ok := jsonField(t, k)
			if !ok || takesNull(f.Type) {
				continue
			}
			at := k
			if name != "" {
				at = name + "." + k
			}
			if string(bytes.TrimSpace(object[k])) == "null" {
				if f.Tag.Get("null") == "none" {
					continue
				}
				return fmt.Errorf("field %q: got a JSON null, want %s (leave the field out to keep it as it is)", at, wants(f.Type))
			}
			if err := nulls(object[k], f.Type, at); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		var array []json.RawMessage
		if json.Unmarshal(raw, &array) != nil {
			return nil
		}
		elem := t.Elem()
		elemTakesNull := elem.Kind() == reflect.Pointer || takesNull(elem) // a nil element
		for i, e := range array {
			at := fmt.Sprintf("%s[%d]", name, i)
			if string(bytes.TrimSpace(e)) == "null" {
				if elemTakesNull {
					continue
				}
				return fmt.Errorf("field %q: got a JSON null, want %s", at, wants(elem))
			}
			if err := nulls(e, elem, at); err != nil {
				return err
			}
		}
	case reflect.Map:
		var object map[string]json.RawMessage
		if json.Unmarshal(raw, &object) != nil {
			return nil
		}
		elem := t.Elem()
		elemTakesNull := elem.Kind() == reflect.Pointer || takesNull(elem) // a nil value
		for _, k := range slices.Sorted(maps.Keys(object)) {
			at := name + "." + k
			if string(bytes.TrimSpace(object[k])) == "null" {
				if elemTakesNull {
					continue
				}
				return fmt.Errorf("field %q: got a JSON null, want %s", at, wants(elem))
			}
			if err := nulls(object[k], elem, at); err != nil {
				return err
			}
		}
	}
	return nil
}

// jsonField is the field of struct type t that encoding/json decodes the object field
// key into: the one named so exactly, else one whose name matches it whatever the case;
// the fields of an embedded struct without a name of its own count as t's.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var folded *reflect.StructField
	var embedded []reflect.Type // looked into after t's own fields, which win
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			inner := f.Type
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				embedded = append(embedded, inner)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if folded == nil && strings.EqualFold(name, key) {
			folded = &f
		}
	}
	if folded != nil {
		return *folded, true
	}
	for _, inner := range embedded {
		if f, ok := jsonField(inner, key); ok {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// wants names the JSON value a Go type decodes from.
func wants(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return "a string"
	}
	return jsonKind(t.Kind().String())
}

// checkFieldsOnce refuses an object of body (outside an "input") that has a field twice.
// Malformed JSON passes: the decoder reports it with its offset, and so does JSON nested
// deeper than the decoder takes (maxNesting), where the walk stops.
func checkFieldsOnce(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// A token the decoder refuses is not consumed: More would go on seeing it, so the
	// walk ends there (errMalformed) rather than asking again forever.
	errMalformed := errors.New("malformed")
	var value func(at *jsonPath, depth int, look bool) error
	value = func(at *jsonPath, depth int, look bool) error {
		tok, err := dec.Token()
		if err != nil {
			return errMalformed
		}
		if delim, ok := tok.(json.Delim); ok && (delim == '{' || delim == '[') && depth > maxNesting {
			return errMalformed // one container more than encoding/json takes
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
				// after "identifier" would replace it too, as would "inſertion" (a long s)
				key, _ := tok.(string)
				folded := foldKey(key) // "input" folds to "INPUT"
				if look && seen[folded] {
					return fmt.Errorf("%sfield %q is given twice", at, key)
				}
				seen[folded] = true
				if err := value(&jsonPath{parent: at, key: key}, depth+1, look && folded != "INPUT"); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := value(&jsonPath{parent: at, index: i, element: true}, depth+1, look); err != nil {
					return err
				}
			}
			_, _ = dec.Token()
		}
		return nil
	}
	if err := value(nil, 1, true); err != errMalformed {
		return err
	}
	return nil
}

// maxNesting is how deeply encoding/json lets objects and arrays nest (its decoder's
// limit, which its Token method does not apply).
const maxNesting = 10000

// jsonPath is where checkFieldsOnce stands in the body, spelt out only for an error
// ("tasks[1]: "): a string built at each level would make a body of deeply nested
// arrays hold memory growing with the square of its depth.
type jsonPath struct {
	parent  *jsonPath
	key     string
	index   int
	element bool // an array's element (index) rather than an object's field (key)
}

// String is the path followed by ": ", or "" at the top.
func (p *jsonPath) String() string {
	var parts []string
	for ; p != nil; p = p.parent {
		if p.element {
			parts = append(parts, fmt.Sprintf("[%d]", p.index))
		} else {
			parts = append(parts, p.key)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	slices.Reverse(parts)
	var b strings.Builder
	for i, part := range parts {
		if i > 0 && !strings.HasPrefix(part, "[") {
			b.WriteString(": ")
		}
		b.WriteString(part)
	}
	return b.String() + ": "
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
	case kind == "int32":
		return "an integer from -2147483648 to 2147483647"
	case kind == "int64" || kind == "int":
		return "an integer from -9223372036854775808 to 9223372036854775807"
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

// foldKey folds a field's name at least as far as encoding/json does to match it to a
// struct field (an upper case letter for a lower case one, "S" for "ſ" among them), so
// that two names that fill one field fold alike. strings.ToLower left "ſ" (U+017F) and
// "s" apart. A name it folds further (a dotless ı) fills no field: encoding/json refuses
// it as unknown.
func foldKey(key string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, key)
}
