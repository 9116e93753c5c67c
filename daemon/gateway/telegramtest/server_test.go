package telegramtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	tele "gopkg.in/telebot.v3"

	"github.com/choirhq/choir/daemon/gateway/telegramtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const token = "123456:TEST-token"

func newBot(t *testing.T) (*telegramtest.Server, *telegramtest.Bot, *tele.Bot) {
	t.Helper()
	s := telegramtest.NewServer(t)
	fb := s.AddBot(token, "choir_test_bot")
	client := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	tb, err := tele.NewBot(tele.Settings{URL: s.URL(), Token: token, Client: client, Offline: false})
	if err != nil {
		t.Fatalf("new bot: %v", err)
	}
	return s, fb, tb
}

type updatesResp struct {
	OK          bool          `json:"ok"`
	Result      []tele.Update `json:"result"`
	ErrorCode   int           `json:"error_code"`
	Description string        `json:"description"`
}

// getUpdates calls the method over plain HTTP, as the gateway's poller does.
func getUpdates(t *testing.T, s *telegramtest.Server, tok string, offset int64, timeout int) updatesResp {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"offset": offset, "timeout": timeout})
	resp, err := http.Post(s.URL()+"/bot"+tok+"/getUpdates", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("getUpdates: %v", err)
	}
	defer resp.Body.Close()
	var r updatesResp
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("decode getUpdates: %v", err)
	}
	return r
}

func ids(us []tele.Update) []int {
	var out []int
	for _, u := range us {
		out = append(out, u.ID)
	}
	return out
}

func TestServer(t *testing.T) {
	t.Parallel()

	t.Run("GetMeAnswersTheBot", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		if tb.Me.Username != fb.Username() || tb.Me.ID != fb.ID() || !tb.Me.IsBot {
			t.Errorf("getMe = %+v", tb.Me)
		}
	})

	t.Run("UnknownTokenIsUnauthorized", func(t *testing.T) {
		t.Parallel()
		s := telegramtest.NewServer(t)
		_, err := tele.NewBot(tele.Settings{URL: s.URL(), Token: "nope"})
		if !errors.Is(err, tele.ErrUnauthorized) {
			t.Errorf("err = %v, want unauthorized", err)
		}
	})

	t.Run("OffsetConfirmsAndDropsUpdates", func(t *testing.T) {
		t.Parallel()
		s, fb, _ := newBot(t)
		u1 := fb.SendText(1, "one")
		fb.SendText(1, "two")
		u3 := fb.SendText(1, "three")
		if r := getUpdates(t, s, token, 0, 0); len(r.Result) != 3 || r.Result[0].Message.Text != "one" {
			t.Fatalf("first poll = %v", ids(r.Result))
		}
		// Offset 0 again: nothing was confirmed, everything comes back.
		if r := getUpdates(t, s, token, 0, 0); len(r.Result) != 3 {
			t.Fatalf("unconfirmed updates not redelivered: %v", ids(r.Result))
		}
		if r := getUpdates(t, s, token, u1+1, 0); len(r.Result) != 2 {
			t.Fatalf("poll past first = %v", ids(r.Result))
		}
		// Update 1 is gone for good, even asking from the start.
		if r := getUpdates(t, s, token, 0, 0); len(r.Result) != 2 || int64(r.Result[0].ID) != u1+1 {
			t.Fatalf("confirmed update came back: %v", ids(r.Result))
		}
		getUpdates(t, s, token, u3+1, 0)
		if p := fb.Pending(); len(p) != 0 {
			t.Errorf("pending after confirming all = %v", p)
		}
	})

	t.Run("LongPollWaitsForAnUpdate", func(t *testing.T) {
		t.Parallel()
		s, fb, _ := newBot(t)
		polling := make(chan struct{}, 1)
		fb.OnCall("getUpdates", func(telegramtest.Call) { polling <- struct{}{} })
		got := make(chan updatesResp, 1)
		go func() { got <- getUpdates(t, s, token, 0, 20) }()
		<-polling
		select {
		case r := <-got:
			t.Fatalf("long poll returned before any update: %+v", r)
		default:
		}
		id := fb.SendText(7, "wake up")
		r := <-got
		if len(r.Result) != 1 || int64(r.Result[0].ID) != id || r.Result[0].Message.Sender.ID != 7 {
			t.Fatalf("long poll = %+v", r)
		}
	})

	t.Run("LongPollTimesOutEmpty", func(t *testing.T) {
		t.Parallel()
		s, _, _ := newBot(t)
		r := getUpdates(t, s, token, 0, 1)
		if !r.OK || len(r.Result) != 0 {
			t.Errorf("empty poll = %+v", r)
		}
	})

	t.Run("SecondPollerEndsTheFirstWithConflict", func(t *testing.T) {
		t.Parallel()
		s, fb, _ := newBot(t)
		polling := make(chan struct{}, 2)
		fb.OnCall("getUpdates", func(telegramtest.Call) { polling <- struct{}{} })
		first := make(chan updatesResp, 1)
		go func() { first <- getUpdates(t, s, token, 0, 20) }()
		<-polling
		second := make(chan updatesResp, 1)
		go func() { second <- getUpdates(t, s, token, 0, 1) }()
		r := <-first
		if r.ErrorCode != http.StatusConflict {
			t.Errorf("first poller = %+v, want 409", r)
		}
		<-second
	})

	t.Run("SendMessageRecordsTextAndKeyboard", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		markup := &tele.ReplyMarkup{InlineKeyboard: [][]tele.InlineButton{{
			{Text: "Approve", Unique: "approve", Data: "42"}, {Text: "Reject", Data: "reject:42"},
		}}}
		msg, err := tb.Send(&tele.Chat{ID: 5}, "hello", markup)
		if err != nil {
			t.Fatal(err)
		}
		sent := fb.Sent()
		if len(sent) != 1 || sent[0].Text != "hello" || sent[0].ChatID != "5" || sent[0].MessageID != int64(msg.ID) {
			t.Fatalf("sent = %+v (message %d)", sent, msg.ID)
		}
		kb := sent[0].Keyboard()
		if len(kb) != 1 || kb[0][0].Data != "\fapprove|42" || kb[0][1].Data != "reject:42" {
			t.Errorf("keyboard = %+v", kb)
		}
	})

	t.Run("SendMessageEnforcesLimits", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		if _, err := tb.Send(&tele.Chat{ID: 5}, strings.Repeat("a", telegramtest.MaxMessageLength)); err != nil {
			t.Errorf("4096 characters refused: %v", err)
		}
		if _, err := tb.Send(&tele.Chat{ID: 5}, strings.Repeat("a", telegramtest.MaxMessageLength+1)); !errors.Is(err, tele.ErrTooLongMessage) {
			t.Errorf("4097 characters: err = %v", err)
		}
		// Characters outside the BMP count twice, as UTF-16 code units.
		if _, err := tb.Send(&tele.Chat{ID: 5}, strings.Repeat("😀", 2049)); !errors.Is(err, tele.ErrTooLongMessage) {
			t.Errorf("4098 UTF-16 units: err = %v", err)
		}
		fb.Block(6)
		if _, err := tb.Send(&tele.Chat{ID: 6}, "hi"); !errors.Is(err, tele.ErrBlockedByUser) {
			t.Errorf("blocked chat: err = %v", err)
		}
		if n := len(fb.Sent()); n != 1 {
			t.Errorf("%d messages recorded, want 1", n)
		}
	})

	t.Run("FilesAreMultipartUploads", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		chat := &tele.Chat{ID: 9}
		sends := []struct {
			what   tele.Sendable
			method string
			name   string
			data   string
		}{
			{&tele.Document{File: tele.FromReader(strings.NewReader("doc-bytes")), FileName: "report.pdf", Caption: "the report"}, "sendDocument", "report.pdf", "doc-bytes"},
			{&tele.Photo{File: tele.FromReader(strings.NewReader("jpeg"))}, "sendPhoto", "", "jpeg"},
			{&tele.Voice{File: tele.FromReader(strings.NewReader("opus")), MIME: "audio/ogg"}, "sendVoice", "", "opus"},
			{&tele.Video{File: tele.FromReader(strings.NewReader("mp4!")), FileName: "clip.mp4"}, "sendVideo", "clip.mp4", "mp4!"},
		}
		for _, s := range sends {
			if _, err := tb.Send(chat, s.what); err != nil {
				t.Fatalf("%s: %v", s.method, err)
			}
		}
		sent := fb.Sent()
		if len(sent) != len(sends) {
			t.Fatalf("%d sent, want %d", len(sent), len(sends))
		}
		for i, s := range sends {
			m := sent[i]
			if m.Method != s.method || m.File == nil || m.File.Name != s.name || string(m.File.Data) != s.data || m.File.Size != len(s.data) {
				t.Errorf("send %d = %s %+v, want %s %q %q", i, m.Method, m.File, s.method, s.name, s.data)
			}
		}
		if sent[0].Text != "the report" {
			t.Errorf("caption = %q", sent[0].Text)
		}
	})

	t.Run("InjectedTooManyRequestsCarryRetryAfter", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		fb.TooManyRequests("sendMessage", 2, 7)
		for range 2 {
			_, err := tb.Send(&tele.Chat{ID: 5}, "hi")
			var flood tele.FloodError
			if !errors.As(err, &flood) || flood.RetryAfter != 7 {
				t.Fatalf("err = %v, want flood error with retry_after 7", err)
			}
		}
		if _, err := tb.Send(&tele.Chat{ID: 5}, "hi"); err != nil {
			t.Fatalf("third send: %v", err)
		}
		calls := fb.Calls("sendMessage")
		if len(calls) != 3 || calls[0].Status != http.StatusTooManyRequests || calls[2].Status != http.StatusOK {
			t.Errorf("calls = %+v", calls)
		}
		if len(fb.Sent()) != 1 {
			t.Errorf("refused sends were recorded as sent: %+v", fb.Sent())
		}
	})

	t.Run("GetFileAndDownload", func(t *testing.T) {
		t.Parallel()
		s, fb, tb := newBot(t)
		fb.SendFile(3, telegramtest.File{Kind: telegramtest.Document, Name: "notes.txt", Data: []byte("some notes")})
		fb.SendFile(3, telegramtest.File{Kind: telegramtest.Video, Name: "huge.mp4", Size: telegramtest.MaxDownloadBytes + 1})
		r := getUpdates(t, s, token, 0, 0)
		if len(r.Result) != 2 {
			t.Fatalf("updates = %v", ids(r.Result))
		}
		doc := r.Result[0].Message.Document
		rc, err := tb.File(&doc.File)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if string(data) != "some notes" || doc.FileName != "notes.txt" || doc.FileSize != 10 {
			t.Errorf("download = %q, document = %+v", data, doc)
		}
		if _, err := tb.FileByID(r.Result[1].Message.Video.FileID); err == nil {
			t.Error("getFile of a file over 20 MB succeeded")
		}
	})

	t.Run("PhotoArrivesAsSizes", func(t *testing.T) {
		t.Parallel()
		s, fb, _ := newBot(t)
		fb.SendFile(3, telegramtest.File{Kind: telegramtest.Photo, Data: []byte("big photo"), Caption: "look"})
		r := getUpdates(t, s, token, 0, 0)
		m := r.Result[0].Message
		if m.Photo == nil || m.Photo.FileSize != 9 || m.Caption != "look" {
			t.Errorf("photo = %+v caption %q", m.Photo, m.Caption)
		}
	})

	t.Run("CallbackQueriesAreAnsweredOnce", func(t *testing.T) {
		t.Parallel()
		s, fb, tb := newBot(t)
		msg, err := tb.Send(&tele.Chat{ID: 4}, "approve?")
		if err != nil {
			t.Fatal(err)
		}
		_, cbID := fb.PressButton(4, int64(msg.ID), "\fapprove|42")
		r := getUpdates(t, s, token, 0, 0)
		cb := r.Result[0].Callback
		if cb == nil || cb.ID != cbID || cb.Data != "\fapprove|42" || cb.Sender.ID != 4 || cb.Message.ID != msg.ID {
			t.Fatalf("callback = %+v", cb)
		}
		if err := tb.Respond(cb, &tele.CallbackResponse{Text: "Approved"}); err != nil {
			t.Fatal(err)
		}
		if err := tb.Respond(cb, &tele.CallbackResponse{Text: "again"}); err == nil {
			t.Error("second answer of one query succeeded")
		}
		if a := fb.Answers(); len(a) != 1 || a[0].Text != "Approved" {
			t.Errorf("answers = %+v", a)
		}
		if _, err := tb.EditReplyMarkup(msg, nil); err != nil {
			t.Errorf("edit own message: %v", err)
		}
		if _, err := tb.EditReplyMarkup(&tele.Message{ID: 999, Chat: &tele.Chat{ID: 4}}, nil); err == nil {
			t.Error("edit of an unknown message succeeded")
		}
		if e := fb.Edits(); len(e) != 1 || e[0].MessageID != int64(msg.ID) {
			t.Errorf("edits = %+v", e)
		}
	})

	t.Run("EditMessageTextChangesTheTextAsTelegramDoes", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		msg, err := tb.Send(&tele.Chat{ID: 5}, "step 1")
		if err != nil {
			t.Fatal(err)
		}
		edited, err := tb.Edit(msg, "step 2")
		if err != nil || edited.Text != "step 2" || edited.ID != msg.ID || edited.LastEdit == 0 {
			t.Fatalf("edit = %+v, %v", edited, err)
		}
		if text, ok := fb.MessageText(5, int64(msg.ID)); !ok || text != "step 2" {
			t.Errorf("text after the edit = %q, %v", text, ok)
		}
		// The same text again is refused, as Telegram refuses it.
		if _, err := tb.Edit(msg, "step 2"); !errors.Is(err, tele.ErrSameMessageContent) {
			t.Errorf("unchanged edit: %v, want %v", err, tele.ErrSameMessageContent)
		}
		if _, err := tb.Edit(msg, " "); err == nil || !strings.Contains(err.Error(), "message text is empty") {
			t.Errorf("empty edit: %v", err)
		}
		if _, err := tb.Edit(msg, strings.Repeat("x", telegramtest.MaxMessageLength+1)); err == nil {
			t.Error("a text over 4096 characters was accepted")
		}
		if _, err := tb.Edit(&tele.Message{ID: 999, Chat: &tele.Chat{ID: 5}}, "x"); err == nil ||
			!strings.Contains(err.Error(), "message to edit not found") {
			t.Errorf("edit of an unknown message: %v", err)
		}
		doc, err := tb.Send(&tele.Chat{ID: 5}, &tele.Document{File: tele.FromReader(strings.NewReader("data")), FileName: "a.txt"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tb.Edit(doc, "caption?"); err == nil || !strings.Contains(err.Error(), "no text in the message") {
			t.Errorf("text edit of a file: %v", err)
		}
		fb.DeleteMessage(5, int64(msg.ID))
		if _, err := tb.Edit(msg, "step 3"); err == nil || !strings.Contains(err.Error(), "message to edit not found") {
			t.Errorf("edit of a deleted message: %v", err)
		}
		if e := fb.TextEdits(); len(e) != 1 || e[0].Text != "step 2" || e[0].ChatID != "5" || e[0].MessageID != int64(msg.ID) {
			t.Errorf("text edits = %+v", e)
		}
	})

	t.Run("ChatActionsAreRecorded", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		if err := tb.Notify(&tele.Chat{ID: 8}, tele.Typing); err != nil {
			t.Fatal(err)
		}
		if a := fb.ChatActions(); len(a) != 1 || a[0].ChatID != "8" || a[0].Action != "typing" {
			t.Errorf("actions = %+v", a)
		}
	})

	t.Run("FormAndQueryParametersAreAccepted", func(t *testing.T) {
		t.Parallel()
		s, fb, _ := newBot(t)
		resp, err := http.PostForm(s.URL()+"/bot"+token+"/sendMessage?chat_id=11", url.Values{"text": {"form text"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if sent := fb.Sent(); len(sent) != 1 || sent[0].ChatID != "11" || sent[0].Text != "form text" {
			t.Errorf("sent = %+v", sent)
		}
	})

	t.Run("BotsAreSeparate", func(t *testing.T) {
		t.Parallel()
		s, fb, tb := newBot(t)
		other := s.AddBot("999:other", "other_bot")
		other.SendText(1, "for the other bot")
		if r := getUpdates(t, s, token, 0, 0); len(r.Result) != 0 {
			t.Errorf("first bot got the other's update: %v", ids(r.Result))
		}
		if r := getUpdates(t, s, "999:other", 0, 0); len(r.Result) != 1 {
			t.Errorf("other bot updates = %v", ids(r.Result))
		}
		tb.Send(&tele.Chat{ID: 1}, "from first") //nolint:errcheck
		if len(other.Sent()) != 0 || len(fb.Sent()) != 1 {
			t.Errorf("sent: first %d, other %d", len(fb.Sent()), len(other.Sent()))
		}
	})

	t.Run("WaitSeesLaterChanges", func(t *testing.T) {
		t.Parallel()
		_, fb, tb := newBot(t)
		go tb.Send(&tele.Chat{ID: 1}, "later") //nolint:errcheck
		if got := fb.WaitSent(t, 1); got[0].Text != "later" {
			t.Errorf("sent = %+v", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := fb.Wait(ctx, func() bool { return false }); !errors.Is(err, context.Canceled) {
			t.Errorf("wait on a cancelled context = %v", err)
		}
	})
}
