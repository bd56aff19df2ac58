package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// The CLI prints what the database holds (identifiers, inputs, outputs, errors, topic
// names, who cancelled), which anyone who can push a task wrote. A terminal acts on
// some characters instead of showing them: ESC starts sequences that clear the screen,
// retitle the window or rewrite the clipboard, CR and backspace overwrite what was
// printed, C1 controls and bidirectional overrides reorder it. The CLI therefore shows
// those characters as escapes (\x1b, \r, \u009b, \u202e) and bytes that are not UTF-8
// as \xff; --raw prints the stored bytes unchanged, for piping into other programs.

// dangerous reports whether a terminal may act on r rather than show it: C0 controls
// (but tab and newline, which lines keeps), DEL, C1 controls, the bidirectional
// controls, and the Unicode line and paragraph separators.
func dangerous(r rune, lines bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !lines
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidirectional marks, embeddings, overrides and isolates
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// escape returns s with every dangerous character written as an escape and every byte
// that is not UTF-8 as \xNN. With lines, newlines and tabs stay as they are (a task's
// input shown as a block); without, they are escaped too (a table cell, one line).
func escape(s string, lines bool) string {
	if !needsEscape(s, lines) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !dangerous(r, lines):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string, lines bool) bool {
	for _, r := range s {
		if r == utf8.RuneError || dangerous(r, lines) {
			return true // RuneError: a byte that is not UTF-8, or U+FFFD itself (left as is)
		}
	}
	return false
}

// printer prints the database's text for one command: escaped, or raw with --raw.
type printer struct{ raw bool }

// rawFlag registers --raw and returns the command's printer, set once flags are parsed.
func (f *flags) rawFlag() *printer {
	p := &printer{}
	f.BoolVar(&p.raw, "raw", false, "print text from the database as stored, control characters included\n(for piping; the default shows them as escapes such as \\x1b)")
	return p
}

// cell is s for one line of output (a table cell, a field).
func (p *printer) cell(s string) string {
	if p.raw {
		return s
	}
	return escape(s, false)
}

// block is s for several lines of output: newlines and tabs kept.
func (p *printer) block(s string) string {
	if p.raw {
		return s
	}
	return escape(s, true)
}

// json writes v as indented JSON. encoding/json already escapes C0 controls; unless
// raw, the other dangerous characters are written as \u escapes too, which any JSON
// reader decodes back to the same text.
func (p *printer) json(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	out := buf.Bytes()
	if !p.raw {
		out = escapeJSON(out)
	}
	_, err := w.Write(out)
	return err
}

// escapeJSON rewrites the dangerous characters of encoded JSON as \u escapes. Outside
// strings JSON is ASCII, so every one of them is inside a string, where an escape means
// the same character.
func escapeJSON(b []byte) []byte {
	if !needsEscape(string(b), true) {
		return b
	}
	var out bytes.Buffer
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError && dangerous(r, true) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.Write(b[i : i+n])
		}
		i += n
	}
	return out.Bytes()
}
