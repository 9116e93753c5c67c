package egress_test

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/egress"
)

func TestHello(t *testing.T) {
	t.Parallel()
	t.Run("RoundTripLeavesTheRestUnread", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		h := egress.Hello{SessionID: "s", LeaseToken: "t", Lane: "edge", Origin: egress.OriginProxy, Sources: []string{"web"}}
		if err := egress.WriteHello(&buf, h); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("CONNECT a:1 HTTP/1.1\r\n")
		r := bufio.NewReader(&buf)
		got, err := egress.ReadHello(r)
		if err != nil || got.Lane != "edge" || got.Sources[0] != "web" || got.Builtin() {
			t.Fatalf("ReadHello = %+v, %v", got, err)
		}
		if rest, _ := r.ReadString('\n'); rest != "CONNECT a:1 HTTP/1.1\r\n" {
			t.Errorf("after the hello: %q", rest)
		}
	})
	for name, c := range map[string]struct{ line, want string }{
		"NoToken":       {`{"session_id":"s","origin":"proxy"}`, "no session id or lease token"},
		"UnknownOrigin": {`{"session_id":"s","lease_token":"t","origin":"tool"}`, "unknown origin"},
		"BareBuiltin":   {`{"session_id":"s","lease_token":"t","origin":"builtin:"}`, "unknown origin"},
		"NotJSON":       {`CONNECT a:1 HTTP/1.1`, "not JSON"},
		"TooLong":       {strings.Repeat("x", 20<<10), "too long"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := egress.ReadHello(bufio.NewReader(strings.NewReader(c.line + "\n")))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("ReadHello(%.40q) = %v, want %q", c.line, err, c.want)
			}
		})
	}
}
