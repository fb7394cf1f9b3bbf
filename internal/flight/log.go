package flight

import "encoding/binary"

// A log holds records in the order they were read, in chunks: records are
// appended at the back, whole chunks leave from the front. A chunk is
// never written again below its length, nor reused while a dump that took
// it may still read it: a dump being written reads the chunks it took
// while the reader appends (chunkPool).
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

// add appends a record, in a new chunk from pool when the last one has no
// room; t is its time (0: not an event).
func (l *log) add(pool *chunkPool, seq uint64, typ byte, payload []byte, t uint64, op int32) {
	need := recHeader + len(payload)
	var c *chunk
	if k := len(l.chunks); k > 0 && len(l.chunks[k-1].buf)-l.chunks[k-1].n >= need {
		c = l.chunks[k-1]
	} else {
		c = pool.get(l.bytes, need)
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

// A chunkPool hands out a recorder's chunks and takes back those that left
// a window, so that a busy process's window, which turns over every few
// seconds, reuses its chunks instead of leaving them to the garbage
// collector: a window turning over at 200,000 events a second made 45 MB
// of garbage a second, and the agent's heap grew to twice what it held
// before each collection. A log's first chunks are small (a process that
// made a few calls holds a few KiB, not a whole chunk), each as large as
// what the log holds already, up to size; only chunks of size are reused,
// at most maxSpare of them kept.
type chunkPool struct {
	size  int
	spare []*chunk
	// lent: dumps sealed and not written yet; while one is, no chunk is
	// reused (it may read one that left its window since).
	lent int
	// made: chunks allocated, reused ones not counted.
	made int
}

const (
	minChunk = 4 << 10
	maxSpare = 4
)

// get returns an empty chunk for a log that holds held bytes, with room
// for need.
func (p *chunkPool) get(held, need int) *chunk {
	size := min(p.size, max(minChunk, held))
	switch {
	case need > size:
		size = need
	case size == p.size && len(p.spare) > 0:
		c := p.spare[len(p.spare)-1]
		p.spare[len(p.spare)-1] = nil
		p.spare = p.spare[:len(p.spare)-1]
		return c
	}
	p.made++
	return &chunk{buf: make([]byte, size)}
}

// put takes back a chunk that left its log.
func (p *chunkPool) put(c *chunk) {
	if p.lent > 0 || len(c.buf) != p.size || len(p.spare) >= maxSpare {
		return
	}
	*c = chunk{buf: c.buf}
	p.spare = append(p.spare, c)
}

// spareBytes: what the pool holds for reuse.
func (p *chunkPool) spareBytes() int { return len(p.spare) * p.size }

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
