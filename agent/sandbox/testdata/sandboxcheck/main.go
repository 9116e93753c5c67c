// Command sandboxcheck runs the agent's sandbox self-check and prints the
// report as JSON; it exits 0 when every check passes and 3 otherwise. The
// package's tests run it inside real containers.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/choirhq/choir/agent/sandbox"
)

func main() {
	r := sandbox.Run(sandbox.DefaultProbe())
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(2)
	}
	if err := r.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
}
