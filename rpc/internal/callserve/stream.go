package callserve

import (
	"fmt"
	"net/http"
	"time"

	"github.com/choirhq/choir/rpc/internal/stream"
)

// ServeStream serves the session's event stream on w until r ends, stop
// closes or the queue does, resuming after the push lastID names (read
// from the header lastIDHeader; a push of another epoch than this run's
// says nothing about this queue, which is then sent from its beginning).
// It refuses, having written nothing, a malformed lastID, one that names a
// push never sent, and a closed session.
func (st *Session) ServeStream(w http.ResponseWriter, r *http.Request, sessionID, lastIDHeader, epoch string, ping time.Duration, stop <-chan struct{}) *Refusal {
	var cursor uint64
	if last := r.Header.Get(lastIDHeader); last != "" {
		lastEpoch, seq, ok := stream.ParseEventID(last)
		if !ok {
			return refusef(BadRequest, "header %s: not a push ID (want <epoch>-<seq>)", lastIDHeader)
		}
		if lastEpoch == epoch {
			if seq > st.Pushes.Newest() {
				return refusef(BadRequest, "header %s: push %d was never sent", lastIDHeader, seq)
			}
			cursor = seq
		}
	}
	sub := st.Pushes.Attach()
	if sub == nil {
		return refuse(Unavailable, fmt.Sprintf("session %s is closed", sessionID))
	}
	defer st.Pushes.Detach(sub)
	stream.Serve(w, r, st.Pushes, sub, cursor, epoch, ping, stop)
	return nil
}
