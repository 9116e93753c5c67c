package stream

import (
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrFull is returned by Queue.Add when the queue already holds as many
// pushes as it may that no event stream has taken.
var ErrFull = errors.New("push buffer full")

// Queue holds a session's pushes, encoded, in sequence order.
//
// Pushes stay in the queue after they are written to a stream, because a
// write that succeeded may still not reach the agent; a reconnecting agent
// resumes from the last push it saw (Last-Event-ID). The queue holds at
// most cap pushes: a new push evicts the oldest written one, and is refused
// (ErrFull) when all cap are still unwritten.
type Queue struct {
	mu      sync.Mutex
	cap     int
	last    uint64 // sequence number of the newest push
	written uint64 // highest sequence number written to a stream
	items   []Item
	sub     *Subscriber
	closed  bool
}

// Item is a queued push: its sequence number, kind and encoding.
type Item struct {
	Seq  uint64
	Kind string
	Data []byte
}

// Subscriber is the event stream currently attached to a queue. There is
// at most one: a new stream of the same session replaces the old one, which
// is then likely a dead connection the agent has given up on.
type Subscriber struct {
	Notify chan struct{} // a push is waiting; capacity 1
	Gone   chan struct{} // closed when replaced or the session is closed
}

// NewQueue returns an empty queue that holds at most capacity pushes.
func NewQueue(capacity int) *Queue { return &Queue{cap: capacity} }

// Add queues a push of kind, which encode renders given its sequence
// number, and returns that number.
func (q *Queue) Add(kind string, encode func(seq uint64) ([]byte, error)) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last-q.written >= uint64(q.cap) {
		return 0, fmt.Errorf("%w: %d pushes not yet taken by an event stream", ErrFull, q.last-q.written)
	}
	data, err := encode(q.last + 1)
	if err != nil {
		return 0, fmt.Errorf("encode push: %w", err)
	}
	q.last++
	if len(q.items) == q.cap {
		q.items[0] = Item{}
		q.items = q.items[1:]
	}
	q.items = append(q.items, Item{Seq: q.last, Kind: kind, Data: data})
	if q.sub != nil {
		select {
		case q.sub.Notify <- struct{}{}:
		default:
		}
	}
	return q.last, nil
}

// Since returns the pushes after seq. The slice is clipped, so later
// appends to the queue never write into it.
func (q *Queue) Since(seq uint64) []Item {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	// Sequence numbers in the queue are consecutive.
	i := 0
	if first := q.items[0].Seq; seq >= first {
		i = int(min(seq-first+1, uint64(len(q.items))))
	}
	return slices.Clip(q.items[i:])
}

// MarkWritten records that the pushes through seq were written to a
// stream.
func (q *Queue) MarkWritten(seq uint64) {
	q.mu.Lock()
	q.written = max(q.written, seq)
	q.mu.Unlock()
}

// Newest returns the sequence number of the newest push.
func (q *Queue) Newest() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

// Attach makes a new stream the queue's subscriber, replacing the old
// one; nil if the queue is closed.
func (q *Queue) Attach() *Subscriber {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if q.sub != nil {
		close(q.sub.Gone)
	}
	q.sub = &Subscriber{Notify: make(chan struct{}, 1), Gone: make(chan struct{})}
	return q.sub
}

// Detach removes s, if it is still the subscriber.
func (q *Queue) Detach(s *Subscriber) {
	q.mu.Lock()
	if q.sub == s {
		q.sub = nil
	}
	q.mu.Unlock()
}

// Attached reports whether a stream is attached.
func (q *Queue) Attached() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sub != nil
}

// Close ends the attached stream and refuses new ones.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.sub != nil {
		close(q.sub.Gone)
		q.sub = nil
	}
}
