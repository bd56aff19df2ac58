package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the repository's root, relative to this package's directory (go test's
// working directory).
const moduleRoot = "../.."

// publicPackages lists the directories of the packages a program outside the module can
// import: every package of the module but the commands (cmd/), internal/ (the compiler
// refuses it outside the module), testdata, and db/, which sqlc generates and only
// package repository imports (its types never appear in a public signature).
func publicPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(moduleRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(moduleRoot, path)
		if err != nil {
			return err
		}
		switch {
		case rel == ".":
			return nil
		case strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "internal",
			rel == "cmd", rel == "db", rel == "tools", rel == "bench", rel == "docs":
			return filepath.SkipDir
		}
		files, err := goFiles(path)
		if err != nil {
			return err
		}
		if len(files) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// goFiles lists the non-test Go files of dir.
func goFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			files = append(files, filepath.Join(dir, name))
		}
	}
	return files, nil
}

// undocumented lists what go doc would show without a doc comment in the package in dir,
// each as "file:line: what", and doc comments that point outside the repository or at
// unexported code.
func undocumented(t *testing.T, dir string) []string {
	t.Helper()
	files, err := goFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	var problems []string
	report := func(pos token.Pos, format string, args ...any) {
		p := fset.Position(pos)
		rel, _ := filepath.Rel(moduleRoot, p.Filename)
		problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, p.Line, fmt.Sprintf(format, args...)))
	}
	// Unexported methods and fields of each type, so that a doc comment naming one
	// (Processor.vacuum) can be told from one naming exported API.
	hidden := map[string]bool{}
	for _, f := range parsed {
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && !fn.Name.IsExported() {
				hidden[receiverName(fn)+"."+fn.Name.Name] = true
			}
		}
	}
	var docs []*ast.CommentGroup
	hasPackageDoc := false
	for _, f := range parsed {
		if f.Doc != nil {
			hasPackageDoc = true
			docs = append(docs, f.Doc)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !ast.IsExported(receiverName(d))) {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					name = receiverName(d) + "." + name
				}
				switch {
				case d.Doc == nil:
					report(d.Pos(), "%s has no doc comment", name)
				case !startsWith(d.Doc, d.Name.Name):
					report(d.Pos(), "the doc comment of %s does not begin with %q", name, d.Name.Name)
				}
				docs = append(docs, d.Doc)
			case *ast.GenDecl:
				docs = append(docs, d.Doc)
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						doc := s.Doc
						if doc == nil && !d.Lparen.IsValid() {
							doc = d.Doc
						}
						switch {
						case doc == nil:
							report(s.Pos(), "type %s has no doc comment", s.Name.Name)
						case !startsWith(doc, s.Name.Name):
							report(s.Pos(), "the doc comment of type %s does not begin with %q", s.Name.Name, s.Name.Name)
						}
						docs = append(docs, s.Doc)
						docs = append(docs, members(s, report, hidden)...)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() && s.Doc == nil && s.Comment == nil && d.Doc == nil {
								report(n.Pos(), "%s has no doc comment (nor its group)", n.Name)
							}
						}
						docs = append(docs, s.Doc, s.Comment)
					}
				}
			}
		}
	}
	if !hasPackageDoc {
		rel, _ := filepath.Rel(moduleRoot, dir)
		problems = append(problems, fmt.Sprintf("%s: the package has no doc comment", rel))
	}
	for _, doc := range docs {
		if doc == nil {
			continue
		}
		text := doc.Text()
		for _, bad := range outsideReferences.FindAllString(text, -1) {
			report(doc.Pos(), "go doc refers to a document outside the repository: %q", bad)
		}
		for _, m := range selector.FindAllString(text, -1) {
			if hidden[m] {
				report(doc.Pos(), "go doc refers to unexported %s", m)
			}
		}
	}
	return problems
}

// outsideReferences matches references to documents that are not in the repository: the
// specification's sections and its seed documents.
var outsideReferences = regexp.MustCompile(`(?i)(design\s*§\s*\d+(\.\d+)*|§\s*\d+(\.\d+)*|\bdesign\.md\b|\bseeds?/)`)

// selector matches Type.member in doc text.
var selector = regexp.MustCompile(`\b[A-Z]\w*\.[a-z]\w*\b`)

// members checks the exported fields of a struct type and the methods of an interface
// type, and returns their doc comments.
func members(s *ast.TypeSpec, report func(token.Pos, string, ...any), hidden map[string]bool) []*ast.CommentGroup {
	var list *ast.FieldList
	switch tt := s.Type.(type) {
	case *ast.StructType:
		list = tt.Fields
		for _, f := range tt.Fields.List {
			for _, n := range f.Names {
				if !n.IsExported() {
					hidden[s.Name.Name+"."+n.Name] = true
				}
			}
		}
	case *ast.InterfaceType:
		list = tt.Methods
	default:
		return nil
	}
	var docs []*ast.CommentGroup
	for _, f := range list.List {
		if len(f.Names) == 0 {
			continue // embedded: documented where it is declared
		}
		if !slices.ContainsFunc(f.Names, func(n *ast.Ident) bool { return n.IsExported() }) {
			continue // go doc does not show it
		}
		if f.Doc == nil && f.Comment == nil {
			report(f.Pos(), "%s.%s has no doc comment", s.Name.Name, f.Names[0].Name)
		}
		docs = append(docs, f.Doc, f.Comment)
	}
	return docs
}

// receiverName is the name of a method's receiver type, without pointer or type
// parameters.
func receiverName(fn *ast.FuncDecl) string {
	expr := fn.Recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	switch e := expr.(type) {
	case *ast.IndexExpr:
		expr = e.X
	case *ast.IndexListExpr:
		expr = e.X
	}
	if id, ok := expr.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// startsWith reports whether a doc comment begins with name (optionally after "A",
// "An" or "The"), as go doc conventions want.
func startsWith(doc *ast.CommentGroup, name string) bool {
	text := doc.Text()
	for _, article := range []string{"", "A ", "An ", "The "} {
		if rest, ok := strings.CutPrefix(text, article+name); ok && (rest == "" || !isIdentChar(rest[0])) {
			return true
		}
	}
	// Deprecated aliases and the like may open with a notice.
	return strings.HasPrefix(text, "Deprecated:")
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// TestExportedIdentifiersAreDocumented is the doc linter: in every public package, each
// exported type, function, method, constant, variable, struct field and interface method
// has a doc comment (types and functions one that begins with their name), the package
// has a package comment, and no doc comment points at a document outside the repository
// (the specification's sections) or at unexported code.
func TestExportedIdentifiersAreDocumented(t *testing.T) {
	t.Parallel()
	dirs := publicPackages(t)
	for _, want := range []string{"repository", "processor", "metrics", "pgtasktest"} {
		if !slices.Contains(dirs, filepath.Join(moduleRoot, want)) {
			t.Errorf("public package %s not found among %v", want, dirs)
		}
	}
	var all []string
	for _, dir := range dirs {
		all = append(all, undocumented(t, dir)...)
	}
	if len(all) > 0 {
		t.Errorf("%d problems with the documentation of public packages:\n%s", len(all), strings.Join(all, "\n"))
	}
}

// TestLinterFindsWhatIsMissing makes sure the linter itself fails on a package that
// lacks documentation.
func TestLinterFindsWhatIsMissing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "bad")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package bad

// T is documented.
type T struct {
	Field int
	// Documented is.
	Documented int
}

type U int

func (T) Method() {}

// Other does things, see T.hidden and design §4.2.
func Other() {}

func (T) hidden() {}

const C = 1
`
	if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(undocumented(t, dir), "\n")
	for _, want := range []string{
		"T.Field has no doc comment", "type U has no doc comment", "T.Method has no doc comment",
		"C has no doc comment", "the package has no doc comment", `outside the repository: "design §4.2"`,
		"unexported T.hidden",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("linter output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Documented") {
		t.Errorf("linter flagged a documented field:\n%s", got)
	}
}
