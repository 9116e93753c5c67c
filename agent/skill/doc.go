// Package skill is the agent's skill engine (spec section 10): skills are
// deterministic state machines that orchestrate a lane's model one phase at
// a time. A skill never owns locks, commits or touches the workspace; it
// only narrows what the model may propose.
//
// # Definitions and loading
//
// A skill is a [Spec] in JSON, parsed strictly ([Parse]) and validated by
// [Compile] against the tool registry. [Load] builds the agent's [Set] from
// the built-in skills embedded in this package (tool-builder and
// skill-builder, spec 10.3), then the files of the global directory, then
// those of the agent directory; a later skill overrides an earlier one of
// the same name. Every invalid file fails Load with a [*FileError] naming
// it and every rule it breaks:
//
//   - the skill name and state names are lowercase names of letters,
//     digits, '_' and '-'; events are lowercase identifiers (letters,
//     digits, '_'), distinct within a state;
//   - description is set and max_steps is 1 to 1000;
//   - initial_state names a state that is not terminal;
//   - at least one state is terminal, and terminal states have no
//     transitions and no allowed tools;
//   - every other state has an objective and at least one transition, and
//     every transition leads to an existing state;
//   - every state is reachable from the initial state;
//   - a terminal state is reachable from every state: a state from which
//     the run could never finish is a trap that only max_steps would end,
//     so it is refused rather than left to fail at run time;
//   - every allowed tool is registered and listed once, and the transition
//     tool is never listed (every non-terminal state has it);
//   - input_schema and output_schema, when present, compile and reference
//     nothing outside themselves.
//
// # Runs
//
// A [Run] is one active skill in a lane. Each model call of the lane sees
// only the current state: [Run.Objective] (or the whole [StepContext]),
// [Run.AllowedTools] to filter the tools offered, and [Run.TransitionTool],
// the structured tool choir.skill.transition whose schema enumerates the
// events of the current state. The model changes state only by calling it,
// never by text; [Run.Transition] (or [Run.Propose] with a bare event)
// applies the call, and [Run.CheckTool] enforces the allowlist before any
// other tool runs.
//
// Every accepted proposal (an allowed tool call or a transition) is a step;
// a proposal beyond max_steps fails the run with a [*LimitError]. A
// rejected proposal returns a [*Violation] listing the allowed tools and
// valid transitions. Invalid proposals in a row beyond the retry budget
// (default 2) escalate: the run takes the current state's "error" event if
// it has one, else its "fail" event, else it fails. The escalation counts as
// a step, so max_steps bounds any loop of errors.
//
// A run's [Snapshot] (skill, state, step, retries, status, input, output,
// local context) is plain JSON for working-memory snapshots;
// [Set.Restore] rebuilds the run and checks it against the skill as loaded.
package skill
