package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// This file holds the mandatory report of an ended core job.
//
// The report is the lane's template, not a model call: it must reach the
// user for every job, however the job ended, and a model call can fail,
// be rate-limited or time out exactly when things go wrong; the result it
// carries was already written by the flagship model. It names the job, its
// outcome, the final (or last partial) result and the budgets used.

// maxReportResult bounds the result quoted in a report.
const maxReportResult = 6000

// reportText words a job's end for the user.
func reportText(st coreStopped) string {
	var b strings.Builder
	u := st.Used
	spent := fmt.Sprintf("%d steps, %d tool calls, %d tokens, %s", u.Steps, u.ToolCalls, u.Tokens,
		(time.Duration(u.WallMS) * time.Millisecond).Round(100*time.Millisecond))
	switch {
	case st.Error == nil:
		fmt.Fprintf(&b, "Core job %q completed (%s).", st.JobName, spent)
	case st.Error.Kind == errKindBudget:
		fmt.Fprintf(&b, "Core job %q was stopped: budget exceeded, %s (%s).", st.JobName, st.Error.Message, spent)
	case st.Error.Kind == errKindCancelled:
		fmt.Fprintf(&b, "Core job %q was cancelled: %s (%s).", st.JobName, st.Error.Message, spent)
	case st.Error.Kind == errKindEdgeEnded:
		fmt.Fprintf(&b, "Core job %q was stopped because %s (%s).", st.JobName, st.Error.Message, spent)
	default:
		fmt.Fprintf(&b, "Core job %q failed: %s (%s).", st.JobName, st.Error.Message, spent)
	}
	if len(st.FinalResult) > 0 {
		b.WriteString("\n\nResult:\n" + clipText(resultText(st.FinalResult), maxReportResult))
	} else if st.PartialResult != "" {
		b.WriteString("\n\nLast partial result:\n" + clipText(st.PartialResult, maxReportResult))
	}
	return b.String()
}

// resultText shows a final result: a string as it is, anything else as
// indented JSON.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStartByte(s[n]) {
		n--
	}
	return s[:n] + "\n[… clipped]"
}
