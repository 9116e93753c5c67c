package rpc

import (
	"encoding/json"
	"strconv"

	"github.com/choirhq/choir/rpc/internal/fastpath"
)

// jsonAppender is implemented by payloads encoded without reflection. It
// appends exactly the bytes json.Marshal would produce, or
// reports false for a value it leaves to json.Marshal.
type jsonAppender interface {
	appendJSON(dst []byte) ([]byte, bool)
}

// Encode encodes a payload as json.Marshal does, faster for the calls
// made most often.
func Encode(p Payload) ([]byte, error) {
	if a, ok := p.(jsonAppender); ok {
		if b, ok := a.appendJSON(nil); ok {
			return b, nil
		}
	}
	return json.Marshal(p)
}

// appendJSON encodes a heartbeat's response as json.Marshal does.
func (r HeartbeatResponse) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"ack_rev":`...)
	b = strconv.AppendInt(b, r.AckRev, 10)
	b = append(b, `,"config_version_latest":`...)
	b = strconv.AppendInt(b, r.ConfigVersionLatest, 10)
	return append(b, '}'), true
}

// appendJSON encodes a heartbeat, the agent's most frequent call. Its
// events' payloads are the bulk of it: a canonical payload, as the agent's
// log writes them, needs only encoding/json's HTML escaping, where
// json.Marshal would scan it again to compact and validate it.
func (r HeartbeatRequest) appendJSON(b []byte) ([]byte, bool) {
	if b == nil {
		n := 256
		for i := range r.Patches {
			n += 320 + len(r.Patches[i].Payload)
		}
		b = make([]byte, 0, n)
	}
	b = append(b, `{"base_rev":`...)
	b = strconv.AppendInt(b, r.BaseRev, 10)
	b = append(b, `,"new_rev":`...)
	b = strconv.AppendInt(b, r.NewRev, 10)
	b = append(b, `,"patches":`...)
	if r.Patches == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Patches {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = r.Patches[i].appendJSON(b); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"config_version":`...)
	b = strconv.AppendInt(b, r.ConfigVersion, 10)
	b = append(b, `,"hash_prev":`...)
	b = fastpath.AppendHash(b, r.HashPrev)
	b = append(b, `,"hash_new":`...)
	b = fastpath.AppendHash(b, r.HashNew)
	b = append(b, `,"timestamp":`...)
	var ok bool
	if b, ok = fastpath.AppendTime(b, r.Timestamp); !ok {
		return nil, false
	}
	if r.Snapshot != nil {
		sn, err := json.Marshal(r.Snapshot)
		if err != nil {
			return nil, false
		}
		b = append(b, `,"snapshot":`...)
		b = append(b, sn...)
	}
	return append(b, '}'), true
}

// appendJSON encodes an event as json.Marshal does.
func (e *Event) appendJSON(b []byte) ([]byte, bool) {
	return fastpath.AppendEvent(b, e.Rev, string(e.Type), e.Lane, e.Payload, e.CreatedAt, e.HashPrev, e.Hash)
}
