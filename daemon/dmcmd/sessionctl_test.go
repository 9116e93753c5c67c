package dmcmd_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// TestSessionControlAdminAPI drives the session, model, voice and approval
// endpoints choirctl uses over the admin socket, against a live session.
func TestSessionControlAdminAPI(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	ctx := context.Background()
	agent := b.D.StandIn(t, "assistant", admin.StartOverrides{})
	c := admin.NewClient(admin.SocketPath(b.D.Home))
	defer c.Close()
	code := func(err error) wire.Code {
		var e *wire.Error
		if errors.As(err, &e) {
			return e.Code
		}
		return ""
	}

	t.Run("ModelAndVoice", func(t *testing.T) {
		var list admin.ModelListResult
		if err := c.Do(ctx, http.MethodGet, admin.PathModels, nil, &list); err != nil || len(list.Models) != 2 || len(list.TTS) != 1 {
			t.Fatalf("models = %+v, %v", list, err)
		}
		var st admin.ModelState
		if err := c.Do(ctx, http.MethodPost, "/v1/agents/assistant/model", admin.ModelSetRequest{LLM: "big"}, &st); err != nil ||
			st.LLM != "big" || !st.LLMOverridden || !st.Running {
			t.Fatalf("model set = %+v, %v", st, err)
		}
		agent.Next(t, rpc.PushConfigChanged)
		err := c.Do(ctx, http.MethodPost, "/v1/agents/assistant/model", admin.ModelSetRequest{LLM: "gpt-9"}, &st)
		if code(err) != wire.CodeNotFound || !strings.Contains(err.Error(), "models: big, local") {
			t.Errorf("unknown model: %v", err)
		}
		err = c.Do(ctx, http.MethodPost, "/v1/agents/helper/voice", admin.VoiceSetRequest{VoiceProfile: "calm"}, &st)
		if code(err) != wire.CodeConflict || !strings.Contains(err.Error(), "helper has no live session") {
			t.Errorf("voice set on a stopped agent: %v", err)
		}
		if err := c.Do(ctx, http.MethodGet, "/v1/agents/helper/voice", nil, &st); err != nil || st.Running || st.LLM != "local" {
			t.Errorf("voice get of a stopped agent = %+v, %v", st, err)
		}
		var voices []admin.NamedVoice
		if err := c.Do(ctx, http.MethodGet, admin.PathVoices, nil, &voices); err != nil || len(voices) != 2 || voices[0].Name != "bright" {
			t.Errorf("voices = %+v, %v", voices, err)
		}
	})

	t.Run("Session", func(t *testing.T) {
		if _, err := agent.Client.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "core:build", State: "CORE_WAITING_TOOL"}); err != nil {
			t.Fatal(err)
		}
		var cores admin.SessionCoresResult
		if err := c.Do(ctx, http.MethodGet, "/v1/agents/assistant/session/cores", nil, &cores); err != nil ||
			len(cores.Cores) != 1 || cores.Cores[0].Name != "build" || !cores.Cores[0].Active {
			t.Fatalf("cores = %+v, %v", cores, err)
		}
		var ref admin.SessionRef
		if err := c.Do(ctx, http.MethodPost, "/v1/agents/assistant/session/cancel/build", nil, &ref); err != nil || ref.Target != "build" {
			t.Fatalf("cancel = %+v, %v", ref, err)
		}
		if p := agent.Next(t, rpc.PushCancel); p.Cancel.JobName != "build" {
			t.Errorf("cancel push = %+v", p.Cancel)
		}
		if err := c.Do(ctx, http.MethodPost, "/v1/agents/assistant/session/compact", nil, &ref); err != nil {
			t.Fatal(err)
		}
		agent.Next(t, rpc.PushCompact)
		var ev admin.SessionEventsResult
		if err := c.Do(ctx, http.MethodGet, "/v1/agents/assistant/session/events/5", nil, &ev); err != nil || !ev.Live ||
			ev.SessionID != agent.SessionID {
			t.Errorf("events = %+v, %v", ev, err)
		}
		err := c.Do(ctx, http.MethodGet, "/v1/agents/assistant/session/events/zero", nil, &ev)
		if code(err) != wire.CodeBadRequest {
			t.Errorf("events/zero: %v", err)
		}
		err = c.Do(ctx, http.MethodPost, "/v1/agents/helper/session/compact", nil, &ref)
		if code(err) != wire.CodeConflict {
			t.Errorf("compact of a stopped agent: %v", err)
		}
	})

	t.Run("Approvals", func(t *testing.T) {
		id := choirdtest.RequestApproval(t, agent, "deploy to staging")
		var list []admin.Approval
		if err := c.Do(ctx, http.MethodGet, admin.PathApprovals, nil, &list); err != nil || len(list) != 1 || list[0].ID != id {
			t.Fatalf("approvals = %+v, %v", list, err)
		}
		if err := c.Do(ctx, http.MethodGet, "/v1/agents/helper/approvals", nil, &list); err != nil || len(list) != 0 {
			t.Errorf("helper's approvals = %+v, %v", list, err)
		}
		var a admin.Approval
		if err := c.Do(ctx, http.MethodPost, "/v1/approvals/"+id+"/approve", nil, &a); err != nil || a.Status != "approved" ||
			!strings.HasPrefix(a.ResolvedBy, "choirctl:uid=") {
			t.Fatalf("approve = %+v, %v", a, err)
		}
		err := c.Do(ctx, http.MethodPost, "/v1/approvals/"+id+"/reject", nil, &a)
		if code(err) != wire.CodeConflict || !strings.Contains(err.Error(), "already approved by choirctl:uid=") ||
			!strings.Contains(err.Error(), " at 20") {
			t.Errorf("second decision: %v", err)
		}
		err = c.Do(ctx, http.MethodGet, "/v1/approvals/nope", nil, &a)
		if code(err) != wire.CodeNotFound || !strings.Contains(err.Error(), "is not an approval id") {
			t.Errorf("malformed id: %v", err)
		}
		if err := c.Do(ctx, http.MethodGet, "/v1/approvals/"+id, nil, &a); err != nil || a.Summary != "deploy to staging" {
			t.Errorf("show = %+v, %v", a, err)
		}
	})
}
