package sql_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/choirhq/choir/db"
)

// TestAuditToolSchemaTokens checks that choir_audit.tool_schema_tokens
// shows each model call's tool mode and tool-schema tokens beside its
// prompt tokens, calls recorded before modes existing counting as direct.
func TestAuditToolSchemaTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.agent(t, "alpha")
	s := b.session(t, "alpha")
	h1 := chain(genesis, 1)
	h2 := chain(h1, 2)
	_, err := b.q.EventsAppend(ctx, []db.EventsAppendParams{
		{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: 1, EventType: "llm_call_committed", Lane: "edge", HashPrev: genesis, Hash: h1,
			Payload: json.RawMessage(`{"model":"fast","lane":"edge","prompt_tokens":9000,"completion_tokens":30,"latency_ms":800}`)},
		{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: 2, EventType: "llm_call_committed", Lane: "edge", HashPrev: h1, Hash: h2,
			Payload: json.RawMessage(`{"model":"fast","lane":"edge","prompt_tokens":1500,"completion_tokens":30,"latency_ms":700,` +
				`"tool_mode":"discovery","tool_schema_tokens":1041}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(ctx, `SELECT tool_mode, tool_schema_tokens, prompt_tokens
		FROM choir_audit.tool_schema_tokens WHERE agent_id = 'alpha' ORDER BY rev`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		mode           string
		schema, prompt int64
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.mode, &r.schema, &r.prompt); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	want := []row{{"direct", 0, 9000}, {"discovery", 1041, 1500}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("tool_schema_tokens = %+v, want %+v", got, want)
	}
}
