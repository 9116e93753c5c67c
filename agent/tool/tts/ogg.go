package tts

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// This file joins Ogg Opus streams (RFC 3533, RFC 7845) without decoding
// them: the provider answers each part of a long text as a whole Ogg Opus
// stream, and Telegram plays a voice message as one logical stream, so the
// parts' audio packets are re-paged into the first part's stream with
// running granule positions. Chaining the streams instead (concatenating
// the files) is valid Ogg, but players, Telegram's among them, commonly
// stop at the end of the first link.

// ErrNotOggOpus is returned for audio that is not an Ogg Opus stream.
var ErrNotOggOpus = errors.New("not an Ogg Opus stream")

// oggPage is one parsed Ogg page.
type oggPage struct {
	headerType byte
	granule    int64
	serial     uint32
	segments   []byte // lacing values
	body       []byte
}

const (
	oggContinued = 0x01
	oggBOS       = 0x02
	oggEOS       = 0x04
)

// parseOggPages splits data into Ogg pages, checking each page's capture
// pattern, version, length and CRC.
func parseOggPages(data []byte) ([]oggPage, error) {
	var pages []oggPage
	for len(data) > 0 {
		if len(data) < 27 || !bytes.Equal(data[:4], []byte("OggS")) || data[4] != 0 {
			return nil, fmt.Errorf("%w: no Ogg page at byte offset %d", ErrNotOggOpus, len(data))
		}
		n := int(data[26])
		if len(data) < 27+n {
			return nil, fmt.Errorf("%w: truncated page header", ErrNotOggOpus)
		}
		segs := data[27 : 27+n]
		size := 0
		for _, s := range segs {
			size += int(s)
		}
		end := 27 + n + size
		if len(data) < end {
			return nil, fmt.Errorf("%w: truncated page", ErrNotOggOpus)
		}
		raw := bytes.Clone(data[:end])
		want := binary.LittleEndian.Uint32(raw[22:26])
		clear(raw[22:26])
		if oggCRC(raw) != want {
			return nil, fmt.Errorf("%w: page CRC mismatch", ErrNotOggOpus)
		}
		pages = append(pages, oggPage{headerType: data[5], granule: int64(binary.LittleEndian.Uint64(data[6:14])),
			serial: binary.LittleEndian.Uint32(data[14:18]), segments: segs, body: data[27+n : end]})
		data = data[end:]
	}
	if len(pages) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrNotOggOpus)
	}
	return pages, nil
}

// opusStream is one Ogg Opus logical stream taken apart.
type opusStream struct {
	head, tags []byte
	packets    [][]byte
	preSkip    int
	// final is the last page's granule position: the stream's length in
	// 48 kHz samples including the pre-skip, shorter than the packets'
	// total by the end trim.
	final int64
}

// parseOpus reads the packets of the first logical stream of data and
// checks that it is Opus: an OpusHead packet, then OpusTags.
func parseOpus(data []byte) (*opusStream, error) {
	pages, err := parseOggPages(data)
	if err != nil {
		return nil, err
	}
	serial := pages[0].serial
	var packets [][]byte
	var cur []byte
	st := &opusStream{}
	for _, p := range pages {
		if p.serial != serial {
			continue
		}
		off := 0
		for _, l := range p.segments {
			cur = append(cur, p.body[off:off+int(l)]...)
			off += int(l)
			if l < 255 {
				packets = append(packets, cur)
				cur = nil
			}
		}
		st.final = p.granule
	}
	if len(packets) < 2 || !bytes.HasPrefix(packets[0], []byte("OpusHead")) || len(packets[0]) < 19 {
		return nil, fmt.Errorf("%w: the first packet is not OpusHead", ErrNotOggOpus)
	}
	if !bytes.HasPrefix(packets[1], []byte("OpusTags")) {
		return nil, fmt.Errorf("%w: the second packet is not OpusTags", ErrNotOggOpus)
	}
	st.head, st.tags, st.packets = packets[0], packets[1], packets[2:]
	st.preSkip = int(binary.LittleEndian.Uint16(packets[0][10:12]))
	return st, nil
}

// packetSamples is the duration of an Opus packet in 48 kHz samples, from
// its TOC byte (RFC 6716 section 3.1).
func packetSamples(p []byte) int {
	if len(p) == 0 {
		return 0
	}
	toc := p[0]
	cfg := int(toc >> 3)
	var frame int
	switch {
	case cfg < 12: // SILK: 10, 20, 40, 60 ms
		frame = []int{480, 960, 1920, 2880}[cfg%4]
	case cfg < 16: // hybrid: 10, 20 ms
		frame = []int{480, 960}[cfg%2]
	default: // CELT: 2.5, 5, 10, 20 ms
		frame = []int{120, 240, 480, 960}[cfg%4]
	}
	switch toc & 3 {
	case 0:
		return frame
	case 1, 2:
		return 2 * frame
	}
	if len(p) < 2 {
		return 0
	}
	return frame * int(p[1]&0x3f)
}

// joinOpus joins Ogg Opus streams into one: the first stream's headers,
// then every stream's audio packets, re-paged under one serial number with
// running granule positions. The streams must share channel count and
// input rate (one voice profile makes them all). The last stream's end
// trim is kept; each later stream's pre-skip plays as the few
// milliseconds of decoder warm-up it is.
func joinOpus(parts [][]byte) ([]byte, error) {
	if len(parts) == 1 {
		if _, err := parseOpus(parts[0]); err != nil {
			return nil, err
		}
		return parts[0], nil
	}
	var streams []*opusStream
	for i, p := range parts {
		st, err := parseOpus(p)
		if err != nil {
			return nil, fmt.Errorf("part %d: %w", i+1, err)
		}
		if i > 0 && st.head[9] != streams[0].head[9] {
			return nil, fmt.Errorf("part %d has %d channels, part 1 has %d: cannot join", i+1, st.head[9], streams[0].head[9])
		}
		streams = append(streams, st)
	}
	w := &oggWriter{serial: 0x63686f72} // "chor"
	w.page([][]byte{streams[0].head}, 0, oggBOS)
	w.page([][]byte{streams[0].tags}, 0, 0)
	var granule int64
	var batch [][]byte
	batchSegs, eos := 0, false
	for si, st := range streams {
		total := 0
		for _, p := range st.packets {
			total += packetSamples(p)
		}
		trim := 0
		if si == len(streams)-1 && st.final > 0 && int(st.final) < total {
			trim = total - int(st.final)
		}
		for pi, p := range st.packets {
			segs := len(p)/255 + 1
			if segs > 255 {
				return nil, fmt.Errorf("part %d: an Opus packet of %d bytes is larger than one Ogg page holds", si+1, len(p))
			}
			if batchSegs+segs > 255 {
				// The page is full: close it at the packets before this one.
				w.page(batch, granule, 0)
				batch, batchSegs = nil, 0
			}
			granule += int64(packetSamples(p))
			batch = append(batch, p)
			batchSegs += segs
			last := si == len(streams)-1 && pi == len(st.packets)-1
			if last || len(batch) >= 50 {
				g, flags := granule, byte(0)
				if last {
					g, flags = granule-int64(min(trim, packetSamples(p))), oggEOS
				}
				w.page(batch, g, flags)
				batch, batchSegs = nil, 0
				eos = last
			}
		}
	}
	if !eos { // the last part had no audio packets
		w.page(batch, granule, oggEOS)
	}
	return w.buf.Bytes(), nil
}

// oggWriter writes the pages of one logical stream.
type oggWriter struct {
	buf    bytes.Buffer
	serial uint32
	seq    uint32
}

// page writes whole packets as one page; the caller keeps their lacing
// values within the 255 a page holds.
func (w *oggWriter) page(packets [][]byte, granule int64, flags byte) {
	var segs []byte
	var body []byte
	for _, p := range packets {
		n := len(p)
		for n >= 255 {
			segs = append(segs, 255)
			n -= 255
		}
		segs = append(segs, byte(n))
		body = append(body, p...)
	}
	h := make([]byte, 27, 27+len(segs)+len(body))
	copy(h, "OggS")
	h[5] = flags
	binary.LittleEndian.PutUint64(h[6:14], uint64(granule))
	binary.LittleEndian.PutUint32(h[14:18], w.serial)
	binary.LittleEndian.PutUint32(h[18:22], w.seq)
	h[26] = byte(len(segs))
	h = append(append(h, segs...), body...)
	binary.LittleEndian.PutUint32(h[22:26], oggCRC(h))
	w.buf.Write(h)
	w.seq++
}

// oggCRCTable is Ogg's CRC-32: polynomial 0x04c11db7, not reflected,
// initial value 0 (unlike hash/crc32's IEEE).
var oggCRCTable = func() (t [256]uint32) {
	for i := range t {
		r := uint32(i) << 24
		for range 8 {
			if r&0x80000000 != 0 {
				r = r<<1 ^ 0x04c11db7
			} else {
				r <<= 1
			}
		}
		t[i] = r
	}
	return t
}()

func oggCRC(b []byte) uint32 {
	var crc uint32
	for _, c := range b {
		crc = crc<<8 ^ oggCRCTable[byte(crc>>24)^c]
	}
	return crc
}

// opusDuration is the playing time of an Ogg Opus stream in seconds.
func opusDuration(data []byte) float64 {
	st, err := parseOpus(data)
	if err != nil {
		return 0
	}
	return float64(max(st.final-int64(st.preSkip), 0)) / 48000
}
