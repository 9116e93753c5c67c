package proc

import (
	"strings"
	"testing"
)

func TestHeadTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limit  int
		writes []string
		want   string
	}{
		{"FitsWhole", 10, []string{"abc", "def"}, "abcdef"},
		{"ExactlyFull", 6, []string{"abc", "def"}, "abcdef"},
		{"KeepsHeadAndTail", 6, []string{"abcdefghij"}, "abc\n[... 4 bytes not kept ...]\nhij"},
		{"TailRotatesAcrossWrites", 6, []string{"ab", "cd", "ef", "gh", "ij", "k"}, "abc\n[... 5 bytes not kept ...]\nijk"},
		{"HugeWrite", 4, []string{"1", "23456789"}, "12\n[... 5 bytes not kept ...]\n89"},
		{"ManySmallWrites", 4, strings.Split("0123456789", ""), "01\n[... 6 bytes not kept ...]\n89"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := NewHeadTail(tt.limit)
			for _, w := range tt.writes {
				if n, err := h.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := h.Text(); got != tt.want {
				t.Errorf("Text() = %q, want %q", got, tt.want)
			}
		})
	}
}
