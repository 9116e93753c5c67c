// Package logfile owns choird's log files in .choir.d/logs (spec 22.2):
// [Writer], the active choird.log, which moves itself to
// archive/choird/<ts>.log.gz once it holds log_archive_threshold_lines
// lines, and [Archive], which moves an agent's <agent-id>.log to
// archive/<agent-id>/<ts>.log.gz when its session ends. An archive is a
// gzip of exactly the lines that left the active file.
package logfile

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stampLayout names archives: UTC, to the nanosecond, so that names sort
// in the order the archives were made.
const stampLayout = "20060102T150405.000000000Z"

// Options configure a [Writer].
type Options struct {
	// Threshold is the number of lines at which the active file is
	// archived; 0 or less never archives.
	Threshold int64
	// ErrorFunc receives archiving failures (the line that caused them
	// is written all the same); nil drops them.
	ErrorFunc func(error)
	// Now is the clock that names archives (default time.Now).
	Now func() time.Time
}

// Writer is an append-only log file that archives itself past a line
// threshold. It is safe for concurrent use: lines are counted as they are
// written and the file is rotated inside Write, under the writer's lock,
// so no line is lost or lands in two places. Each Write must hold whole
// lines, as slog's handlers write them.
type Writer struct {
	path, archiveDir string
	opts             Options

	mu    sync.Mutex
	f     *os.File
	lines int64
	// pending counts archives still being compressed.
	pending sync.WaitGroup
}

// Open opens (or creates) the log at path, archiving into archiveDir. Raw
// archives that a previous run left uncompressed are compressed first.
func Open(path, archiveDir string, opts Options) (*Writer, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create log directory: %w", err)
	}
	if err := compressLeftovers(archiveDir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Base(path), err)
	}
	lines, err := countLines(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &Writer{path: path, archiveDir: archiveDir, opts: opts, f: f, lines: lines}, nil
}

// SetThreshold changes the line threshold (config.json's
// log_archive_threshold_lines is hot-reloadable); a file already past it
// is archived at its next line.
func (w *Writer) SetThreshold(n int64) {
	w.mu.Lock()
	w.opts.Threshold = n
	w.mu.Unlock()
}

// Write appends p, and archives the file once it holds the threshold's
// number of lines.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, fs.ErrClosed
	}
	n, err := w.f.Write(p)
	w.lines += int64(bytes.Count(p[:n], []byte{'\n'}))
	if err == nil && w.opts.Threshold > 0 && w.lines >= w.opts.Threshold {
		if rerr := w.rotate(); rerr != nil && w.opts.ErrorFunc != nil {
			w.opts.ErrorFunc(rerr)
		}
	}
	return n, err
}

// rotate moves the active file into the archive directory and opens a new
// one; the moved file is compressed in the background. w.mu is held.
func (w *Writer) rotate() error {
	raw, err := reserve(w.archiveDir, w.opts.Now())
	if err != nil {
		return fmt.Errorf("archive %s: %w", w.path, err)
	}
	if err := os.Rename(w.path, raw); err != nil {
		os.Remove(raw)
		return fmt.Errorf("archive %s: %w", w.path, err)
	}
	f, err := os.OpenFile(w.path, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		// Lines keep going to the moved file, which is compressed when
		// the writer is next opened.
		return fmt.Errorf("reopen %s after archiving: %w", w.path, err)
	}
	w.f.Close()
	w.f, w.lines = f, 0
	w.pending.Add(1)
	go func() {
		defer w.pending.Done()
		if err := compress(raw); err != nil && w.opts.ErrorFunc != nil {
			w.opts.ErrorFunc(err)
		}
	}()
	return nil
}

// Close closes the file and waits for archives still being compressed.
func (w *Writer) Close() error {
	w.mu.Lock()
	var err error
	if w.f != nil {
		err = w.f.Close()
		w.f = nil
	}
	w.mu.Unlock()
	w.pending.Wait()
	return err
}

// Archive moves the log at path to archiveDir/<ts>.log.gz and returns the
// archive's path. A missing or empty log is removed and archives nothing
// (""). Whoever writes the log must have stopped: an agent's log is
// archived once its instance has exited.
func Archive(path, archiveDir string, now time.Time) (string, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	if st.Size() == 0 {
		return "", os.Remove(path)
	}
	raw, err := reserve(archiveDir, now)
	if err != nil {
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	if err := os.Rename(path, raw); err != nil {
		os.Remove(raw)
		return "", fmt.Errorf("archive %s: %w", path, err)
	}
	if err := compress(raw); err != nil {
		return "", err
	}
	return raw + ".gz", nil
}

// reserve creates archiveDir/<stamp>.log, empty, with a name that neither
// it nor its .gz already has.
func reserve(archiveDir string, now time.Time) (string, error) {
	if err := os.MkdirAll(archiveDir, 0o700); err != nil {
		return "", err
	}
	stamp := now.UTC().Format(stampLayout)
	for i := 0; ; i++ {
		name := stamp
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		p := filepath.Join(archiveDir, name+".log")
		if _, err := os.Stat(p + ".gz"); err == nil {
			continue
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return p, f.Close()
	}
}

// compress writes raw.gz (through a temporary file, so that a .gz is
// always whole) and removes raw.
func compress(raw string) error {
	in, err := os.Open(raw)
	if err != nil {
		return fmt.Errorf("compress %s: %w", raw, err)
	}
	defer in.Close()
	tmp := raw + ".gz.tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("compress %s: %w", raw, err)
	}
	zw := gzip.NewWriter(out)
	zw.Name = filepath.Base(raw)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, raw+".gz")
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compress %s: %w", raw, err)
	}
	return os.Remove(raw)
}

// compressLeftovers compresses the raw archives of a run that stopped
// before it had compressed them.
func compressLeftovers(archiveDir string) error {
	entries, err := os.ReadDir(archiveDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", archiveDir, err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") && e.Type().IsRegular() {
			if err := compress(filepath.Join(archiveDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func countLines(f *os.File) (int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	var n int64
	r := bufio.NewReaderSize(f, 64<<10)
	buf := make([]byte, 64<<10)
	for {
		k, err := r.Read(buf)
		n += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
