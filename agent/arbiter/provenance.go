package arbiter

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// This file is the provenance of every lane (issue 30): the untrusted
// sources its context holds. The arbiter sees every event a lane commits,
// so it folds them as they are appended:
//
//   - a tool result adds the sources its tool's declaration gives it
//     (tool.Def.Sources, recorded in the event);
//   - a user message adds the sources choird gave it (a mail notice's
//     sender, a schedule's creator lane's sources);
//   - a core job starts with, and takes every injection with, what the
//     edge holds then; the edge takes a job's sources with its report;
//   - a session summary or a model call record carries its lane's
//     sources, so a session that starts from the summary keeps them.
//
// The fold only ever adds: a source stays in a lane's set for the life of
// the chain, through compaction (the summary was written from the context
// that held it) and restarts (the snapshot carries the sets, and the tail
// after it is folded again). The same fold runs on the log's tail when a
// session resumes, so what the lanes hold never depends on memory alone.

// maxSourcesPerLane bounds a lane's set: past it, a new source is kept as
// its kind alone ("web"), which still says what the lane read.
const maxSourcesPerLane = 64

// provenance is the untrusted sources of each lane. The zero value is
// ready.
type provenance struct {
	mu    sync.Mutex
	lanes map[string][]string // sorted, without duplicates
}

// of returns the sources lane holds, sorted; nil when none.
func (p *provenance) of(lane string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lanes[lane])
}

// add puts srcs into lane's set.
func (p *provenance) add(lane string, srcs ...string) {
	if len(srcs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addLocked(lane, srcs)
}

func (p *provenance) addLocked(lane string, srcs []string) {
	if p.lanes == nil {
		p.lanes = map[string][]string{}
	}
	set := p.lanes[lane]
	for _, s := range srcs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if len(set) >= maxSourcesPerLane {
			s = tool.SourceKind(s)
		}
		if i, found := slices.BinarySearch(set, s); !found {
			set = slices.Insert(set, i, s)
		}
	}
	p.lanes[lane] = set
}

// inherit puts what from holds into to's set.
func (p *provenance) inherit(to, from string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if srcs := p.lanes[from]; len(srcs) > 0 {
		p.addLocked(to, slices.Clone(srcs))
	}
}

// snapshot returns every lane's set, for a working-memory snapshot.
func (p *provenance) snapshot() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lanes) == 0 {
		return nil
	}
	out := make(map[string][]string, len(p.lanes))
	for l, s := range p.lanes {
		out[l] = slices.Clone(s)
	}
	return out
}

// restore adds the sets of a snapshot.
func (p *provenance) restore(m map[string][]string) {
	for l, s := range m {
		p.add(l, s...)
	}
}

// edgeLane is the edge lane's name in the log.
const edgeLane = "edge"

// sourcesPayload is what the fold reads of an event's payload.
type sourcesPayload struct {
	Sources []string `json:"sources"`
	JobName string   `json:"job_name"`
}

// fold applies one committed event to the sets. payload is what was
// committed, when the arbiter has it typed; nil reads the event's JSON
// (the tail of a resumed session).
func (p *provenance) fold(ev rpc.Event, payload any) {
	switch ev.Type {
	case rpc.EventCoreStarted:
		p.inherit(ev.Lane, edgeLane)
		return
	case rpc.EventInjectedInstruction:
		if ev.Lane != edgeLane {
			p.inherit(ev.Lane, edgeLane)
		}
		return
	case rpc.EventUserMsg, rpc.EventToolResultCommitted, rpc.EventModelOutput, rpc.EventSessionSummary,
		rpc.EventLLMCallCommitted:
	default:
		return
	}
	var sp sourcesPayload
	switch v := payload.(type) {
	case commitlog.ToolResult:
		sp.Sources = v.Sources
	case commitlog.LLMCall:
		sp.Sources = v.Sources
	default:
		json.Unmarshal(ev.Payload, &sp) //nolint:errcheck // an event without sources adds none
	}
	p.add(ev.Lane, sp.Sources...)
	if ev.Type == rpc.EventModelOutput && ev.Lane == edgeLane && sp.JobName != "" {
		// A core job's report, committed on the edge: the edge's model
		// reads it.
		p.inherit(edgeLane, "core:"+sp.JobName)
	}
}

// LaneSources returns the untrusted sources lane's context holds: "edge"
// or a core job's "core:<name>".
func (a *Arbiter) LaneSources(lane string) []string { return a.prov.of(lane) }

// ProvenanceSnapshot returns every lane's sources, for a working-memory
// snapshot.
func (a *Arbiter) ProvenanceSnapshot() map[string][]string { return a.prov.snapshot() }

// RestoreProvenance restores the lanes' sources from a snapshot and folds
// the log's tail after it (every event the log holds: folding one twice
// changes nothing). Call it before any lane proposes.
func (a *Arbiter) RestoreProvenance(snap map[string][]string) error {
	a.prov.restore(snap)
	log := a.cfg.Appender.Log()
	head, _ := log.Head()
	evs, err := log.Range(log.Oldest(), head)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		a.prov.fold(ev, nil)
	}
	return nil
}
