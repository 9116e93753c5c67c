// Command choir-agent is the agent runtime that runs inside each agent's
// container. Its runtime (arbiter, lanes, tools) is built under agent/; until
// the protocol and runtime land, this binary only reports that it cannot run.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "choir-agent: the agent runtime is not available in this build yet")
	os.Exit(1)
}
