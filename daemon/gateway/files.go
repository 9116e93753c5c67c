package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"unicode"

	tele "gopkg.in/telebot.v3"

	"github.com/choirhq/choir/daemon/outbox/message"
)

// RecvDir is where inbound files are stored, relative to the workspace.
const RecvDir = ".choirtmp/recv"

// errRefused means the user was told why their update was not taken; the
// update is done with.
var errRefused = errors.New("refused")

// media is the file a message carries.
type media struct {
	kind string
	file tele.File
	name string
	mime string
}

// mediaOf returns the file of m, if it carries one the gateway accepts.
func mediaOf(m *tele.Message) (media, bool) {
	switch {
	case m.Document != nil:
		return media{"document", m.Document.File, m.Document.FileName, m.Document.MIME}, true
	case m.Photo != nil:
		return media{"photo", m.Photo.File, "photo.jpg", "image/jpeg"}, true
	case m.Voice != nil:
		return media{"voice", m.Voice.File, "voice.ogg", m.Voice.MIME}, true
	case m.Video != nil:
		return media{"video", m.Video.File, cmp.Or(m.Video.FileName, "video.mp4"), m.Video.MIME}, true
	case m.VideoNote != nil:
		return media{"video", m.VideoNote.File, "video_note.mp4", "video/mp4"}, true
	case m.Audio != nil:
		return media{"audio", m.Audio.File, cmp.Or(m.Audio.FileName, "audio"), m.Audio.MIME}, true
	}
	return media{}, false
}

func megabytes(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/(1<<20)) }

// receiveFile downloads the file of an update into the workspace of the
// agent bound to dm and returns its attachment reference. It returns
// errRefused after telling the user why a file cannot be taken (too large,
// no agent bound), and other errors for failures worth retrying.
//
// The file name derives from the update id, so handling a redelivered
// update again overwrites the same file instead of leaving a second one.
func (b *bot) receiveFile(ctx context.Context, dm DM, updateID int64, chatID string, m media) (Attachment, error) {
	name := m.name
	if name == "" {
		name = m.kind
	}
	if m.file.FileSize > MaxDownloadBytes {
		b.reply(ctx, chatID, fmt.Sprintf("%s is %s: Telegram lets bots download at most 20 MB, so it was not stored. "+
			"Send a smaller file, or a link to it.", name, megabytes(m.file.FileSize)))
		return Attachment{}, errRefused
	}
	dir, err := b.g.opts.Workspaces.WorkspaceDir(ctx, dm)
	if errors.Is(err, ErrNotBound) {
		b.reply(ctx, chatID, fmt.Sprintf("No agent is running for this chat, so %s was not stored. "+
			"Start the agent first, then send the file again.", name))
		return Attachment{}, errRefused
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("find workspace of dm %s: %w", dm.Name, err)
	}

	var f tele.File
	fctx, cancel := context.WithTimeout(ctx, b.g.opts.FileTimeout)
	err = b.call(fctx, "getFile", map[string]any{"file_id": m.file.FileID}, &f)
	cancel()
	if err != nil {
		var api *APIError
		if errors.As(err, &api) && !api.Temporary() {
			b.reply(ctx, chatID, fmt.Sprintf("%s could not be downloaded (Telegram says: %s), so it was not stored.",
				name, api.Description))
			return Attachment{}, errRefused
		}
		return Attachment{}, err
	}
	if f.FileSize > MaxDownloadBytes {
		b.reply(ctx, chatID, fmt.Sprintf("%s is %s: Telegram lets bots download at most 20 MB, so it was not stored.",
			name, megabytes(f.FileSize)))
		return Attachment{}, errRefused
	}

	stored := fmt.Sprintf("%s-%d-%s", sanitizeName(b.name), updateID, sanitizeName(name))
	dctx, cancel := context.WithTimeout(ctx, b.g.opts.DownloadTimeout)
	n, err := b.download(dctx, f.FilePath, dir, stored)
	cancel()
	var se *storeError
	switch {
	case errors.Is(err, errTooLarge):
		b.reply(ctx, chatID, fmt.Sprintf("%s is over 20 MB, so it was not stored.", name))
		return Attachment{}, errRefused
	case errors.As(err, &se):
		// Not retried: a full disk or a workspace that refuses the file
		// would block every later update of this bot.
		b.g.logger.ErrorContext(ctx, "inbound file not stored", slog.String("gateway", b.name),
			slog.String("dm", dm.Name), slog.Int64("update_id", updateID), slog.String("error", err.Error()))
		b.reply(ctx, chatID, fmt.Sprintf("%s was not stored: the workspace cannot take it (%v).", name, se.err))
		return Attachment{}, errRefused
	case err != nil:
		return Attachment{}, err
	}
	return Attachment{Kind: m.kind, Path: RecvDir + "/" + stored, Name: m.name, MIME: m.mime, Size: n}, nil
}

var errTooLarge = errors.New("file too large")

// storeError is a failure to write a file into the workspace.
type storeError struct{ err error }

func (e *storeError) Error() string { return "store file in workspace: " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// writer records whether an io.Copy failed on the writing side.
type writer struct {
	w   io.Writer
	err error
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// download fetches a file from the Bot API's file endpoint into
// <workspace>/.choirtmp/recv/<name>, through a temporary file renamed into
// place, so the agent never sees a partial file. The rename replaces
// whatever the agent may have left at the name (a link, a FIFO) without
// opening it. All file operations go
// through an os.Root on the workspace: the agent can write in its
// workspace, and a symbolic link it plants there cannot redirect choird's
// writes outside it. Failures to write are *storeError; failures to read
// from Telegram are worth retrying.
func (b *bot) download(ctx context.Context, filePath, workspace, name string) (int64, error) {
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return 0, &storeError{err}
	}
	defer root.Close()
	if err := root.MkdirAll(RecvDir, 0o755); err != nil {
		return 0, &storeError{err}
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.g.opts.APIURL+"/file/bot"+b.currentToken()+"/"+filePath, nil)
	if err != nil {
		return 0, b.redact(fmt.Errorf("download file: %w", err))
	}
	resp, err := (&http.Client{Transport: b.g.opts.Transport}).Do(req)
	if err != nil {
		return 0, b.redact(fmt.Errorf("download file: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("download file: %s", resp.Status)
	}
	// The temporary name is unpredictable and created with O_EXCL, which
	// also refuses to follow a symbolic link: nothing the agent planted
	// in advance can stand in for it (a FIFO there would block the open,
	// and with it the bot's update loop).
	tmp := RecvDir + "/.part-" + rand.Text()
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return 0, &storeError{err}
	}
	w := &writer{w: out}
	n, err := io.Copy(w, io.LimitReader(resp.Body, MaxDownloadBytes+1))
	if cerr := out.Close(); cerr != nil && w.err == nil {
		w.err = cerr
	}
	switch {
	case w.err != nil:
		err = &storeError{w.err}
	case err != nil:
		err = b.redact(fmt.Errorf("download file: %w", err))
	case n > MaxDownloadBytes:
		err = errTooLarge
	default:
		if rerr := root.Rename(tmp, RecvDir+"/"+name); rerr != nil {
			err = &storeError{rerr}
		}
	}
	if err != nil {
		root.Remove(tmp) //nolint:errcheck // best effort; the error matters
		return 0, err
	}
	return n, nil
}

// maxNameRunes bounds a stored file name's user-given part.
const maxNameRunes = 100

// sanitizeName keeps letters, digits, dot, dash and underscore of a file
// name's last element and replaces the rest, so a name can neither leave
// the directory nor hide as a dot file.
func sanitizeName(name string) string {
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	var sb strings.Builder
	n := 0
	for _, r := range name {
		if n == maxNameRunes {
			break
		}
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '-' || r == '_' {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
		n++
	}
	s := strings.TrimLeft(sb.String(), ".")
	if s == "" {
		return "file"
	}
	return s
}

// openSendFile opens a file an agent left for sending. message.File opens
// it through an os.Root on its configured workspace, without blocking on a
// FIFO, and refuses anything but a regular file; this refuses empty files
// and files over Telegram's upload limit too. Every refusal is permanent:
// retrying cannot change it.
func openSendFile(file message.File) (*os.File, os.FileInfo, error) {
	f, fi, err := file.Open()
	if err != nil {
		return nil, nil, permanent(fmt.Errorf("open file to send: %w", err))
	}
	switch {
	case fi.Size() == 0:
		f.Close()
		return nil, nil, permanent(fmt.Errorf("file %s is empty", file.Path))
	case fi.Size() > MaxUploadBytes:
		f.Close()
		return nil, nil, permanent(fmt.Errorf("file %s is %s: Telegram bots can send at most 50 MB", file.Path, megabytes(fi.Size())))
	}
	return f, fi, nil
}

// isOggOpus reports whether f starts with an Ogg page carrying an Opus
// header, the only format Telegram plays as a voice message; f is rewound.
func isOggOpus(f *os.File) bool {
	buf := make([]byte, 64)
	n, _ := io.ReadFull(f, buf)
	f.Seek(0, io.SeekStart) //nolint:errcheck // a failed seek fails the upload visibly
	buf = buf[:n]
	return bytes.HasPrefix(buf, []byte("OggS")) && bytes.Contains(buf, []byte("OpusHead"))
}
