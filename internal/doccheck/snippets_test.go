package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// libraryPage is the Go library page, relative to the repository's root.
const libraryPage = "docs/library.md"

// codeMarker precedes each Go snippet of the page: the test file and the top-level
// declaration the snippet is, or whose body it is.
var codeMarker = regexp.MustCompile(`^<!-- code: (\S+_test\.go) (\w+) -->$`)

// snippet is one fenced go block of the page.
type snippet struct {
	line       int
	file, name string
	text       string
}

// pageSnippets returns the go blocks of a Markdown page with their markers, failing
// the test on a block without one or a marker without a block.
func pageSnippets(t *testing.T, page string) []snippet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out    []snippet
		marker []string
		cur    *snippet
		body   []string
		inside bool // in a fence of another language
	)
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil:
			if trimmed == "```" {
				cur.text = strings.Join(body, "\n")
				out = append(out, *cur)
				cur = nil
				continue
			}
			body = append(body, line)
		case inside:
			inside = trimmed != "```"
		case trimmed == "```go":
			if marker == nil {
				t.Errorf("%s:%d: a go block without a <!-- code: FILE_test.go NAME --> marker before it", page, n)
				marker = []string{"", ""}
			}
			cur, body = &snippet{line: n, file: marker[0], name: marker[1]}, nil
			marker = nil
		case strings.HasPrefix(trimmed, "```"):
			inside = true
			if marker != nil {
				t.Errorf("%s:%d: a code marker before a block that is not go", page, n)
				marker = nil
			}
		case codeMarker.MatchString(trimmed):
			marker = codeMarker.FindStringSubmatch(trimmed)[1:]
		case strings.HasPrefix(trimmed, "<!-- code"):
			t.Errorf("%s:%d: malformed code marker %q (want <!-- code: FILE_test.go NAME -->)", page, n, trimmed)
		case trimmed != "" && marker != nil:
			t.Errorf("%s:%d: a code marker not directly followed by a go block", page, n)
			marker = nil
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: code block never closed", page, cur.line)
	}
	return out
}

// declarationTexts returns the source of the top-level declaration name in file (without
// its doc comment) and, for a function, its body without the braces and one level of
// indentation.
func declarationTexts(file, name string) ([]string, error) {
	src, err := os.ReadFile(filepath.Join(moduleRoot, file))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	text := func(from, to token.Pos) string {
		return string(src[fset.Position(from).Offset:fset.Position(to).Offset])
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != name || d.Recv != nil {
				continue
			}
			body := text(d.Body.Lbrace+1, d.Body.Rbrace)
			var lines []string
			for _, l := range strings.Split(strings.Trim(body, "\n"), "\n") {
				lines = append(lines, strings.TrimPrefix(l, "\t"))
			}
			return []string{text(d.Pos(), d.End()), strings.Join(lines, "\n")}, nil
		case *ast.GenDecl:
			for _, s := range d.Specs {
				var id *ast.Ident
				switch s := s.(type) {
				case *ast.TypeSpec:
					id = s.Name
				case *ast.ValueSpec:
					id = s.Names[0]
				}
				if id != nil && id.Name == name {
					return []string{text(d.Pos(), d.End())}, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%s declares no %s", file, name)
}

// TestLibraryPageSnippets makes the Go snippets of docs/library.md true: each is a
// declaration of a test file (an example, a test, or what they use), or the body of one,
// so that go test compiles it (examples with an Output comment and tests also run).
func TestLibraryPageSnippets(t *testing.T) {
	t.Parallel()
	snippets := pageSnippets(t, libraryPage)
	if len(snippets) < 8 {
		t.Errorf("%s has %d go snippets; the page walks from go get to metrics and tests", libraryPage, len(snippets))
	}
	for _, s := range snippets {
		if s.file == "" {
			continue
		}
		texts, err := declarationTexts(s.file, s.name)
		if err != nil {
			t.Errorf("%s:%d: %v", libraryPage, s.line, err)
			continue
		}
		found := false
		for _, text := range texts {
			found = found || strings.TrimSpace(text) == strings.TrimSpace(s.text)
		}
		if !found {
			t.Errorf("%s:%d: the snippet is not %s of %s, nor its body: copy it from there\n--- snippet\n%s\n--- %s\n%s",
				libraryPage, s.line, s.name, s.file, s.text, s.name, texts[0])
		}
	}
}

// TestSnippetCheckFindsDifferences makes sure the snippet check fails on a snippet that
// differs from its source.
func TestSnippetCheckFindsDifferences(t *testing.T) {
	t.Parallel()
	texts, err := declarationTexts("internal/doccheck/snippets_test.go", "TestSnippetCheckFindsDifferences")
	if err != nil || len(texts) != 2 {
		t.Fatalf("texts %d, %v", len(texts), err)
	}
	if !strings.HasPrefix(texts[0], "func TestSnippetCheckFindsDifferences(t *testing.T) {") || !strings.HasPrefix(texts[1], "t.Parallel()\n") {
		t.Errorf("declaration %q\nbody %q", texts[0], texts[1])
	}
	if _, err := declarationTexts("internal/doccheck/snippets_test.go", "NoSuchThing"); err == nil {
		t.Error("a missing declaration was found")
	}
}
