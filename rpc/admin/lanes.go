package admin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/rpc/wire"
)

// How lanes and core jobs read, in one home for every front-end that shows
// them: the live progress message in the DM, /status and /cores, and
// choirctl status, session status, session cores and chat. The DM and the
// terminal say the same thing because they say it through these.

// CoreLanePrefix starts the lane name of a core job: "core:<job-name>".
const CoreLanePrefix = "core:"

// CoreJobName returns the job name of a core job's lane.
func CoreJobName(lane string) (string, bool) {
	name, ok := strings.CutPrefix(lane, CoreLanePrefix)
	if !ok || name == "" {
		return "", false
	}
	return name, true
}

// coreDone are the core job states in which a job no longer runs (spec
// 7.3), with the unprefixed spellings of older agents; an idle lane has no
// job either.
var coreDone = []string{"CORE_COMPLETED", "CORE_TERMINATED", "CORE_IDLE", "COMPLETED", "TERMINATED", "IDLE"}

// CoreDone reports whether a core job in state runs no more.
func CoreDone(state string) bool { return slices.Contains(coreDone, state) }

// CoreDoneStates lists the states CoreDone holds for.
func CoreDoneStates() []string { return slices.Clone(coreDone) }

// stateWords are the lane states whose plain reading is not their name.
var stateWords = map[string]string{
	"CORE_INITIALIZING": "starting",
	"CORE_WAITING_TOOL": "waiting for a tool",
	"EDGE_WAITING_TOOL": "waiting for a tool",
}

// StateText reads a lane state: CORE_REASONING is "reasoning",
// CORE_WAITING_TOOL "waiting for a tool".
func StateText(state string) string {
	if w, ok := stateWords[state]; ok {
		return w
	}
	for _, p := range []string{"CORE_", "EDGE_", "SYSTEM_"} {
		state = strings.TrimPrefix(state, p)
	}
	return strings.ReplaceAll(strings.ToLower(state), "_", " ")
}

// BudgetText reads what is left of a lane's budgets, "43 steps, 120 tool
// calls, 1200000 tokens, 24m10s"; empty when no budget is tracked.
func BudgetText(b wire.Budget) string {
	var parts []string
	if v := b.Steps; v != nil {
		parts = append(parts, plural(*v, "step"))
	}
	if v := b.ToolCalls; v != nil {
		parts = append(parts, plural(*v, "tool call"))
	}
	if v := b.Tokens; v != nil {
		parts = append(parts, plural(*v, "token"))
	}
	if v := b.TimeMS; v != nil {
		parts = append(parts, (time.Duration(*v) * time.Millisecond).Round(time.Second).String())
	}
	return strings.Join(parts, ", ")
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// LaneHeadline reads a lane's state, steps taken and skill: "reasoning,
// 7 steps, skill deploy at build"; a finished core job's reads "completed
// after 7 steps".
func LaneHeadline(l LaneStatus) string {
	var b strings.Builder
	b.WriteString(StateText(l.State))
	switch {
	case l.Steps > 0 && CoreDone(l.State):
		b.WriteString(" after " + plural(l.Steps, "step"))
	case l.Steps > 0:
		b.WriteString(", " + plural(l.Steps, "step"))
	}
	if l.Skill != "" {
		b.WriteString(", skill " + l.Skill)
		if l.Step != "" {
			b.WriteString(" at " + l.Step)
		}
	} else if l.Step != "" {
		b.WriteString(", at " + l.Step)
	}
	return b.String()
}

// ProgressLines is a core job's live progress, as its message in the DM
// shows it: the job and its headline, its last progress line, and the
// budgets it has left.
func ProgressLines(name string, l LaneStatus) []string {
	lines := []string{"Core job " + name + ": " + LaneHeadline(l)}
	if p := strings.TrimSpace(l.Progress); p != "" {
		lines = append(lines, "Last: "+p)
	}
	if bud := BudgetText(l.BudgetRemaining); bud != "" {
		lines = append(lines, "Budget left: "+bud)
	}
	return lines
}

// InterruptedLines is the progress of a core job whose agent stopped
// before the job ended (why: "the agent crashed"), as its message in the
// DM is left: the job, how far it got and its last progress line, and
// that a restart resumes it. l may be zero when the job's state is not
// known.
func InterruptedLines(name string, l LaneStatus, why string) []string {
	head := "Core job " + name + ": interrupted"
	if l.Steps > 0 {
		head += " after " + plural(l.Steps, "step")
	}
	lines := []string{head + ": " + why + " before it finished"}
	if p := strings.TrimSpace(l.Progress); p != "" {
		lines = append(lines, "Last: "+p)
	}
	return append(lines, "Restarting the agent resumes it where it stopped.")
}

// ProgressLine is ProgressLines on one line, for a terminal: newlines in
// the progress text become spaces.
func ProgressLine(name string, l LaneStatus) string {
	return strings.Join(strings.Fields(strings.Join(ProgressLines(name, l), " | ")), " ")
}
