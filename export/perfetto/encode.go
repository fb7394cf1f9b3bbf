package perfetto

import (
	"math"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages written by hand (proto/perfetto_trace.proto).
const (
	fieldTracePacket = 1 // Trace.packet

	packetTimestamp   = 8
	packetTrackEvent  = 11
	packetSequenceID  = 10
	packetInterned    = 12
	packetSeqFlags    = 13
	seqStateCleared   = 1 // SEQ_INCREMENTAL_STATE_CLEARED
	seqNeedsState     = 2 // SEQ_NEEDS_INCREMENTAL_STATE
	eventCategoryIIDs = 3
	eventCategories   = 22
	eventNameIID      = 10
	eventName         = 23
	eventType         = 9
	eventTrackUUID    = 11
	eventDoubleValue  = 44
	eventFlowIDs      = 47
	eventTerminating  = 48
	eventAnnotations  = 4
	annNameIID        = 1
	annName           = 10
	annBool           = 2
	annUint           = 3
	annInt            = 4
	annDouble         = 5
	annString         = 6
	annStringIID      = 17
	annDict           = 11
	annArray          = 12

	// InternedData's tables; every entry is {iid = 1, the string = 2}.
	internCategories = 1
	internEventNames = 2
	internAnnNames   = 3
	internAnnStrings = 29
)

// TrackEvent types.
const (
	typeSliceBegin = 1
	typeSliceEnd   = 2
	typeInstant    = 3
	typeCounter    = 4
)

// enc builds protobuf messages in one buffer, nested ones in place: open
// writes the field's tag and remembers where its body starts; close puts
// the body's length in front of it. Nothing is allocated once b has grown.
type enc struct {
	b     []byte
	stack []int
}

func (e *enc) open(num protowire.Number) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.stack = append(e.stack, len(e.b))
}

func (e *enc) close() {
	start := e.stack[len(e.stack)-1]
	e.stack = e.stack[:len(e.stack)-1]
	n := len(e.b) - start
	l := protowire.SizeVarint(uint64(n))
	e.b = append(e.b, make([]byte, l)...) // no allocation: grows b
	copy(e.b[start+l:], e.b[start:start+n])
	protowire.AppendVarint(e.b[:start], uint64(n))
}

func (e *enc) varint(num protowire.Number, v uint64) {
	b := protowire.AppendTag(e.b, num, protowire.VarintType)
	e.b = protowire.AppendVarint(b, v) // one store into e: one write barrier
}

func (e *enc) fixed64(num protowire.Number, v uint64) {
	e.b = protowire.AppendTag(e.b, num, protowire.Fixed64Type)
	e.b = protowire.AppendFixed64(e.b, v)
}

func (e *enc) double(num protowire.Number, v float64) {
	e.fixed64(num, math.Float64bits(v))
}

func (e *enc) bytes(num protowire.Number, s []byte) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, s)
}

func (e *enc) string(num protowire.Number, s string) {
	e.b = protowire.AppendTag(e.b, num, protowire.BytesType)
	e.b = protowire.AppendString(e.b, s)
}

func (e *enc) reset() {
	e.b = e.b[:0]
	e.stack = e.stack[:0]
}

// interner gives strings of a sequence their interning ids (iids), per
// InternedData table, and writes the entries a packet defines into in.
// It holds at most maxHeld strings of maxBytes in all: when a
// string does not fit, the caller writes it in full instead (counted in
// inline), and the tables start afresh with the next packet (counted in
// resets), whose flags say the sequence's interned data was cleared.
type interner struct {
	tables map[protowire.Number]map[string]uint64
	held   int // strings held, in all tables
	// At most maxHeld strings of maxBytes in all (maxInterned and
	// maxInternedBytes; tests make them small).
	maxHeld, maxBytes int
	bytes             int
	full              bool // clear before the next packet
	cleared           bool // the next packet starts the sequence's incremental state
	in                enc  // InternedData of the packet being built
	inline            uint64
	resets            uint64
	// off: the packet being built interns nothing (it is held: pending.go).
	off bool
	// recent remembers the ids of strings by their address: most strings
	// interned are the same few (argument names, API names, kernel names
	// from a cache) passed again and again, and comparing an address is
	// much cheaper than hashing the string. Each entry keeps its string,
	// so that its memory cannot be reused for another.
	recent [256]recentString
}

type recentString struct {
	s     string
	table protowire.Number
	id    uint64
}

// Bounds on the interned strings (kernel names demangle to kilobytes).
const (
	maxInterned      = 1 << 16
	maxInternedBytes = 16 << 20
)

func newInterner() *interner {
	return &interner{tables: map[protowire.Number]map[string]uint64{}, cleared: true, maxHeld: maxInterned, maxBytes: maxInternedBytes}
}

// startPacket clears the tables if the last packet filled them; it
// returns the packet's sequence flags.
func (t *interner) startPacket() uint64 {
	t.in.reset()
	if t.full {
		clear(t.tables)
		clear(t.recent[:])
		t.held, t.bytes, t.full, t.cleared = 0, 0, false, true
		t.resets++
	}
	if t.cleared {
		t.cleared = false
		return seqStateCleared | seqNeedsState
	}
	return seqNeedsState
}

// iidOf is iid for a string, looked up by its address first.
func (t *interner) iidOf(table protowire.Number, s string) uint64 {
	if t.off {
		return 0
	}
	if len(s) == 0 {
		return t.iid(table, nil)
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	r := &t.recent[(p>>3^p>>11^uintptr(table))%uintptr(len(t.recent))]
	if unsafe.StringData(r.s) == unsafe.StringData(s) && len(r.s) == len(s) && r.table == table {
		return r.id
	}
	id := t.iid(table, unsafe.Slice(unsafe.StringData(s), len(s)))
	if id != 0 {
		*r = recentString{s: s, table: table, id: id}
	}
	return id
}

// iid returns s's id in table, defining it in this packet's interned data
// if new; 0 when the tables are full (write s in full).
func (t *interner) iid(table protowire.Number, s []byte) uint64 {
	if t.off {
		return 0
	}
	m := t.tables[table]
	if id, ok := m[string(s)]; ok {
		return id
	}
	if t.full || t.held >= t.maxHeld || t.bytes+len(s) > t.maxBytes {
		t.full = true
		t.inline++
		return 0
	}
	if m == nil {
		m = map[string]uint64{}
		t.tables[table] = m
	}
	// Ids count up from 1 in each table: the few argument names get
	// one-byte ids, whatever the number of kernel names.
	id := uint64(len(m)) + 1
	m[string(s)] = id
	t.held++
	t.bytes += len(s)
	t.in.open(table)
	t.in.varint(1, id)
	t.in.bytes(2, s)
	t.in.close()
	return id
}
