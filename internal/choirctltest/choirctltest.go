// Package choirctltest runs choirctl in process for choird's end-to-end
// tests. It is apart from internal/choirdtest, which choirctl's own tests
// import.
package choirctltest

import (
	"bytes"
	"context"
	"testing"

	"github.com/choirhq/choir/ctl"
)

// Run runs choirctl on home with args, in process, and returns its exit
// code, standard output and standard error.
func Run(t testing.TB, home string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), append([]string{"--home", home}, args...), &out, &errb)
	return code, out.String(), errb.String()
}
