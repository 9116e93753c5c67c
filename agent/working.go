package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/tool"
)

// workingQuery answers choir.memory.query for store "working" from the
// agent's own commit log (spec 11.7): the current session, own agent only,
// never a round trip to choird.
type workingQuery struct {
	Store string `json:"store"`
	Mode  string `json:"mode"`
	Query string `json:"query"`
	Hash  string `json:"hash"`
	Limit int    `json:"limit"`
}

// workingHit is one event of the log, cited by revision and hash.
type workingHit struct {
	Rev     int64  `json:"rev"`
	Type    string `json:"type"`
	Lane    string `json:"lane"`
	Hash    string `json:"hash"`
	Excerpt string `json:"excerpt"`
}

func answerWorking(log *commitlog.Log, input json.RawMessage) (tool.Result, error) {
	var q workingQuery
	if err := json.Unmarshal(input, &q); err != nil {
		return tool.Result{}, fmt.Errorf("working memory query: %w", err)
	}
	if q.Limit <= 0 {
		q.Limit = 20
	}
	head, _ := log.Head()
	evs, err := log.Range(log.Oldest(), head)
	if err != nil {
		return tool.Result{}, fmt.Errorf("read the commit log: %w", err)
	}
	var hits []workingHit
	needle := strings.ToLower(q.Query)
	for i := len(evs) - 1; i >= 0 && len(hits) < q.Limit; i-- {
		e := evs[i]
		var match bool
		switch q.Mode {
		case "hash":
			match = strings.HasPrefix(e.Hash.String(), strings.ToLower(q.Hash))
		default: // keyword
			match = bytes.Contains(bytes.ToLower(e.Payload), []byte(needle))
		}
		if match {
			excerpt := string(e.Payload)
			if len(excerpt) > 400 {
				excerpt = excerpt[:400] + "…"
			}
			hits = append(hits, workingHit{Rev: e.Rev, Type: string(e.Type), Lane: e.Lane, Hash: e.Hash.String(), Excerpt: excerpt})
		}
	}
	out, err := json.Marshal(map[string]any{"store": "working", "mode": q.Mode, "events": hits, "count": len(hits),
		"searched_from_rev": log.Oldest()})
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Status: tool.StatusSuccess, Summary: fmt.Sprintf("%d events of this session match", len(hits)), Output: out}, nil
}
