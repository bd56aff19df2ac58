package logbuf

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "writer=%d line=%d\n", i, j)
			}
		})
	}
	wg.Wait()
	if n := len(b.Lines()); n != 800 {
		t.Fatalf("Lines() = %d lines, want 800", n)
	}
	if got := b.Lines("writer=3", "line=42"); !slices.Equal(got, []string{"writer=3 line=42"}) {
		t.Errorf(`Lines("writer=3", "line=42") = %q`, got)
	}
	if got := b.Lines("writer=9"); len(got) != 0 {
		t.Errorf(`Lines("writer=9") = %q, want none`, got)
	}
}
