// Package gateway is choird's Telegram adapter: one bot per configured
// telegram gateway, long polling the Bot API, translating between Telegram
// updates and Choir's inbound messages, commands and approval decisions, and
// sending what agents and the control plane say back.
//
// The gateway is a thin adapter (spec 19.7): routing, permissions and state
// live in choird's control layer, reached through the small interfaces this
// package declares ([Inbox], [Workspaces], [Commands], [Approvals],
// [Resends]).
//
// Ingress is durable: an update is handed to its consumer (Inbox.Receive,
// the command hook or the approval hook) before the getUpdates offset moves
// past it. The gateway runs its own getUpdates loop instead of telebot's
// poller, which advances the offset as soon as an update is read, so a crash
// between receipt and the inbox write would lose the update. Here the
// offset is confirmed only by the next getUpdates call, after every update
// of the batch has been handled; an update received but not handled is
// redelivered by Telegram after a restart, and the inbox's unique (gateway,
// update_id) key turns the redelivery of a handled one into a no-op
// ([ErrDuplicate]). An update whose handling keeps failing is retried with
// backoff, then dead-lettered (Options.MaxUpdateAttempts): logged, the user
// asked to send it again, and passed over, so it cannot stall the bot.
//
// Egress goes through the outbox: [Gateway] is the sender of the
// deliver_outbound worker (outbox.Sender), and its [SendLimiter] paces
// every message sent through the bots, the worker's too. Replies to
// commands and core jobs' live progress messages, which need no
// durability, are sent at once ([Gateway.SendText]) and, for progress,
// edited in place ([Gateway.EditText]), through the same limiter. Text is cut at 4096 UTF-16 code units on
// line, then word boundaries ([SplitText]); files from the workspace's
// .choirtmp/send go out as document, photo, voice (OGG Opus) or video.
//
// The bot token is a secret: it appears in every request URL, so every
// error leaving this package has it redacted, and it is never logged.
// choirctl secret apply replaces it without a restart ([Gateway.SetSecrets]).
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/choirhq/choir/config"
)

// DefaultAPIURL is the Bot API server.
const DefaultAPIURL = "https://api.telegram.org"

// Telegram's limits.
const (
	// MaxMessageLength is the longest text message, in UTF-16 code units.
	MaxMessageLength = 4096
	// MaxCaptionLength is the longest caption of a file.
	MaxCaptionLength = 1024
	// MaxDownloadBytes is the largest file a bot may download.
	MaxDownloadBytes = 20 << 20
	// MaxUploadBytes is the largest file a bot may send.
	MaxUploadBytes = 50 << 20
)

// DM is the identity of a configured DM: who sent an update.
type DM struct {
	// Gateway names the gateway (bot).
	Gateway string
	// Name is the DM's name in config.json.
	Name string
	// UserID is the Telegram user id.
	UserID string
	Admin  bool
}

// InboundMessage is a message from an allowed user, for the agent bound to
// its DM.
type InboundMessage struct {
	DM DM
	// UpdateID is Telegram's update id: with DM.Gateway, the inbox key.
	UpdateID int64
	ChatID   string
	// MessageID is Telegram's id of the message in the chat.
	MessageID int64
	// Text is the message text, or the caption of a file.
	Text        string
	Attachments []Attachment
	// SentAt is when the user sent it, per Telegram.
	SentAt time.Time
}

// Attachment is a file a user sent, stored in the workspace.
type Attachment struct {
	// Kind is document, photo, voice, video or audio.
	Kind string `json:"kind"`
	// Path is relative to the workspace: .choirtmp/recv/<name>.
	Path string `json:"path"`
	// Name is the file name the user's client gave, if any.
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"`
	Size int64  `json:"size"`
}

// ErrDuplicate is returned by an Inbox for an update it already holds. The
// gateway treats it as success.
var ErrDuplicate = errors.New("update already received")

// ErrNotBound is returned by Workspaces when no agent is bound to the DM.
var ErrNotBound = errors.New("no agent is bound to this dm")

// Inbox stores inbound messages durably and routes them (the control
// layer implements it: an inbox row, then delivery to the bound agent).
//
// Receive must return only once the message is durable. It must be
// idempotent on (DM.Gateway, UpdateID), returning ErrDuplicate (possibly
// wrapped) for a message it already holds. Any other error makes the
// gateway retry the same update with backoff, without moving the offset,
// up to Options.MaxUpdateAttempts times; then the update is dead-lettered
// and the user asked to send it again. Return errors only for failures
// that can pass (the database is down).
type Inbox interface {
	Receive(ctx context.Context, msg InboundMessage) error
}

// Workspaces locates the workspace of the agent bound to a DM, where
// inbound files are stored. It returns ErrNotBound when no agent is bound.
type Workspaces interface {
	WorkspaceDir(ctx context.Context, dm DM) (string, error)
}

// Command is a slash command from an allowed user.
type Command struct {
	DM       DM
	UpdateID int64
	ChatID   string
	// MessageID is the command message, for replies that quote it.
	MessageID int64
	// ReplyToMessageID is the message the command answers, when the user
	// sent it as a reply: /approve in reply to an approval request names
	// that approval (spec 19.6). Zero otherwise.
	ReplyToMessageID int64
	// Name is the command without slash or @bot suffix, in lower case.
	Name string
	// Args are the words after the command.
	Args []string
	// Text is everything after the command and the blank that follows
	// it, verbatim (for /inject <message>).
	Text string
}

// Commands runs slash commands (the control layer implements it). The
// reply, if not empty, is sent to the chat. Refusals, usage help and
// failures the user should read are replies, not errors: an error means
// the command could not be processed at all, and the gateway retries the
// update with backoff. The hook runs on the bot's update loop, so it must
// return promptly; long work belongs in a job that reports through the
// outbox.
//
// Telegram redelivers an update that was handled but not yet confirmed
// when choird stops, so a command may arrive twice with the same
// UpdateID; deduplicate by (DM.Gateway, UpdateID) when running it twice
// would matter.
type Commands interface {
	Command(ctx context.Context, cmd Command) (reply string, err error)
}

// Decision is an approval button pressed by an allowed user.
type Decision struct {
	DM       DM
	UpdateID int64
	ChatID   string
	// MessageID is the message carrying the buttons.
	MessageID  int64
	ApprovalID string
	Approve    bool
}

// Approvals resolves approvals from inline buttons (the control layer
// implements it). The answer is shown to the user as the button's
// notification ("Approved", "already rejected", "not your approval").
// Errors are retried as for Commands.
type Approvals interface {
	Decide(ctx context.Context, d Decision) (answer string, err error)
}

// ResendPress is a [Send again] button pressed by an allowed user, under
// the notice that a message may not have arrived.
type ResendPress struct {
	DM       DM
	UpdateID int64
	ChatID   string
	// MessageID is the notice carrying the button.
	MessageID int64
	// OutboxID is the message to send again.
	OutboxID int64
}

// Resends sends again, on a [Send again] press, a message whose send
// could not be confirmed (the control layer implements it). The answer is
// shown as the button's notification ("Sent again", "already sent
// again"). Errors are retried as for Commands.
type Resends interface {
	Resend(ctx context.Context, p ResendPress) (answer string, err error)
}

// Options configure a Gateway.
type Options struct {
	// Gateways and DMs are config.json's; gateways of other types than
	// telegram are ignored.
	Gateways map[string]config.Gateway
	DMs      map[string]config.DM
	// Secrets holds the bot tokens, named by each gateway's secret.
	Secrets config.Secrets
	// APIURL is the Bot API server; DefaultAPIURL when empty.
	APIURL string

	Inbox      Inbox
	Workspaces Workspaces
	Commands   Commands
	Approvals  Approvals
	// Resends serves the [Send again] buttons; without it a press is
	// answered that it cannot be served, and nothing is sent.
	Resends Resends

	// Limiter paces every message the gateway sends; share it with the
	// delivery worker. Nil means a new DefaultSendLimits limiter.
	Limiter *SendLimiter
	Logger  *slog.Logger
	// Transport carries the HTTP requests; nil means a dedicated clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
	// PollTimeout is the getUpdates long-poll timeout (default 25 s).
	PollTimeout time.Duration
	// RetryBase is the first delay after a failed poll or a failed
	// handling of an update; it doubles up to 30 s (default 500 ms).
	RetryBase time.Duration
	// MaxUpdateAttempts is how many times an update is handled before it
	// is dead-lettered: logged, the user told to send it again, and
	// skipped, so one update that keeps failing cannot hold up every
	// later one (default 8, about a minute of backoff at the default
	// RetryBase).
	MaxUpdateAttempts int
	// FileTimeout bounds the getFile call that locates a received file
	// (default 30 s); DownloadTimeout bounds its download (default 2
	// minutes: 20 MB at 170 KB/s).
	FileTimeout     time.Duration
	DownloadTimeout time.Duration
	// TypingInterval is how often Typing repeats the chat action
	// (default 4 s: Telegram shows it for about 5 s).
	TypingInterval time.Duration
}

// Gateway is the set of Telegram bots choird runs.
type Gateway struct {
	opts   Options
	logger *slog.Logger
	bots   map[string]*bot
	// dms maps gateway and user id to the DM; replaced as a whole.
	dms atomic.Pointer[map[dmKey]DM]
}

type dmKey struct{ gateway, userID string }

// New builds the gateway: one bot per telegram gateway. It checks that each
// bot's token is in the secrets and makes no request. Sending needs nothing
// more; Run needs the four hooks.
func New(opts Options) (*Gateway, error) {
	opts.APIURL = cmp.Or(opts.APIURL, DefaultAPIURL)
	opts.PollTimeout = cmp.Or(opts.PollTimeout, 25*time.Second)
	opts.RetryBase = cmp.Or(opts.RetryBase, 500*time.Millisecond)
	opts.MaxUpdateAttempts = cmp.Or(opts.MaxUpdateAttempts, 8)
	opts.FileTimeout = cmp.Or(opts.FileTimeout, 30*time.Second)
	opts.DownloadTimeout = cmp.Or(opts.DownloadTimeout, 2*time.Minute)
	opts.TypingInterval = cmp.Or(opts.TypingInterval, 4*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Limiter == nil {
		opts.Limiter = NewSendLimiter(DefaultSendLimits)
	}
	if opts.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.MaxIdleConnsPerHost = 32
		opts.Transport = t
	}
	g := &Gateway{opts: opts, logger: opts.Logger.With(slog.String("component", "gateway")), bots: map[string]*bot{}}
	for _, name := range slices.Sorted(maps.Keys(opts.Gateways)) {
		gw := opts.Gateways[name]
		if gw.Type != config.GatewayTelegram {
			continue
		}
		token := opts.Secrets[gw.Secret]
		if token == "" {
			return nil, fmt.Errorf("gateway %q: secret %q holds no bot token: set it with choirctl secret set %s",
				name, gw.Secret, gw.Secret)
		}
		g.bots[name] = newBot(g, name, token)
	}
	g.SetDMs(opts.DMs)
	return g, nil
}

// SetDMs replaces the allowlists, for a configuration reload. Updates
// being handled finish with the DMs they started with.
func (g *Gateway) SetDMs(dms map[string]config.DM) {
	m := map[dmKey]DM{}
	// Sorted, so that of two DMs naming one user the first name wins,
	// every time.
	for _, name := range slices.Sorted(maps.Keys(dms)) {
		d := dms[name]
		k := dmKey{d.Gateway, d.UserID}
		if _, dup := m[k]; !dup {
			m[k] = DM{Gateway: d.Gateway, Name: name, UserID: d.UserID, Admin: d.Admin}
		}
	}
	g.dms.Store(&m)
}

func (g *Gateway) lookupDM(gateway, userID string) (DM, bool) {
	dm, ok := (*g.dms.Load())[dmKey{gateway, userID}]
	return dm, ok
}

// Gateways returns the names of the telegram gateways, sorted.
func (g *Gateway) Gateways() []string {
	return slices.Sorted(maps.Keys(g.bots))
}

// Run polls every bot until ctx ends, then returns nil. Failures of one bot
// (an unreachable API, a revoked token) are logged and retried with backoff;
// they never stop the others.
func (g *Gateway) Run(ctx context.Context) error {
	if g.opts.Inbox == nil || g.opts.Commands == nil || g.opts.Approvals == nil || g.opts.Workspaces == nil {
		return errors.New("run gateway: an inbox, workspaces, commands and approvals are required")
	}
	var wg sync.WaitGroup
	for _, b := range g.bots {
		wg.Go(func() { b.runRecovering(ctx) })
	}
	wg.Wait()
	<-ctx.Done() // with no telegram gateway configured, Run still lasts
	return nil
}

// WaitPolling waits until every bot has answered getMe and polls for
// updates, or until ctx ends, and returns the names of the bots that
// poll, sorted. choird logs "ready" after it (spec 6.2: the bots poll,
// then choird is ready).
func (g *Gateway) WaitPolling(ctx context.Context) []string {
	var polling []string
	for _, name := range g.Gateways() {
		b := g.bots[name]
		select {
		case <-b.polling:
			polling = append(polling, name)
		case <-ctx.Done():
			for _, b := range g.bots {
				select {
				case <-b.polling:
					if !slices.Contains(polling, b.name) {
						polling = append(polling, b.name)
					}
				default:
				}
			}
			slices.Sort(polling)
			return polling
		}
	}
	return polling
}

// Close releases idle connections. The gateway must not be used after.
func (g *Gateway) Close() {
	if c, ok := g.opts.Transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (g *Gateway) bot(name string) (*bot, error) {
	b := g.bots[name]
	if b == nil {
		return nil, permanent(fmt.Errorf("gateway %q is not a configured telegram gateway", name))
	}
	return b, nil
}

// backoff is base·2^n, capped at 30 s.
func backoff(base time.Duration, n int) time.Duration {
	const maxDelay = 30 * time.Second
	if n > 16 {
		return maxDelay
	}
	return min(base<<n, maxDelay)
}

// sleep waits d or until ctx ends, reporting whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Serves reports whether name is one of the gateway's Telegram bots.
func (g *Gateway) Serves(name string) bool {
	return g != nil && g.bots[name] != nil
}
