package main

// faultHook is told the fault points of every call with side effects
// (agent.Options.Fault). It is nil in every build but the kill-anywhere
// suite's (build tag choirfault, fault_choirfault.go): a production agent
// has no way to be held at a point.
var faultHook func(point, toolName, callID string)

// setFaultDir tells the suite's hold where its files are: beside the
// workspace, out of the tools' reach.
func setFaultDir(workspace string) { setFaultDirFunc(workspace) }

var setFaultDirFunc = func(string) {}
