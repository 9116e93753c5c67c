// Package telegramtest is a fake Telegram Bot API server for tests. It speaks
// the real HTTP protocol at /bot<token>/<method> and /file/bot<token>/<path>,
// so a telebot.Bot (or any client) pointed at [Server.URL] works unchanged.
//
// The fake covers what Choir's gateway uses: getMe; getUpdates with offset
// confirmation, long polling and the 409 conflict of two pollers;
// sendMessage; sendDocument, sendPhoto, sendVoice, sendVideo and sendAudio
// as multipart uploads; sendChatAction; answerCallbackQuery;
// editMessageReplyMarkup; editMessageText, with Telegram's refusals of an
// edit that changes nothing and of a message that is gone; getFile and
// file download. Requests may be JSON,
// form-encoded or multipart, as Telegram accepts. Limits are enforced as
// Telegram does (4096 characters per message, 1024 per caption, 50 MB per
// upload), and faults such as 429 Too Many Requests with retry_after can be
// injected per method.
//
// A test plays the users: [Bot.SendText], [Bot.SendFile] and
// [Bot.PressButton] queue updates from a user id, and [Bot.Sent],
// [Bot.WaitSent] and friends show what the bot did. Several bots (tokens)
// share one server.
package telegramtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"
)

// Telegram's limits, as the fake enforces them.
const (
	MaxMessageLength = 4096
	MaxCaptionLength = 1024
	MaxUploadBytes   = 50 << 20
	MaxDownloadBytes = 20 << 20
)

// Server is a fake Bot API server.
type Server struct {
	srv     *httptest.Server
	closing chan struct{}
	close   sync.Once

	mu   sync.Mutex
	bots map[string]*Bot
	now  func() time.Time
}

// NewServer starts a server that is closed when the test ends.
func NewServer(t testing.TB) *Server {
	s := &Server{closing: make(chan struct{}), bots: map[string]*Bot{}, now: time.Now}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	t.Cleanup(s.Close)
	return s
}

// URL is the base URL to give telebot.Settings.URL.
func (s *Server) URL() string { return s.srv.URL }

// Close stops the server, ending any long poll at once.
func (s *Server) Close() {
	s.close.Do(func() { close(s.closing) })
	s.srv.Close()
}

// AddBot registers a bot with its token and username (without @).
func (s *Server) AddBot(token, username string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &Bot{
		s:          s,
		token:      token,
		username:   username,
		id:         int64(1000 + len(s.bots)),
		changed:    make(chan struct{}),
		files:      map[string]*storedFile{},
		callbacks:  map[string]bool{},
		messages:   map[msgKey]*sentMsg{},
		faults:     map[string][]Fault{},
		blocked:    map[string]bool{},
		nextUpdate: 1,
		nextMsg:    1,
	}
	s.bots[token] = b
	return b
}

// RevokeToken gives b a new token, as BotFather's /revoke does: the old
// one is answered 401 Unauthorized from now on, a long poll made with it
// included, and b keeps its updates, messages and username.
func (b *Bot) RevokeToken(newToken string) {
	b.s.mu.Lock()
	delete(b.s.bots, b.token)
	b.token = newToken
	b.s.bots[newToken] = b
	b.s.mu.Unlock()
	b.mu.Lock()
	b.tokenGen++
	b.changedLocked()
	b.mu.Unlock()
}

func (s *Server) bot(token string) *Bot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bots[token]
}

// Fault is an error the fake answers a method with.
type Fault struct {
	// Code is the HTTP status and error_code, e.g. 429.
	Code int
	// Description is Telegram's description; a sensible one is chosen
	// when empty.
	Description string
	// RetryAfter, in seconds, is sent as parameters.retry_after.
	RetryAfter int
}

// Call is one API request as the fake understood it.
type Call struct {
	Method string
	Params map[string]string
	// Files are the uploaded files by form field.
	Files map[string]Upload
	At    time.Time
	// Status is the HTTP status the fake answered with.
	Status int
}

// Upload is a file received in a multipart request.
type Upload struct {
	Field string
	Name  string
	Size  int
	Data  []byte
}

// Message is something the bot sent: a text message or a file.
type Message struct {
	MessageID int64
	// Method is sendMessage, sendDocument, sendPhoto, sendVoice,
	// sendVideo or sendAudio.
	Method string
	ChatID string
	// Text is the message text, or the caption of a file.
	Text        string
	ReplyMarkup string
	File        *Upload
	At          time.Time
}

// Button is one inline keyboard button.
type Button struct {
	Text string `json:"text"`
	Data string `json:"callback_data"`
}

// Keyboard returns the inline keyboard of the message, if any.
func (m Message) Keyboard() [][]Button {
	var rm struct {
		InlineKeyboard [][]Button `json:"inline_keyboard"`
	}
	if m.ReplyMarkup == "" || json.Unmarshal([]byte(m.ReplyMarkup), &rm) != nil {
		return nil
	}
	return rm.InlineKeyboard
}

// CallbackAnswer is an answerCallbackQuery call.
type CallbackAnswer struct {
	CallbackID string
	Text       string
	ShowAlert  bool
}

// ChatAction is a sendChatAction call.
type ChatAction struct {
	ChatID string
	Action string
	At     time.Time
}

// Edit is an editMessageReplyMarkup call.
type Edit struct {
	ChatID      string
	MessageID   int64
	ReplyMarkup string
}

// TextEdit is an editMessageText call that changed a message.
type TextEdit struct {
	ChatID    string
	MessageID int64
	Text      string
	At        time.Time
}

type storedFile struct {
	id, uniqueID, path string
	size               int64
	data               []byte
}

type msgKey struct {
	chat string
	id   int64
}

// sentMsg is a message the bot sent, as it stands now.
type sentMsg struct {
	// text is a text message's text; file messages have a caption
	// instead, which editMessageText cannot change.
	text   string
	isText bool
}

type update struct {
	id   int64
	kind string
	raw  json.RawMessage
}

// Bot is one bot on the server, with the state a test inspects.
type Bot struct {
	s        *Server
	token    string
	username string
	id       int64

	mu         sync.Mutex
	tokenGen   int64         // counts RevokeToken calls
	changed    chan struct{} // closed and replaced on every change
	updates    []update      // unconfirmed, in id order
	nextUpdate int64
	confirmed  int64 // every update below this id is gone for good
	pollGen    int64
	nextMsg    int64
	nextFile   int

	calls     []Call
	sent      []Message
	answers   []CallbackAnswer
	actions   []ChatAction
	edits     []Edit
	textEdits []TextEdit
	files     map[string]*storedFile // by file_id and by file_path
	callbacks map[string]bool        // open callback query ids
	messages  map[msgKey]*sentMsg    // messages the bot sent, not deleted
	faults    map[string][]Fault     // by lower-case method
	blocked   map[string]bool        // chats that blocked the bot
	hooks     []hook
	downloads []func(path string)
}

type hook struct {
	method string
	fn     func(Call)
	// after runs the hook once the fake has handled the call, before it
	// writes the answer.
	after bool
}

// Token returns the bot's token.
func (b *Bot) Token() string {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	return b.token
}

// Username returns the bot's username.
func (b *Bot) Username() string { return b.username }

// ID returns the bot's user id.
func (b *Bot) ID() int64 { return b.id }

func (b *Bot) changedLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Fail makes the next n calls of method answer with f.
func (b *Bot) Fail(method string, n int, f Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := strings.ToLower(method)
	for range n {
		b.faults[m] = append(b.faults[m], f)
	}
}

// TooManyRequests makes the next n calls of method answer 429 with
// retry_after seconds.
func (b *Bot) TooManyRequests(method string, n, retryAfter int) {
	b.Fail(method, n, Fault{Code: http.StatusTooManyRequests, RetryAfter: retryAfter})
}

// Block makes the user of chatID block the bot: sends to it answer 403.
func (b *Bot) Block(chatID int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.blocked[strconv.FormatInt(chatID, 10)] = true
}

// OnCall runs fn for every call of method (all methods when empty), before
// the fake answers it; fn may block to hold the request.
func (b *Bot) OnCall(method string, fn func(Call)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hooks = append(b.hooks, hook{method: strings.ToLower(method), fn: fn})
}

// AfterCall runs fn for every call of method (all methods when empty) that
// the fake handled successfully, after it took effect (a message is sent,
// as far as Telegram is concerned) and before the answer is written: a
// test kills the caller there to leave it not knowing the outcome.
func (b *Bot) AfterCall(method string, fn func(Call)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hooks = append(b.hooks, hook{method: strings.ToLower(method), fn: fn, after: true})
}

// OnDownload runs fn for every download from the file endpoint, before the
// fake answers it; fn may block to hold the download.
func (b *Bot) OnDownload(fn func(path string)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.downloads = append(b.downloads, fn)
}

func userJSON(id int64) map[string]any {
	return map[string]any{"id": id, "is_bot": false, "first_name": "User" + strconv.FormatInt(id, 10),
		"username": "user" + strconv.FormatInt(id, 10)}
}

func chatJSON(id int64) map[string]any {
	return map[string]any{"id": id, "type": "private", "first_name": "User" + strconv.FormatInt(id, 10)}
}

// InjectUpdate queues a raw update of the given kind ("message",
// "callback_query", ...) and returns its update_id.
func (b *Bot) InjectUpdate(kind string, body any) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.injectLocked(kind, body)
}

func (b *Bot) injectLocked(kind string, body any) int64 {
	id := b.nextUpdate
	b.nextUpdate++
	raw, err := json.Marshal(map[string]any{"update_id": id, kind: body})
	if err != nil {
		panic(fmt.Sprintf("telegramtest: marshal update: %v", err))
	}
	b.updates = append(b.updates, update{id: id, kind: kind, raw: raw})
	b.changedLocked()
	return id
}

func (b *Bot) userMessageLocked(from int64) map[string]any {
	id := b.nextMsg
	b.nextMsg++
	return map[string]any{"message_id": id, "from": userJSON(from), "chat": chatJSON(from),
		"date": b.s.now().Unix()}
}

// SendText queues a private text message from user from and returns its
// update_id. A leading /command gets its bot_command entity, as Telegram
// adds it.
func (b *Bot) SendText(from int64, text string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.userMessageLocked(from)
	m["text"] = text
	if strings.HasPrefix(text, "/") {
		n := strings.IndexAny(text, " \n\t")
		if n < 0 {
			n = len(text)
		}
		m["entities"] = []map[string]any{{"type": "bot_command", "offset": 0, "length": utf16Len(text[:n])}}
	}
	return b.injectLocked("message", m)
}

// FileKind is the kind of media a user sends.
type FileKind string

// The media kinds a user can send.
const (
	Document FileKind = "document"
	Photo    FileKind = "photo"
	Voice    FileKind = "voice"
	Video    FileKind = "video"
	Audio    FileKind = "audio"
)

// File is a file a user sends.
type File struct {
	Kind FileKind
	// Name is the file name (documents, videos and audio carry one).
	Name    string
	MIME    string
	Data    []byte
	Caption string
	// Size is the size Telegram reports; len(Data) when zero. A size
	// above MaxDownloadBytes makes getFile fail as Telegram does.
	Size int64
}

// SendFile queues a private message carrying f from user from and returns
// its update_id. The file can then be fetched with getFile and downloaded.
func (b *Bot) SendFile(from int64, f File) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	sf := b.storeLocked(string(f.Kind), f.Data, f.Size)
	obj := map[string]any{"file_id": sf.id, "file_unique_id": sf.uniqueID, "file_size": sf.size}
	if f.Name != "" {
		obj["file_name"] = f.Name
	}
	if f.MIME != "" {
		obj["mime_type"] = f.MIME
	}
	m := b.userMessageLocked(from)
	if f.Caption != "" {
		m["caption"] = f.Caption
	}
	switch f.Kind {
	case Photo:
		small := map[string]any{"file_id": sf.id + "_s", "file_unique_id": sf.uniqueID + "_s",
			"file_size": 100, "width": 90, "height": 90}
		obj["width"], obj["height"] = 1280, 960
		m["photo"] = []any{small, obj}
	case Voice, Video, Audio:
		obj["duration"] = 3
		m[string(f.Kind)] = obj
	default:
		m["document"] = obj
	}
	return b.injectLocked("message", m)
}

func (b *Bot) storeLocked(kind string, data []byte, size int64) *storedFile {
	b.nextFile++
	if size == 0 {
		size = int64(len(data))
	}
	sf := &storedFile{
		id:       fmt.Sprintf("F%d-%s-%d", b.id, kind, b.nextFile),
		uniqueID: fmt.Sprintf("U%d-%d", b.id, b.nextFile),
		path:     fmt.Sprintf("%ss/file_%d", kind, b.nextFile),
		size:     size,
		data:     data,
	}
	b.files[sf.id] = sf
	b.files[sf.path] = sf
	return sf
}

// PressButton queues a callback query from user from, as if they pressed
// the inline button with data under message messageID, and returns the
// update_id and the callback query id.
func (b *Bot) PressButton(from, messageID int64, data string) (updateID int64, callbackID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	callbackID = fmt.Sprintf("cb%d-%d", b.id, b.nextUpdate)
	b.callbacks[callbackID] = true
	msg := map[string]any{"message_id": messageID, "from": map[string]any{"id": b.id, "is_bot": true,
		"first_name": b.username, "username": b.username}, "chat": chatJSON(from), "date": b.s.now().Unix(), "text": "…"}
	cq := map[string]any{"id": callbackID, "from": userJSON(from), "message": msg,
		"chat_instance": "ci" + strconv.FormatInt(from, 10), "data": data}
	return b.injectLocked("callback_query", cq), callbackID
}

// Pending returns the ids of the updates not yet confirmed by getUpdates.
func (b *Bot) Pending() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]int64, 0, len(b.updates))
	for _, u := range b.updates {
		ids = append(ids, u.id)
	}
	return ids
}

// Sent returns the messages the bot sent, in order.
func (b *Bot) Sent() []Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sent)
}

// SentTo returns the messages the bot sent to chatID, in order.
func (b *Bot) SentTo(chatID int64) []Message {
	id := strconv.FormatInt(chatID, 10)
	var out []Message
	for _, m := range b.Sent() {
		if m.ChatID == id {
			out = append(out, m)
		}
	}
	return out
}

// Calls returns the calls of method (all when empty), in order.
func (b *Bot) Calls(method string) []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Call
	for _, c := range b.calls {
		if method == "" || strings.EqualFold(c.Method, method) {
			out = append(out, c)
		}
	}
	return out
}

// Answers returns the answerCallbackQuery calls, in order.
func (b *Bot) Answers() []CallbackAnswer {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.answers)
}

// ChatActions returns the sendChatAction calls, in order.
func (b *Bot) ChatActions() []ChatAction {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.actions)
}

// Edits returns the editMessageReplyMarkup calls, in order.
func (b *Bot) Edits() []Edit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.edits)
}

// TextEdits returns the editMessageText calls that changed a message, in
// order.
func (b *Bot) TextEdits() []TextEdit {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.textEdits)
}

// MessageText returns the current text of a text message the bot sent to
// chatID, edits included, and whether there is one.
func (b *Bot) MessageText(chatID, messageID int64) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages[msgKey{strconv.FormatInt(chatID, 10), messageID}]
	if m == nil || !m.isText {
		return "", false
	}
	return m.text, true
}

// DeleteMessage deletes a message the bot sent, as the user may: editing
// it afterwards fails with "message to edit not found".
func (b *Bot) DeleteMessage(chatID, messageID int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.messages, msgKey{strconv.FormatInt(chatID, 10), messageID})
	b.changedLocked()
}

// Wait blocks until cond, evaluated after every change of the bot's state,
// holds or ctx ends.
func (b *Bot) Wait(ctx context.Context, cond func() bool) error {
	for {
		b.mu.Lock()
		ch := b.changed
		b.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitTimeout bounds the Wait* helpers: it only guards against a hang.
var WaitTimeout = 30 * time.Second

// WaitSent waits until the bot has sent at least n messages and returns
// them all.
func (b *Bot) WaitSent(t testing.TB, n int) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := b.Wait(ctx, func() bool { return len(b.Sent()) >= n }); err != nil {
		t.Fatalf("telegramtest: %d messages sent, want %d: %v", len(b.Sent()), n, err)
	}
	return b.Sent()
}

// WaitConfirmed waits until getUpdates has confirmed update id.
func (b *Bot) WaitConfirmed(t testing.TB, id int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	err := b.Wait(ctx, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.confirmed > id
	})
	if err != nil {
		t.Fatalf("telegramtest: update %d not confirmed: %v", id, err)
	}
}

// WaitAnswers waits until n callback queries have been answered.
func (b *Bot) WaitAnswers(t testing.TB, n int) []CallbackAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	if err := b.Wait(ctx, func() bool { return len(b.Answers()) >= n }); err != nil {
		t.Fatalf("telegramtest: %d callback answers, want %d: %v", len(b.Answers()), n, err)
	}
	return b.Answers()
}

// response is the Bot API's envelope.
type response struct {
	OK          bool            `json:"ok"`
	Result      any             `json:"result,omitempty"`
	ErrorCode   int             `json:"error_code,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  *responseParams `json:"parameters,omitempty"`
}

type responseParams struct {
	RetryAfter int `json:"retry_after,omitempty"`
}

type apiError struct {
	code        int
	description string
	retryAfter  int
}

func (e *apiError) Error() string { return e.description }

func badRequest(format string, args ...any) *apiError {
	return &apiError{code: http.StatusBadRequest, description: "Bad Request: " + fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}

func writeError(w http.ResponseWriter, e *apiError) {
	resp := response{ErrorCode: e.code, Description: e.description}
	if e.retryAfter > 0 {
		resp.Parameters = &responseParams{RetryAfter: e.retryAfter}
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.code, resp)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/file/bot"); ok {
		token, path, _ := strings.Cut(rest, "/")
		s.serveFile(w, token, path)
		return
	}
	rest, ok := strings.CutPrefix(p, "/bot")
	if !ok {
		writeError(w, &apiError{code: http.StatusNotFound, description: "Not Found"})
		return
	}
	token, method, _ := strings.Cut(rest, "/")
	b := s.bot(token)
	if b == nil {
		writeError(w, &apiError{code: http.StatusUnauthorized, description: "Unauthorized"})
		return
	}
	call, err := parseCall(w, r, method)
	call.At = s.now()
	if err != nil {
		b.record(call, err.code)
		writeError(w, err)
		return
	}
	for _, h := range b.hooksFor(method, false) {
		h(call)
	}
	result, aerr := b.handle(r.Context(), call)
	if aerr != nil {
		b.record(call, aerr.code)
		writeError(w, aerr)
		return
	}
	b.record(call, http.StatusOK)
	for _, h := range b.hooksFor(method, true) {
		h(call)
	}
	writeJSON(w, http.StatusOK, response{OK: true, Result: result})
}

func (b *Bot) hooksFor(method string, after bool) []func(Call) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var fns []func(Call)
	for _, h := range b.hooks {
		if h.after == after && (h.method == "" || h.method == strings.ToLower(method)) {
			fns = append(fns, h.fn)
		}
	}
	return fns
}

func (b *Bot) record(c Call, status int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c.Status = status
	b.calls = append(b.calls, c)
	b.changedLocked()
}

// parseCall reads the parameters from the query string and from a JSON,
// form-encoded or multipart body.
func parseCall(w http.ResponseWriter, r *http.Request, method string) (Call, *apiError) {
	c := Call{Method: method, Params: map[string]string{}, Files: map[string]Upload{}}
	for k, v := range r.URL.Query() {
		c.Params[k] = v[0]
	}
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	body := http.MaxBytesReader(w, r.Body, MaxUploadBytes+1<<20)
	switch ct {
	case "application/json":
		var m map[string]json.RawMessage
		if err := json.NewDecoder(body).Decode(&m); err != nil && !errors.Is(err, io.EOF) {
			return c, badRequest("can't parse JSON object")
		}
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				c.Params[k] = s
			} else if string(v) != "null" {
				c.Params[k] = string(v)
			}
		}
	case "application/x-www-form-urlencoded":
		data, err := io.ReadAll(body)
		if err != nil {
			return c, &apiError{code: http.StatusRequestEntityTooLarge, description: "Request Entity Too Large"}
		}
		vals, err := url.ParseQuery(string(data))
		if err != nil {
			return c, badRequest("can't parse form")
		}
		for k, v := range vals {
			c.Params[k] = v[0]
		}
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				var mbe *http.MaxBytesError
				if errors.As(err, &mbe) {
					return c, &apiError{code: http.StatusRequestEntityTooLarge, description: "Request Entity Too Large"}
				}
				return c, badRequest("can't parse multipart: %v", err)
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return c, &apiError{code: http.StatusRequestEntityTooLarge, description: "Request Entity Too Large"}
			}
			// Telegram takes a part as a file when its field is a media
			// field, whatever its file name (telebot sends photos and
			// voice with an empty one).
			if _, isFile := part.Header["Content-Type"]; isFile || part.FileName() != "" || mediaField(part.FormName()) {
				c.Files[part.FormName()] = Upload{Field: part.FormName(), Name: part.FileName(), Size: len(data), Data: data}
			} else {
				c.Params[part.FormName()] = string(data)
			}
		}
	}
	return c, nil
}

func mediaField(name string) bool {
	switch name {
	case "document", "photo", "voice", "video", "audio":
		return true
	}
	return false
}

func (b *Bot) handle(ctx context.Context, c Call) (any, *apiError) {
	m := strings.ToLower(c.Method)
	b.mu.Lock()
	if fs := b.faults[m]; len(fs) > 0 {
		f := fs[0]
		b.faults[m] = fs[1:]
		b.mu.Unlock()
		return nil, faultError(f)
	}
	b.mu.Unlock()
	switch m {
	case "getme":
		return map[string]any{"id": b.id, "is_bot": true, "first_name": b.username, "username": b.username,
			"can_join_groups": false, "can_read_all_group_messages": false, "supports_inline_queries": false}, nil
	case "getupdates":
		return b.getUpdates(ctx, c)
	case "sendmessage":
		return b.sendMessage(c)
	case "senddocument", "sendphoto", "sendvoice", "sendvideo", "sendaudio":
		return b.sendFile(c, strings.TrimPrefix(m, "send"))
	case "sendchataction":
		if c.Params["chat_id"] == "" || c.Params["action"] == "" {
			return nil, badRequest("chat_id and action are required")
		}
		b.mu.Lock()
		b.actions = append(b.actions, ChatAction{ChatID: c.Params["chat_id"], Action: c.Params["action"], At: c.At})
		b.mu.Unlock()
		return true, nil
	case "answercallbackquery":
		return b.answerCallback(c)
	case "editmessagereplymarkup":
		return b.editReplyMarkup(c)
	case "editmessagetext":
		return b.editText(c)
	case "getfile":
		return b.getFile(c)
	}
	return nil, &apiError{code: http.StatusNotFound, description: "Not Found"}
}

func faultError(f Fault) *apiError {
	e := &apiError{code: f.Code, description: f.Description, retryAfter: f.RetryAfter}
	if e.description == "" {
		switch f.Code {
		case http.StatusTooManyRequests:
			e.description = fmt.Sprintf("Too Many Requests: retry after %d", f.RetryAfter)
		case http.StatusForbidden:
			e.description = "Forbidden: bot was blocked by the user"
		case http.StatusBadRequest:
			e.description = "Bad Request: injected fault"
		default:
			e.description = http.StatusText(f.Code)
		}
	}
	return e
}

const conflictDescription = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"

func (b *Bot) getUpdates(ctx context.Context, c Call) (any, *apiError) {
	offset, _ := strconv.ParseInt(c.Params["offset"], 10, 64)
	limit, _ := strconv.Atoi(c.Params["limit"])
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	timeout, _ := strconv.Atoi(c.Params["timeout"])
	var allowed []string
	if a := c.Params["allowed_updates"]; a != "" {
		if err := json.Unmarshal([]byte(a), &allowed); err != nil {
			return nil, badRequest("can't parse allowed updates")
		}
	}
	deadline := time.NewTimer(time.Duration(timeout) * time.Second)
	defer deadline.Stop()

	b.mu.Lock()
	b.pollGen++
	gen, tokenGen := b.pollGen, b.tokenGen
	b.changedLocked() // wakes an older poller, which then answers 409
	if offset > 0 && offset > b.confirmed {
		b.confirmed = offset
	}
	// Confirmed updates are dropped for good, as Telegram does.
	b.updates = slices.DeleteFunc(b.updates, func(u update) bool { return u.id < b.confirmed })
	b.mu.Unlock()

	for {
		b.mu.Lock()
		if b.tokenGen != tokenGen {
			b.mu.Unlock()
			return nil, &apiError{code: http.StatusUnauthorized, description: "Unauthorized"}
		}
		if b.pollGen != gen {
			b.mu.Unlock()
			return nil, &apiError{code: http.StatusConflict, description: conflictDescription}
		}
		var out []json.RawMessage
		from := b.updates
		if offset < 0 && int(-offset) < len(from) {
			from = from[len(from)+int(offset):]
		}
		for _, u := range from {
			if len(out) == limit {
				break
			}
			if len(allowed) == 0 || slices.Contains(allowed, u.kind) {
				out = append(out, u.raw)
			}
		}
		ch := b.changed
		b.mu.Unlock()
		if len(out) > 0 || timeout <= 0 {
			if out == nil {
				out = []json.RawMessage{}
			}
			return out, nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			timeout = 0
		case <-ctx.Done():
			return nil, &apiError{code: 499, description: "client closed request"}
		case <-b.s.closing:
			return nil, &apiError{code: http.StatusServiceUnavailable, description: "server closing"}
		}
	}
}

func utf16Len(s string) int { return len(utf16.Encode([]rune(s))) }

func (b *Bot) chatFor(c Call) (string, *apiError) {
	chat := c.Params["chat_id"]
	if chat == "" {
		return "", badRequest("chat_id is empty")
	}
	if _, err := strconv.ParseInt(chat, 10, 64); err != nil {
		return "", badRequest("chat not found")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked[chat] {
		return "", &apiError{code: http.StatusForbidden, description: "Forbidden: bot was blocked by the user"}
	}
	return chat, nil
}

func (b *Bot) sentMessageLocked(chat string, extra map[string]any) map[string]any {
	id, _ := strconv.ParseInt(chat, 10, 64)
	m := map[string]any{"message_id": b.nextMsg, "from": map[string]any{"id": b.id, "is_bot": true,
		"first_name": b.username, "username": b.username}, "chat": chatJSON(id), "date": b.s.now().Unix()}
	for k, v := range extra {
		m[k] = v
	}
	text, isText := extra["text"].(string)
	b.messages[msgKey{chat, b.nextMsg}] = &sentMsg{text: text, isText: isText}
	b.nextMsg++
	return m
}

func (b *Bot) sendMessage(c Call) (any, *apiError) {
	chat, err := b.chatFor(c)
	if err != nil {
		return nil, err
	}
	text := c.Params["text"]
	if strings.TrimSpace(text) == "" {
		return nil, badRequest("message text is empty")
	}
	if utf16Len(text) > MaxMessageLength {
		return nil, badRequest("message is too long")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.sentMessageLocked(chat, map[string]any{"text": text})
	b.sent = append(b.sent, Message{MessageID: m["message_id"].(int64), Method: c.Method, ChatID: chat, Text: text,
		ReplyMarkup: c.Params["reply_markup"], At: c.At})
	b.changedLocked()
	return m, nil
}

func (b *Bot) sendFile(c Call, kind string) (any, *apiError) {
	chat, err := b.chatFor(c)
	if err != nil {
		return nil, err
	}
	caption := c.Params["caption"]
	if utf16Len(caption) > MaxCaptionLength {
		return nil, badRequest("message caption is too long")
	}
	up, ok := c.Files[kind]
	if !ok {
		if c.Params[kind] == "" {
			return nil, badRequest("there is no %s in the request", kind)
		}
		// A file_id of a file the server already has.
		b.mu.Lock()
		sf := b.files[c.Params[kind]]
		b.mu.Unlock()
		if sf == nil {
			return nil, badRequest("wrong file identifier/HTTP URL specified")
		}
		up = Upload{Field: kind, Size: int(sf.size), Data: sf.data}
	}
	if up.Size == 0 {
		return nil, badRequest("file must be non-empty")
	}
	if up.Name == "" {
		up.Name = c.Params["file_name"]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	sf := b.storeLocked(kind, up.Data, int64(up.Size))
	obj := map[string]any{"file_id": sf.id, "file_unique_id": sf.uniqueID, "file_size": sf.size}
	if up.Name != "" {
		obj["file_name"] = up.Name
	}
	var media any = obj
	if kind == "photo" {
		media = []any{obj}
	}
	extra := map[string]any{kind: media}
	if caption != "" {
		extra["caption"] = caption
	}
	m := b.sentMessageLocked(chat, extra)
	b.sent = append(b.sent, Message{MessageID: m["message_id"].(int64), Method: c.Method, ChatID: chat, Text: caption,
		ReplyMarkup: c.Params["reply_markup"], File: &up, At: c.At})
	b.changedLocked()
	return m, nil
}

func (b *Bot) answerCallback(c Call) (any, *apiError) {
	id := c.Params["callback_query_id"]
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.callbacks[id] {
		return nil, badRequest("query is too old and response timeout expired or query ID is invalid")
	}
	delete(b.callbacks, id)
	b.answers = append(b.answers, CallbackAnswer{CallbackID: id, Text: c.Params["text"], ShowAlert: c.Params["show_alert"] == "true"})
	b.changedLocked()
	return true, nil
}

func (b *Bot) editReplyMarkup(c Call) (any, *apiError) {
	chat := c.Params["chat_id"]
	id, _ := strconv.ParseInt(c.Params["message_id"], 10, 64)
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages[msgKey{chat, id}]
	if m == nil {
		return nil, badRequest("message to edit not found")
	}
	b.edits = append(b.edits, Edit{ChatID: chat, MessageID: id, ReplyMarkup: c.Params["reply_markup"]})
	b.changedLocked()
	return b.messageJSONLocked(chat, id, m), nil
}

// messageJSONLocked is the Message object of a message the bot sent, as
// an edit answers it.
func (b *Bot) messageJSONLocked(chat string, id int64, m *sentMsg) map[string]any {
	cid, _ := strconv.ParseInt(chat, 10, 64)
	out := map[string]any{"message_id": id, "from": map[string]any{"id": b.id, "is_bot": true,
		"first_name": b.username, "username": b.username}, "chat": chatJSON(cid), "date": b.s.now().Unix(),
		"edit_date": b.s.now().Unix()}
	if m.isText {
		out["text"] = m.text
	}
	return out
}

// notModified is Telegram's answer to an edit that would change nothing.
const notModified = "Bad Request: message is not modified: specified new message content and reply markup are " +
	"exactly the same as a current content and reply markup of the message"

// editText is editMessageText of a message the bot sent to a chat (inline
// messages, sent through inline mode, are not supported: Choir has none).
func (b *Bot) editText(c Call) (any, *apiError) {
	if c.Params["inline_message_id"] != "" {
		return nil, badRequest("inline messages are not supported by the fake")
	}
	chat, err := b.chatFor(c)
	if err != nil {
		return nil, err
	}
	id, perr := strconv.ParseInt(c.Params["message_id"], 10, 64)
	if perr != nil || id <= 0 {
		return nil, badRequest("message identifier is not specified")
	}
	text := c.Params["text"]
	if strings.TrimSpace(text) == "" {
		return nil, badRequest("message text is empty")
	}
	if utf16Len(text) > MaxMessageLength {
		return nil, badRequest("MESSAGE_TOO_LONG")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.messages[msgKey{chat, id}]
	switch {
	case m == nil:
		return nil, badRequest("message to edit not found")
	case !m.isText:
		return nil, badRequest("there is no text in the message to edit")
	case m.text == text:
		return nil, &apiError{code: http.StatusBadRequest, description: notModified}
	}
	m.text = text
	b.textEdits = append(b.textEdits, TextEdit{ChatID: chat, MessageID: id, Text: text, At: c.At})
	b.changedLocked()
	return b.messageJSONLocked(chat, id, m), nil
}

func (b *Bot) getFile(c Call) (any, *apiError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sf := b.files[c.Params["file_id"]]
	if sf == nil || sf.id != c.Params["file_id"] {
		return nil, badRequest("invalid file_id")
	}
	if sf.size > MaxDownloadBytes {
		return nil, badRequest("file is too big")
	}
	return map[string]any{"file_id": sf.id, "file_unique_id": sf.uniqueID, "file_size": sf.size, "file_path": sf.path}, nil
}

func (s *Server) serveFile(w http.ResponseWriter, token, path string) {
	b := s.bot(token)
	if b == nil {
		writeError(w, &apiError{code: http.StatusUnauthorized, description: "Unauthorized"})
		return
	}
	b.mu.Lock()
	sf := b.files[path]
	hooks := slices.Clone(b.downloads)
	b.mu.Unlock()
	for _, fn := range hooks {
		fn(path)
	}
	if sf == nil || sf.path != path || sf.size > MaxDownloadBytes {
		writeError(w, &apiError{code: http.StatusNotFound, description: "Not Found"})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(sf.data)))
	w.Write(sf.data) //nolint:errcheck // the client went away
}
