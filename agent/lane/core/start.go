package core

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// This file holds the contracts between the edge and its core jobs (spec
// 12.7, 12.8): the CoreJobStart the edge curates, the lane tools the edge
// uses to spawn, steer and stop jobs, and the one a job uses to report.

// JobStart is the CoreJobStart of spec 12.7, the edge's curated briefing
// of a job: never the user's raw words, only what the job needs.
type JobStart struct {
	JobID           string          `json:"job_id"`
	JobName         string          `json:"job_name"`
	TaskSpec        string          `json:"task_spec"`
	ContextBundle   ContextBundle   `json:"context_bundle"`
	ToolConstraints ToolConstraints `json:"tool_constraints"`
	// OutputSchema, when set, is the JSON Schema the final result must
	// satisfy.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Verbosity is brief, normal or detailed: how much the job reports.
	Verbosity string `json:"verbosity"`
}

// ContextBundle is the context the edge hands a job.
type ContextBundle struct {
	Facts       []string `json:"facts"`
	Excerpts    []string `json:"excerpts"`
	Constraints []string `json:"constraints"`
}

// ToolConstraints narrow a job's tools and time.
type ToolConstraints struct {
	// AllowedTools, when not empty, are the only tools the job may call.
	AllowedTools []string `json:"allowed_tools"`
	// TimeBudgetMS, when positive, bounds the job's wall time below the
	// session's per_job_wall_time.
	TimeBudgetMS int64 `json:"time_budget_ms"`
}

// The edge's and the core's lane tools.
const (
	coreSpawnTool  = "choir.core.spawn"
	coreInjectTool = "choir.core.inject"
	coreCancelTool = "choir.core.cancel"
	coreListTool   = "choir.core.list"
	coreReportTool = "choir.core.report"
)

// maxTaskBytes bounds a task_spec, a context item and an injection.
const maxTaskBytes = 16 << 10

var (
	spawnParams = json.RawMessage(`{"type":"object","properties":{
"job_name":{"type":"string","pattern":"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$","description":"Short unique name the user can refer to, e.g. refactor-auth."},
"task_spec":{"type":"string","minLength":1,"maxLength":16384,"description":"Clear, actionable instruction written by you, never the user's raw message."},
"context_bundle":{"type":"object","additionalProperties":false,"properties":{
"facts":{"type":"array","items":{"type":"string","maxLength":16384}},
"excerpts":{"type":"array","items":{"type":"string","maxLength":16384}},
"constraints":{"type":"array","items":{"type":"string","maxLength":16384}}}},
"tool_constraints":{"type":"object","additionalProperties":false,"properties":{
"allowed_tools":{"type":"array","items":{"type":"string"},"description":"Only these tools; omit or leave empty for all."},
"time_budget_ms":{"type":"integer","minimum":0,"description":"Wall-time limit; 0 for the session's default."}}},
"output_schema":{"type":["object","string"],"description":"JSON Schema the final result must satisfy (optional)."},
"verbosity":{"type":"string","enum":["brief","normal","detailed"]}},
"required":["job_name","task_spec"],"additionalProperties":false}`)
	jobNameParams = `{"type":"object","properties":{"job_name":{"type":"string","minLength":1}},"required":["job_name"],"additionalProperties":false}`
	injectParams  = json.RawMessage(`{"type":"object","properties":{"job_name":{"type":"string","minLength":1},
"content":{"type":"string","minLength":1,"maxLength":16384,"description":"The instruction, applied at the job's next safe point."}},
"required":["job_name","content"],"additionalProperties":false}`)
	reportParams = json.RawMessage(`{"type":"object","properties":{
"kind":{"type":"string","enum":["progress","plan","thought_summary","tool_proposal","need_info","partial_result"]},
"text":{"type":"string","minLength":1,"maxLength":4000,"description":"One short line for progress; the artifact for partial_result; what is missing for need_info."},
"data":{"description":"Optional structured detail: plan steps, percent done, the tool and arguments of a proposal."}},
"required":["kind","text"],"additionalProperties":false}`)
)

// laneSchemas are the compiled parameter schemas of the lane tools.
var laneSchemas = func() map[string]*jsonschema.Schema {
	out := map[string]*jsonschema.Schema{}
	for name, raw := range map[string]json.RawMessage{coreSpawnTool: spawnParams, coreInjectTool: injectParams,
		coreCancelTool: json.RawMessage(jobNameParams), coreListTool: json.RawMessage(`{"type":"object","additionalProperties":false}`),
		coreReportTool: reportParams} {
		sch, err := tool.CompileSchema(name, raw)
		if err != nil {
			panic(fmt.Sprintf("lane tool %s: %v", name, err))
		}
		out[name] = sch
	}
	return out
}()

// edgeCoreTools are the core-job tools offered to the edge.
func edgeCoreTools() []llm.ToolSpec {
	return []llm.ToolSpec{
		{Name: coreSpawnTool, Parameters: spawnParams, Description: "Start a named core job on the flagship model for " +
			"complex, multi-step work. It runs in the background; you keep talking with the user and get its report when it ends."},
		{Name: coreInjectTool, Parameters: injectParams, Description: "Add an instruction to a running core job by name."},
		{Name: coreCancelTool, Parameters: json.RawMessage(jobNameParams), Description: "Cancel a running core job by name."},
		{Name: coreListTool, Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
			Description: "List the running core jobs: name, state, steps and last progress."},
	}
}

// decodeLaneInput validates a lane tool's input against its schema and
// decodes it into v.
func decodeLaneInput(name string, input json.RawMessage, v any) error {
	if len(bytes.TrimSpace(input)) == 0 {
		input = json.RawMessage(`{}`)
	}
	if err := tool.ValidateInput(name, laneSchemas[name], input); err != nil {
		return err
	}
	return json.Unmarshal(input, v)
}

// parseCoreJobStart validates a spawn's input and returns the job's start,
// naming every problem. exposed tells whether a tool may be offered to a
// core job.
func parseCoreJobStart(input json.RawMessage, exposed func(string) bool) (JobStart, error) {
	var s JobStart
	var problems []string
	if err := decodeLaneInput(coreSpawnTool, input, &s); err != nil {
		// The checks below still run on what decodes, so that every
		// problem is named at once.
		problems = append(problems, err.Error())
		s = JobStart{}
		if json.Unmarshal(input, &s) != nil {
			return s, err
		}
	}
	if !rpc.ValidLane("core:" + s.JobName) {
		problems = append(problems, fmt.Sprintf("job_name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", s.JobName))
	}
	if strings.TrimSpace(s.TaskSpec) == "" {
		problems = append(problems, "task_spec is blank: write the task the job must do")
	}
	for _, t := range s.ToolConstraints.AllowedTools {
		if t == coreReportTool {
			continue
		}
		if !exposed(t) {
			problems = append(problems, fmt.Sprintf("allowed_tools: %q is not a tool core jobs can use", t))
		}
	}
	if len(s.OutputSchema) > 0 {
		raw := s.OutputSchema
		var text string
		if json.Unmarshal(raw, &text) == nil {
			raw = json.RawMessage(text) // a schema sent as a JSON string
		}
		if _, err := tool.CompileSchema("output", raw); err != nil {
			problems = append(problems, fmt.Sprintf("output_schema is not a usable JSON Schema: %v", err))
		} else {
			s.OutputSchema = slices.Clip(raw)
		}
	}
	if s.Verbosity == "" {
		s.Verbosity = "normal"
	}
	if len(problems) > 0 {
		return s, errors.New(strings.Join(problems, "; "))
	}
	s.JobID = newJobID()
	return s, nil
}

func newJobID() string {
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// compiledOutputSchema compiles the job's output schema, nil when it has
// none. parseCoreJobStart has checked that it compiles.
func (s JobStart) compiledOutputSchema() *jsonschema.Schema {
	if len(s.OutputSchema) == 0 {
		return nil
	}
	sch, err := tool.CompileSchema("output-"+s.JobName, s.OutputSchema)
	if err != nil {
		return nil
	}
	return sch
}

// render is the briefing as the job's model reads it.
func (s JobStart) render() string {
	b, _ := json.MarshalIndent(s, "", "  ")
	return "Your task, from the edge lane (CoreJobStart):\n" + string(b)
}
