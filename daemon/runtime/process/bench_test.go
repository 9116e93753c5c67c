package process_test

import (
	"testing"

	"github.com/choirhq/choir/daemon/runtime/process"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

// BenchmarkStart measures Start to the agent's first connection.
func BenchmarkStart(b *testing.B) {
	rt, err := process.New(process.Options{Binary: runtimetest.BuildAgent(b), StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	runtimetest.BenchStart(b, &runtimetest.Harness{
		Runtime:  rt,
		Listener: runtimetest.NewListener(b),
	})
}
