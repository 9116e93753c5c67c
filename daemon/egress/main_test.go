package egress_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no tunnel, hello or proxy goroutine outlives the
// tests: a stopped gateway closes its tunnels.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
