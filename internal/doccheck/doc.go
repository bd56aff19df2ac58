// Package doccheck holds the repository's documentation tests: every exported
// identifier of a public package has a doc comment (TestExportedIdentifiersAreDocumented),
// go doc names no document outside the repository, and the Go snippets of docs/ are
// the source of tests and examples that the Go tool compiles and runs
// (TestLibraryPageSnippets). It has no code of its own.
package doccheck
