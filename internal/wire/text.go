package wire

import (
	"fmt"
	"strconv"
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
