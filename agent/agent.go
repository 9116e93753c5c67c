// Package agent is choir-agent: the runtime inside an agent's container. Run
// verifies the sandbox, says hello to choird, fetches the session's secrets
// and configuration, builds the tool and skill registries, and runs the
// arbiter, the edge lane, the heartbeat that replicates the commit log, and
// the push stream that brings user messages in.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/sandbox"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// Version is the agent binary's version, set at build time.
var Version = "dev"

// Options configure one run of the agent; cmd/choir-agent fills them from
// flags and the environment choird sets.
type Options struct {
	// ControlPlane, Socket, Endpoint and CACert choose the transport
	// (spec 12.2).
	ControlPlane, Socket, Endpoint, CACert string
	AgentID, SessionID, LeaseToken         string
	// Workspace is the leased workspace (/workspace in the container).
	Workspace string
	// ChoirDir holds the image's tools, skills and identity (/choir).
	ChoirDir string
	// Sandboxed makes the agent verify its container before anything else
	// (set by the docker runtime).
	Sandboxed bool
	Logger    *slog.Logger
}

// dynamic is the hot-reloadable configuration choird publishes.
type dynamic struct {
	Models              map[string]config.Model       `json:"models"`
	HeartbeatIntervalMS int64                         `json:"heartbeat_interval_ms"`
	RateLimitRetryMS    int64                         `json:"rate_limit_retry_ms"`
	SnapshotEveryEvents int                           `json:"snapshot_every_events"`
	GitIdentities       map[string]config.GitIdentity `json:"git_identities"`
}

// workingState is the agent's working-memory snapshot (spec 13.4), taken
// every snapshot_every_events events and sent with a heartbeat.
type workingState struct {
	Edge     lane.EdgeSnapshot `json:"edge"`
	OpenJobs []string          `json:"open_jobs"`
}

// secretStore holds the session's secrets in memory only, swapped whole on
// refresh (spec 14.3).
type secretStore struct {
	m atomic.Pointer[map[string]string]
}

func (s *secretStore) get(name string) (string, bool) {
	m := s.m.Load()
	if m == nil {
		return "", false
	}
	v, ok := (*m)[name]
	return v, ok
}

func (s *secretStore) swap(m map[string]string) { s.m.Store(&m) }

// Run is the agent's whole life: it returns when ctx ends or choird shuts it
// down, after a final heartbeat and TERMINATE_SELF.
func Run(ctx context.Context, opts Options) error {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	logger = logger.With(slog.String("source", opts.AgentID), slog.String("session_id", opts.SessionID))
	if opts.Sandboxed {
		if err := sandbox.Check(); err != nil {
			return fmt.Errorf("refusing to run outside a hardened container: %w", err)
		}
		logger.Info("sandbox check passed")
	}
	client, err := rpc.NewClient(rpc.ClientOptions{ControlPlane: opts.ControlPlane, Socket: opts.Socket,
		Endpoint: opts.Endpoint, CACert: opts.CACert, SessionID: opts.SessionID, LeaseToken: opts.LeaseToken, Logger: logger})
	if err != nil {
		return fmt.Errorf("connect to choird: %w", err)
	}
	defer client.Close()

	reg, err := tool.Build(tool.Config{GlobalDir: filepath.Join(opts.ChoirDir, "tools", "global"),
		AgentDir: filepath.Join(opts.ChoirDir, "tools", "agent")})
	if err != nil {
		return fmt.Errorf("load tools: %w", err)
	}
	skills, err := skill.Load(skill.Config{GlobalDir: filepath.Join(opts.ChoirDir, "skills", "global"),
		AgentDir: filepath.Join(opts.ChoirDir, "skills", "agent"), KnownTool: reg.Has})
	if err != nil {
		return fmt.Errorf("load skills: %w", err)
	}

	img := imageVersion(opts.ChoirDir)
	hello, err := client.InitHello(ctx, rpc.InitHelloRequest{AgentID: opts.AgentID, SessionID: opts.SessionID,
		ImageVersion: img.ImageVersion, ToolManifestHash: img.ToolManifestHash, SkillManifestHash: img.SkillManifestHash})
	if err != nil {
		return fmt.Errorf("hello to choird: %w", err)
	}
	logger.Info("session opened", slog.String("status", string(hello.Status)), slog.Int64("acked_rev", hello.AckedRev),
		slog.Int("tail_events", len(hello.TailEvents)), slog.Int64("config_version", hello.ConfigVersion))

	secrets := &secretStore{}
	secrets.swap(map[string]string{})
	if len(hello.ResourceBindings.Secrets) > 0 {
		got, err := client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: hello.ResourceBindings.Secrets})
		if err != nil {
			return fmt.Errorf("fetch secrets: %w", err)
		}
		secrets.swap(got.Secrets)
	}
	var dyn atomic.Pointer[dynamic]
	var configVersion atomic.Int64
	fetchConfig := func(ctx context.Context) error {
		resp, err := client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: configVersion.Load()})
		if err != nil {
			return err
		}
		if len(resp.Config) > 0 {
			var d dynamic
			if err := json.Unmarshal(resp.Config, &d); err != nil {
				return fmt.Errorf("decode dynamic config: %w", err)
			}
			dyn.Store(&d) // swapped whole: an in-flight call keeps its snapshot
		}
		configVersion.Store(resp.ConfigVersion)
		return nil
	}
	if err := fetchConfig(ctx); err != nil {
		return fmt.Errorf("fetch configuration: %w", err)
	}
	if gi, ok := dyn.Load().GitIdentities[hello.ResourceBindings.GitIdentity]; ok {
		if err := configureGit(ctx, gi); err != nil {
			logger.Warn("git identity not configured", slog.String("error", err.Error()))
		} else {
			logger.Info("git identity configured", slog.String("git_identity", hello.ResourceBindings.GitIdentity))
			if err := setupGitCredentials(ctx, gi, secrets.get, logger); err != nil {
				logger.Warn("git credential helper not set up", slog.String("error", err.Error()))
			}
		}
	}
	modelName := hello.ResourceBindings.Models["llm"]
	model := func() llm.ModelSettings {
		m := dyn.Load().Models[modelName]
		key, _ := secrets.get(m.Secret)
		return llm.ModelSettingsFromConfig(modelName, m, key)
	}

	// A resumed session continues the acknowledged chain; the tail after
	// the snapshot is kept in memory so the lanes' windows survive.
	log, app, err := commitlog.NewWithHistory(hello.AckedRev, hello.AckedHash, hello.TailEvents)
	if err != nil {
		return fmt.Errorf("rebuild from choird's replica: %w", err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: lock.New(), Logger: logger,
		Env: tool.Env{Workspace: opts.Workspace, SecretFunc: secrets.get}, Host: hostExecutor{client: client, log: log}})
	out := &outbound{client: client}
	edge := lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, Skills: skills, LLM: &llm.Client{},
		Model: model, Out: out, Logger: logger,
		RateLimitDelay: time.Duration(dyn.Load().RateLimitRetryMS) * time.Millisecond,
		Identity: lane.Identity{Instructions: edgeInstructions, User: readIdentity(opts.ChoirDir, "USER.md"),
			Soul: readIdentity(opts.ChoirDir, "SOUL.md")}})

	if hello.Snapshot != nil {
		var st workingState
		if err := json.Unmarshal(hello.Snapshot.State, &st); err != nil {
			logger.Warn("snapshot unreadable; starting the lane fresh", slog.String("error", err.Error()))
		} else if err := edge.Restore(st.Edge); err != nil {
			logger.Warn("snapshot not restorable; starting the lane fresh", slog.String("error", err.Error()))
		} else {
			logger.Info("working state restored", slog.Int64("snapshot_rev", hello.Snapshot.Rev),
				slog.Int("tail_events", len(hello.TailEvents)))
		}
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { arb.Run(runCtx) })
	wg.Go(func() {
		if err := edge.Run(runCtx); err != nil {
			logger.Warn("edge lane ended", slog.String("error", err.Error()))
		}
	})
	shutdown := make(chan string, 1)
	hb := &heartbeat{client: client, log: log, logger: logger, configVersion: &configVersion, fetchConfig: fetchConfig,
		interval:      func() time.Duration { return time.Duration(dyn.Load().HeartbeatIntervalMS) * time.Millisecond },
		snapshotEvery: func() int64 { return int64(dyn.Load().SnapshotEveryEvents) },
		state: func() json.RawMessage {
			b, _ := json.Marshal(workingState{Edge: edge.Snapshot(), OpenJobs: []string{}})
			return b
		},
		warn: func(ctx context.Context, text string) { out.Send(ctx, text) }, //nolint:errcheck
		revoked: func() {
			select {
			case shutdown <- "lease revoked by choird":
			default:
			}
		}}
	hb.lastSnapshot = hello.AckedRev
	wg.Go(func() { hb.run(runCtx) })
	wg.Go(func() {
		err := client.ReceivePushes(runCtx, func(p rpc.Push) {
			switch p.Kind {
			case rpc.PushUserMessage:
				m := p.UserMessage
				var files []string
				for _, a := range m.Attachments {
					files = append(files, filepath.Join(".choirtmp", "recv", a.FilePath))
				}
				if err := edge.Deliver(lane.UserMessage{Text: m.Text, Attachments: files,
					MessageID: fmt.Sprint(m.InboxID)}); err != nil {
					logger.Error("user message dropped", slog.String("error", err.Error()))
				}
			case rpc.PushConfigChanged:
				if err := fetchConfig(runCtx); err != nil {
					logger.Warn("config refresh failed; keeping the current one", slog.String("error", err.Error()))
				}
				// Secrets refresh the same way (choirctl secret apply): the
				// whole set is fetched and swapped in at once, never patched.
				if names := hello.ResourceBindings.Secrets; len(names) > 0 {
					got, err := client.GetSecrets(runCtx, rpc.GetSecretsRequest{Resources: names})
					if err != nil {
						logger.Warn("secret refresh failed; keeping the current ones", slog.String("error", err.Error()))
					} else {
						secrets.swap(got.Secrets)
						logger.Info("secrets refreshed", slog.Int("secrets", len(got.Secrets)))
					}
				}
			case rpc.PushShutdown:
				select {
				case shutdown <- "shutdown requested by choird":
				default:
				}
			}
		})
		if err != nil && runCtx.Err() == nil {
			logger.Warn("push stream ended", slog.String("error", err.Error()))
		}
	})

	reason := "context ended"
	select {
	case <-ctx.Done():
	case reason = <-shutdown:
	}
	logger.Info("stopping", slog.String("reason", reason))
	stop()
	wg.Wait()
	// Graceful stop: everything committed goes out in a final heartbeat
	// before the session is ended.
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := hb.flush(final); err != nil {
		logger.Error("final heartbeat failed; unacknowledged events are lost", slog.String("error", err.Error()))
	}
	if _, err := client.TerminateSelf(final, rpc.TerminateSelfRequest{Reason: reason}); err != nil {
		return fmt.Errorf("terminate session: %w", err)
	}
	return nil
}

const edgeInstructions = `You are the edge lane of a personal agent: the one who talks with the user.
Answer directly when you can. Use tools for anything that touches files, commands or memory.
Never invent tool results; if a tool fails, say so plainly.`

// configureGit sets user.name and user.email of the leased git identity in
// the agent's global git config (spec 14.4: config, not environment), so
// that commits from choir.exec are attributable. An image without git
// skips it.
func configureGit(ctx context.Context, gi config.GitIdentity) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("no git in this image: %w", err)
	}
	for _, kv := range [][2]string{{"user.name", gi.Name}, {"user.email", gi.Email}} {
		if out, err := gitCommand(ctx, "config", "--global", kv[0], kv[1]); err != nil {
			return fmt.Errorf("git config %s: %w: %s", kv[0], err, out)
		}
	}
	return nil
}

func gitCommand(ctx context.Context, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "git", args...).CombinedOutput()
}

// imageInfo is what the agent reports of its image in INIT_HELLO: from
// /choir/version.json when the image was built by choird's pipeline.
type imageInfo struct {
	ImageVersion      string `json:"image_version"`
	ToolManifestHash  string `json:"tool_manifest_hash"`
	SkillManifestHash string `json:"skill_manifest_hash"`
}

func imageVersion(choirDir string) imageInfo {
	info := imageInfo{ImageVersion: Version, ToolManifestHash: "builtin", SkillManifestHash: "builtin"}
	if b, err := os.ReadFile(filepath.Join(choirDir, "version.json")); err == nil {
		var v imageInfo
		if json.Unmarshal(b, &v) == nil && v.ImageVersion != "" {
			info = v
		}
	}
	return info
}

func readIdentity(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	return string(b)
}

// hostExecutor runs host tools on choird, except the working store of
// choir.memory.query, which the agent's own log answers.
type hostExecutor struct {
	client *rpc.Client
	log    *commitlog.Log
}

func (h hostExecutor) ExecuteHostTool(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error) {
	if name == tool.NameMemoryQuery {
		var q struct {
			Store string `json:"store"`
		}
		if json.Unmarshal(input, &q) == nil && q.Store == "working" {
			return answerWorking(h.log, input)
		}
	}
	resp, err := h.client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: name, CallID: callID, Input: input})
	if err != nil {
		return tool.Result{}, err
	}
	status := tool.StatusSuccess
	if resp.Status != rpc.ToolSuccess {
		status = tool.StatusError
	}
	return tool.Result{Status: status, Summary: name + " " + string(resp.Status), Output: resp.Output}, nil
}

// outbound hands the lane's messages to choird, each under a fresh message
// ID so a retry is deduplicated.
type outbound struct{ client *rpc.Client }

func (o *outbound) Send(ctx context.Context, text string) error {
	var b [12]byte
	rand.Read(b[:])
	_, err := o.client.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "msg-" + hex.EncodeToString(b[:]),
		Kind: rpc.OutboundKind("text"), Text: text})
	return err
}

// heartbeat replicates the commit log to choird (spec 13.1).
type heartbeat struct {
	client        *rpc.Client
	log           *commitlog.Log
	logger        *slog.Logger
	configVersion *atomic.Int64
	fetchConfig   func(context.Context) error
	interval      func() time.Duration
	snapshotEvery func() int64
	state         func() json.RawMessage
	// warn tells the user something; revoked stops the agent.
	warn    func(ctx context.Context, text string)
	revoked func()

	lastSnapshot int64
	warned       bool
}

// unackedWarn is how many unacknowledged events make the agent warn the
// user that its work is not yet safe on the host.
const unackedWarn = 500

func (h *heartbeat) beat(ctx context.Context) error {
	p := h.log.UnackedLimit(1000)
	req := rpc.HeartbeatRequest{BaseRev: p.BaseRev, NewRev: p.NewRev, Patches: p.Events,
		HashPrev: p.HashPrev, HashNew: p.HashNew, ConfigVersion: h.configVersion.Load(), Timestamp: time.Now()}
	if every := h.snapshotEvery(); every > 0 && p.NewRev > 0 && p.NewRev-h.lastSnapshot >= every {
		// The snapshot is taken now, at the patch's last revision: counters
		// may include a call committed since, which only errs on the side
		// of a smaller remaining budget.
		req.Snapshot = &rpc.Snapshot{Rev: p.NewRev, Hash: p.HashNew, State: h.state()}
	}
	resp, err := h.client.Heartbeat(ctx, req)
	if err != nil {
		return err
	}
	if req.Snapshot != nil {
		h.lastSnapshot = req.Snapshot.Rev
	}
	if err := h.log.Ack(resp.AckRev); err != nil {
		return fmt.Errorf("ack %d: %w", resp.AckRev, err)
	}
	if resp.ConfigVersionLatest != h.configVersion.Load() {
		if err := h.fetchConfig(ctx); err != nil {
			h.logger.Warn("config refresh failed; keeping the current one", slog.String("error", err.Error()))
		}
	}
	return nil
}

// run beats every interval, backing off while choird is unreachable;
// unacknowledged events stay in the log and go out with the next
// successful beat. A revoked lease (the session was crashed or stopped
// behind the agent's back) fences the agent: it stops.
func (h *heartbeat) run(ctx context.Context) {
	backoff := time.Duration(0)
	// The first beat goes out at once: choird learns the agent is up, and
	// the interval only spaces the ones after it.
	wait := time.Duration(0)
	for {
		if backoff > 0 {
			wait = backoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = h.interval()
		err := h.beat(ctx)
		switch {
		case err == nil:
			backoff = 0
			h.warned = false
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpc.ErrUnauthenticated):
			h.logger.Error("lease revoked: this session is over; stopping", slog.String("error", err.Error()))
			h.revoked()
			return
		}
		backoff = min(max(2*backoff, 200*time.Millisecond), 10*time.Second)
		h.logger.Warn("heartbeat failed; retrying", slog.String("error", err.Error()), slog.Duration("backoff", backoff))
		head, _ := h.log.Head()
		if acked, _ := h.log.Acked(); head-acked > unackedWarn && !h.warned {
			h.warned = true
			h.logger.Warn("unacknowledged events are piling up", slog.Int64("unacked", head-acked))
			h.warn(ctx, fmt.Sprintf("Warning: I cannot reach choird; %d of my latest steps are not yet saved on the host "+
				"and would be lost if I crashed now.", head-acked))
		}
	}
}

// flush sends heartbeats until everything committed is acknowledged.
func (h *heartbeat) flush(ctx context.Context) error {
	for {
		if err := h.beat(ctx); err != nil {
			return err
		}
		head, _ := h.log.Head()
		if acked, _ := h.log.Acked(); acked >= head {
			return nil
		}
	}
}
