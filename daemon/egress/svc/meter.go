package svc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/spend"
	"github.com/choirhq/choir/rpc"
	wire "github.com/choirhq/choir/rpc/egress"
	rpcusage "github.com/choirhq/choir/rpc/usage"
)

// maxMeteredAnswer bounds the JSON answer kept to read its usage; a
// longer one is passed on whole but settled at its worst case.
const maxMeteredAnswer = 16 << 20

// settleTimeout bounds the ledger's write of a settlement.
const settleTimeout = 10 * time.Second

// meterFunc works out a call's worst case from its request body, and
// returns how to settle it from the answer.
type meterFunc func(cfg *config.Config, name string, body []byte) (spend.Call, settleFunc, error)

// settleFunc is what a call spent, given its answer.
type settleFunc func(res *spend.Reservation, a answer) spend.Spent

// answer is what the meter saw of the provider's answer.
type answer struct {
	// sent is false when the request never reached the provider.
	sent bool
	// status is 0 when no answer came.
	status int
	// complete is an answer read to its end.
	complete bool
	// usage is the last usage object the answer held.
	usage *wireUsage
}

func (a answer) ok() bool { return a.status >= 200 && a.status <= 299 }

// wireUsage is the usage object of an OpenAI-compatible answer
// (OpenRouter's cost too).
type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	Cost *float64 `json:"cost"`
}

// metered is a reserved call on its way.
type metered struct {
	res    *spend.Reservation
	settle func(h *Handler, s spend.Spent)
	with   settleFunc
}

// reserve reads r's body, works out its worst case and reserves it.
func (h *Handler) reserve(r *http.Request, caller egress.Caller, rt *route) (*metered, int, string, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBytes+1))
	if err != nil {
		return nil, http.StatusBadRequest, "bad_request", fmt.Errorf("read request: %w", err)
	}
	if len(body) > maxRequestBytes {
		return nil, http.StatusRequestEntityTooLarge, "too_large", fmt.Errorf("request body over %d bytes", maxRequestBytes)
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	call, with, err := rt.svc.meter(rt.cfg, rt.name, body)
	if err != nil {
		return nil, http.StatusBadRequest, "bad_request", err
	}
	call.AgentID, call.Key = caller.AgentID, r.Header.Get(wire.HeaderSpendKey)
	call.SessionID = rt.session
	if lane := r.Header.Get(wire.HeaderLane); rpc.ValidLane(lane) {
		call.Lane = lane
	}
	call.JobID, call.Purpose = label(r.Header.Get(wire.HeaderJob)), label(r.Header.Get(wire.HeaderPurpose))
	res, err := h.ledger.Reserve(r.Context(), call)
	switch {
	case errors.Is(err, spend.ErrDuplicateKey):
		return nil, http.StatusConflict, "duplicate_spend_key", err
	case err != nil:
		var capErr *spend.CapError
		if errors.As(err, &capErr) {
			return nil, 0, "", err
		}
		h.logger.ErrorContext(r.Context(), "spend not reserved: call refused", slog.String("agent_id", caller.AgentID),
			slog.String("service", call.Service), slog.String("error", err.Error()))
		return nil, http.StatusServiceUnavailable, "ledger", fmt.Errorf("spend of the call could not be reserved: %w", err)
	}
	h.settling.Add(1)
	var once sync.Once
	m := &metered{res: res, with: with}
	m.settle = func(h *Handler, s spend.Spent) {
		once.Do(func() { h.settler.add(spend.Settlement{Reservation: res, Spent: s}) })
	}
	return m, 0, "", nil
}

var labelRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,64}$`)

// label is an attribution header's value, or empty when it is no label.
func label(v string) string {
	if labelRE.MatchString(v) {
		return v
	}
	return ""
}

// meterResponse lets the meter read the answer as it passes to the agent.
func (h *Handler) meterResponse(res *http.Response) error {
	rt := res.Request.Context().Value(routeKey{}).(*route)
	if rt.meter == nil {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	res.Body = &meterBody{rc: res.Body, h: h, m: rt.meter, status: res.StatusCode, sse: mt == "text/event-stream",
		usage: rt.svc.usage}
	return nil
}

// upstreamError answers a call whose provider could not be reached or
// did not answer, and settles it: nothing when it never reached the
// provider, else its worst case (it may have been billed).
func (h *Handler) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	rt := r.Context().Value(routeKey{}).(*route)
	if rt.meter != nil {
		var op *net.OpError
		sent := !(errors.As(err, &op) && op.Op == "dial")
		rt.meter.settle(h, rt.meter.with(rt.meter.res, answer{sent: sent}))
	}
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	h.logger.WarnContext(r.Context(), "service route: provider not reached", slog.String("host", rt.target.Host),
		slog.String("error", err.Error()))
	writeError(w, status, "upstream", fmt.Sprintf("%s at %s did not answer: %v", rt.svc.noun, rt.target.Host, err))
}

// meterBody passes an answer on and reads its usage on the way: the
// usage object of a JSON answer, or of the last event of a stream that
// carries one. Closing it settles the call.
type meterBody struct {
	rc     io.ReadCloser
	h      *Handler
	m      *metered
	status int
	sse    bool
	// usage is whether to look for a usage object (model calls).
	usage bool

	buf      []byte
	over     bool
	complete bool
	last     *wireUsage
}

func (b *meterBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.usage && n > 0 {
		b.feed(p[:n])
	}
	if errors.Is(err, io.EOF) {
		b.complete = true
	}
	return n, err
}

// feed keeps what the usage is read from: a JSON answer whole (up to
// maxMeteredAnswer), a stream's current line, whose complete data lines
// that mention usage are decoded as they end.
func (b *meterBody) feed(p []byte) {
	if !b.sse {
		if len(b.buf)+len(p) > maxMeteredAnswer {
			b.over, b.buf = true, nil
		}
		if !b.over {
			b.buf = append(b.buf, p...)
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			b.buf = append(b.buf, p...)
			return
		}
		line := p[:i]
		if len(b.buf) > 0 {
			line = append(b.buf, line...)
		}
		b.line(line)
		b.buf, p = b.buf[:0], p[i+1:]
	}
}

// line reads one event stream line: a data line with a usage object
// replaces the usage seen so far.
func (b *meterBody) line(l []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	var chunk struct {
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(data, &chunk) == nil && validUsage(chunk.Usage) {
		b.last = chunk.Usage
	}
}

// Close closes the answer and settles the call with what was read.
func (b *meterBody) Close() error {
	err := b.rc.Close()
	a := answer{sent: true, status: b.status, complete: b.complete}
	if b.usage {
		if !b.sse && !b.over {
			var w struct {
				Usage *wireUsage `json:"usage"`
			}
			if json.Unmarshal(b.buf, &w) == nil && validUsage(w.Usage) {
				b.last = w.Usage
			}
		}
		a.usage = b.last
	}
	b.m.settle(b.h, b.m.with(b.m.res, a))
	return err
}

func validUsage(u *wireUsage) bool {
	return u != nil && u.PromptTokens >= 0 && u.CompletionTokens >= 0 && (u.Cost == nil || *u.Cost >= 0)
}

// meterModelCall reserves a chat completion's worst case: its prompt,
// estimated at four bytes of the request a token, plus the completion
// it allows (max_tokens, else what the model's context window leaves),
// at the model's prices. The body must name the route's model, whose
// prices these are.
func meterModelCall(cfg *config.Config, name string, body []byte) (spend.Call, settleFunc, error) {
	var req struct {
		Model               string `json:"model"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return spend.Call{}, nil, fmt.Errorf("request is no chat completion: %w", err)
	}
	m := cfg.Models[name]
	if req.Model != m.Model {
		return spend.Call{}, nil, fmt.Errorf("request names model %q, but model %s is %q", req.Model, name, m.Model)
	}
	prompt := (int64(len(body)) + 3) / 4
	completion := max(m.ContextWindowTokens()-prompt, 0)
	for _, n := range []*int64{req.MaxTokens, req.MaxCompletionTokens} {
		if n != nil && *n > 0 {
			completion = min(completion, *n)
		}
	}
	call := spend.Call{Kind: rpcusage.KindLLM, Service: name, Tokens: prompt + completion, Unit: rpcusage.UnitTokens}
	prices := m.Prices
	if prices != nil {
		call.CostUSD = prices.Cost(prompt, 0, completion)
	}
	return call, func(res *spend.Reservation, a answer) spend.Spent {
		switch {
		case a.usage != nil:
			u := a.usage
			s := spend.Spent{Outcome: spend.OutcomeOK, PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
				Units: u.PromptTokens + u.CompletionTokens}
			if !a.ok() || !a.complete {
				s.Outcome = spend.OutcomeBilledFailure
			}
			if d := u.PromptTokensDetails; d != nil && d.CachedTokens >= 0 && d.CachedTokens <= u.PromptTokens {
				s.Cached = d.CachedTokens
			}
			switch {
			case u.Cost != nil:
				s.CostUSD, s.CostSource = *u.Cost, rpcusage.CostProvider
			case prices != nil:
				s.CostUSD, s.CostSource = prices.Cost(s.PromptTokens, s.Cached, s.CompletionTokens), rpcusage.CostPrices
			}
			return s
		case !a.sent, a.status != 0 && !a.ok():
			// Never reached the provider, or refused with no usage: not
			// billed.
			return spend.Spent{Outcome: spend.OutcomeNotBilled}
		}
		return res.WorstCase()
	}, nil
}

// meterSearch reserves one query at the provider's price.
func meterSearch(cfg *config.Config, name string, _ []byte) (spend.Call, settleFunc, error) {
	cost := cfg.Search[name].PricePer1KQueries / 1000
	return spend.Call{Kind: rpcusage.KindSearch, Service: name, Units: 1, Unit: rpcusage.UnitQueries, CostUSD: cost}, settleUnits, nil
}

// meterSpeech reserves the characters of the text to speak at the
// provider's price.
func meterSpeech(cfg *config.Config, name string, body []byte) (spend.Call, settleFunc, error) {
	var req struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return spend.Call{}, nil, fmt.Errorf("request is no text-to-speech request: %w", err)
	}
	n := int64(utf8.RuneCountInString(req.Text))
	cost := float64(n) * cfg.TTS[name].PricePer1KCharacters / 1000
	return spend.Call{Kind: rpcusage.KindTTS, Service: name, Units: n, Unit: rpcusage.UnitCharacters, CostUSD: cost}, settleUnits, nil
}

// settleUnits settles a call priced by what it asked for (a query,
// characters): all of it once the provider accepted it, nothing when it
// refused it or was never reached.
func settleUnits(res *spend.Reservation, a answer) spend.Spent {
	if !a.sent || a.status != 0 && !a.ok() {
		return spend.Spent{Outcome: spend.OutcomeNotBilled}
	}
	s := res.WorstCase()
	s.Outcome = spend.OutcomeOK
	if a.status == 0 {
		s.Outcome = spend.OutcomeWorstCase
	}
	if s.CostUSD > 0 {
		s.CostSource = rpcusage.CostPrices
	}
	return s
}

// SettleDelay is how long a settlement waits to be written with others:
// one round trip settles every call answered meanwhile, and the day
// totals' row locks are taken once for the batch, not once a call, so
// that settlements hold up the reservations of the next calls less. A
// call's reservation stays at its worst case that much longer.
const SettleDelay = 20 * time.Millisecond

// maxSettleBatch bounds the calls one statement settles.
const maxSettleBatch = 512

// settler writes settlements in batches, one batch at a time.
type settler struct {
	ledger *spend.Ledger
	logger *slog.Logger
	// doneFunc is told how many settlements were written (or given up).
	doneFunc func(n int)

	mu      sync.Mutex
	pending []spend.Settlement
	armed   bool
	write   sync.Mutex
}

func (s *settler) add(st spend.Settlement) {
	s.mu.Lock()
	s.pending = append(s.pending, st)
	arm := !s.armed
	s.armed = true
	s.mu.Unlock()
	if arm {
		time.AfterFunc(SettleDelay, s.flush)
	}
}

func (s *settler) flush() {
	s.write.Lock()
	defer s.write.Unlock()
	s.mu.Lock()
	batch := s.pending
	s.pending, s.armed = nil, false
	s.mu.Unlock()
	for len(batch) > 0 {
		n := min(len(batch), maxSettleBatch)
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		if err := s.ledger.SettleMany(ctx, batch[:n]); err != nil {
			s.logger.Error("spend not settled: the spend_expire job settles it at its worst case",
				slog.Int("calls", n), slog.String("error", err.Error()))
		}
		cancel()
		s.doneFunc(n)
		batch = batch[n:]
	}
}
