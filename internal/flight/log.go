package flight

import "encoding/binary"

// A log holds records in the order they were read, in chunks: records are
// appended at the back, whole chunks leave from the front. A chunk is
// never written again below its length, nor reused once it left: a dump
// being written reads the chunks it took while the reader appends.
type log struct {
	chunks []*chunk
	bytes  int // the capacity of the chunks held
}

type chunk struct {
	buf    []byte
	n      int
	last   uint64 // the latest event time in it
	events int
}

// recHeader: a record in a chunk is its sequence number (order across
// processes), type, the GPU op its call enqueued (-1: none) and payload
// length, then the payload.
const recHeader = 8 + 1 + 4 + 4

// add appends a record, in a new chunk of chunkSize bytes (more for a
// larger record) when the last one has no room; t is its time (0: not an
// event).
func (l *log) add(chunkSize int, seq uint64, typ byte, payload []byte, t uint64, op int32) {
	need := recHeader + len(payload)
	var c *chunk
	if k := len(l.chunks); k > 0 && len(l.chunks[k-1].buf)-l.chunks[k-1].n >= need {
		c = l.chunks[k-1]
	} else {
		c = &chunk{buf: make([]byte, max(chunkSize, need))}
		l.chunks = append(l.chunks, c)
		l.bytes += len(c.buf)
	}
	b := c.buf[c.n:]
	binary.LittleEndian.PutUint64(b, seq)
	b[8] = typ
	binary.LittleEndian.PutUint32(b[9:], uint32(op))
	binary.LittleEndian.PutUint32(b[13:], uint32(len(payload)))
	copy(b[recHeader:], payload)
	c.n += need
	if t != 0 {
		c.events++
		c.last = max(c.last, t)
	}
}

// front removes the oldest chunk and returns it.
func (l *log) front() *chunk {
	c := l.chunks[0]
	l.chunks[0] = nil
	l.chunks = l.chunks[1:]
	l.bytes -= len(c.buf)
	return c
}

// spans are the records held now, for a dump: they stay valid (and
// unchanged) whatever is appended or removed later.
func (l *log) spans() [][]byte {
	out := make([][]byte, len(l.chunks))
	for i, c := range l.chunks {
		out[i] = c.buf[:c.n:c.n]
	}
	return out
}

// each calls fn with every record of a chunk's bytes, in order.
func each(b []byte, fn func(seq uint64, typ byte, op int32, payload []byte)) {
	for len(b) >= recHeader {
		n := int(binary.LittleEndian.Uint32(b[13:]))
		fn(binary.LittleEndian.Uint64(b), b[8], int32(binary.LittleEndian.Uint32(b[9:])), b[recHeader:recHeader+n])
		b = b[recHeader+n:]
	}
}

// cursor walks the records of a process's spans in order (for the merge
// of several processes by sequence number).
type cursor struct {
	spans   [][]byte
	seq     uint64
	typ     byte
	payload []byte
	ok      bool
}

func newCursor(spans [][]byte) *cursor {
	c := &cursor{spans: spans}
	c.next()
	return c
}

func (c *cursor) next() {
	for len(c.spans) > 0 && len(c.spans[0]) < recHeader {
		c.spans = c.spans[1:]
	}
	if c.ok = len(c.spans) > 0; !c.ok {
		return
	}
	b := c.spans[0]
	n := int(binary.LittleEndian.Uint32(b[13:]))
	c.seq, c.typ, c.payload = binary.LittleEndian.Uint64(b), b[8], b[recHeader:recHeader+n]
	c.spans[0] = b[recHeader+n:]
}
