package docker_test

import (
	"testing"

	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

// BenchmarkStart measures Start to the agent's first connection, the
// sandbox self-check included.
func BenchmarkStart(b *testing.B) {
	cli := runtimetest.RequireDocker(b)
	image := runtimetest.AgentImage(b, cli)
	rt, err := docker.New(b.Context(), docker.Options{Scope: "bench-" + runtimetest.RandomHex(6)})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		runtime.RemoveOrphans(b.Context(), rt, nil)
		rt.Close()
	}()
	runtimetest.BenchStart(b, &runtimetest.Harness{Runtime: rt, Image: image, Listener: runtimetest.NewListener(b)})
}
