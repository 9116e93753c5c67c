//go:build choirfault

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The kill-anywhere suite's hold (issue 31, item 7), built only with the
// tag choirfault. The suite arms a point by writing "<point> <tool>" to
// the file arm in the fault directory beside the agent's workspace
// (.choir-fault-<workspace name>). An armed agent reaching that point
// writes "<point> <tool> <call id>" to hit and waits until the file go
// appears: the suite kills it there, or kills choird and lets it go on.

func init() { faultHook = holdAt }

// faultDir is the suite's directory for this agent, set in main from the
// workspace.
var faultDir string

func holdAt(point, toolName, callID string) {
	if faultDir == "" {
		return
	}
	armed, err := os.ReadFile(filepath.Join(faultDir, "arm"))
	if err != nil || strings.TrimSpace(string(armed)) != point+" "+toolName {
		return
	}
	os.Remove(filepath.Join(faultDir, "arm"))
	hit := filepath.Join(faultDir, "hit")
	if err := os.WriteFile(hit+".tmp", []byte(fmt.Sprintf("%s %s %s", point, toolName, callID)), 0o644); err != nil {
		return
	}
	os.Rename(hit+".tmp", hit)
	for {
		if _, err := os.Stat(filepath.Join(faultDir, "go")); err == nil {
			os.Remove(filepath.Join(faultDir, "go"))
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func init() {
	setFaultDirFunc = func(ws string) {
		faultDir = filepath.Join(filepath.Dir(filepath.Clean(ws)), ".choir-fault-"+filepath.Base(ws))
	}
}
