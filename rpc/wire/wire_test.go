package wire

import (
	"errors"
	"fmt"
	"testing"
)

func TestAsError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		code Code
		ok   bool
	}{
		{"DirectError", Errorf(CodeConflict, "x"), CodeConflict, true},
		{"WrappedError", fmt.Errorf("ctx: %w", Errorf(CodeNotFound, "x")), CodeNotFound, true},
		{"WrappedSentinel", fmt.Errorf("approval 7: %w", ErrNotFound), CodeNotFound, true},
		{"PlainError", errors.New("disk full"), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, ok := AsError(c.err)
			if ok != c.ok || (ok && e.Code != c.code) {
				t.Errorf("got %v %v", e, ok)
			}
		})
	}
	for code, i := range codes {
		if !errors.Is(&Error{Code: code}, i.sentinel) {
			t.Errorf("%s does not match its sentinel", code)
		}
	}
}
