package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// Event is one event of a text/event-stream, or a comment.
type Event struct {
	ID, Event string
	Data      []byte
	Comment   bool
}

// Reader parses a text/event-stream (the subset choird writes, read
// leniently as the standard asks: unknown fields are ignored).
type Reader struct {
	br  *bufio.Reader
	max int
}

// NewReader reads events of at most maxEvent bytes from r.
func NewReader(r io.Reader, maxEvent int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 16<<10), max: maxEvent}
}

// readLine returns the next line without its terminator (LF, CRLF or CR
// before LF), refusing lines over max.
func (r *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(line)+len(frag) > r.max+2 {
			return nil, fmt.Errorf("event stream line over %d bytes", r.max)
		}
		line = append(line, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}

// Next returns the next event, or a comment that arrives between events
// (which only proves the connection alive).
func (r *Reader) Next() (Event, error) {
	var ev Event
	started := false
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if started {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			if !started {
				return Event{Comment: true}, nil
			}
			continue
		}
		started = true
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.ID = string(value)
		case "event":
			ev.Event = string(value)
		case "data":
			if len(ev.Data)+len(value)+1 > r.max {
				return Event{}, fmt.Errorf("event over %d bytes", r.max)
			}
			if ev.Data != nil {
				ev.Data = append(ev.Data, '\n')
			}
			ev.Data = append(ev.Data, value...)
		}
	}
}
