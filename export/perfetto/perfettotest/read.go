// Package perfettotest reads a Perfetto trace back with the generated
// types of Perfetto's .proto, as trace_processor would: interned names
// resolved per sequence, tracks from their descriptors, slices paired from
// their begin and end after sorting by time (ties in file order). Tests of
// the writer and of the CLI count what it finds.
package perfettotest

import (
	"bytes"
	"cmp"
	"compress/zlib"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cudatap/cudatap/export/perfetto/pb"
)

// Track is a track's descriptor.
type Track struct {
	UUID, Parent uint64
	Name         string // a custom track's name, a process's or a thread's
	PID, TID     int64  // a process or thread track's
	Process      bool
	Thread       bool
	Counter      bool
}

// Slice is a slice (Instant: of no duration) with what its begin said.
type Slice struct {
	Track       uint64
	Name        string
	Category    string
	Start, End  uint64
	Instant     bool
	Args        map[string]any // bool, uint64, int64, float64, string, []any, map[string]any
	Flows       []uint64       // flows that start here
	Terminating []uint64       // flows that end here
	Parent      int            // index of the enclosing slice on its track, -1 for none
}

// Counter is one counter value.
type Counter struct {
	Track uint64
	TS    uint64
	Value float64
}

// Trace is what a trace holds.
type Trace struct {
	Tracks   map[uint64]*Track
	Slices   []Slice
	Counters []Counter
	Packets  int // packets, those in compressed bundles included
	Bundles  int // compressed bundles
	Cleared  int // packets that cleared the sequence's interned data
	// MaxInterned is the most interned strings a reader held at once.
	MaxInterned int
	// Clocks of the last clock snapshot, by builtin clock id.
	Clocks map[uint32]uint64
	// Problems: what trace_processor would log or misdraw (an unknown iid
	// or track, an end with no slice open, a slice never ended, a child
	// that outlives its parent).
	Problems []string
}

// Root is the top-level track above track uuid (itself if it has no
// parent).
func (t *Trace) Root(uuid uint64) *Track {
	tr := t.Tracks[uuid]
	for tr != nil && tr.Parent != 0 {
		tr = t.Tracks[tr.Parent]
	}
	return tr
}

// Read parses b as a Trace message.
func Read(b []byte) (*Trace, error) {
	var tr pb.Trace
	if err := proto.Unmarshal(b, &tr); err != nil {
		return nil, err
	}
	t := &Trace{Tracks: map[uint64]*Track{}, Clocks: map[uint32]uint64{}}
	// Compressed bundles hold packets: read them in their place.
	var packets []*pb.TracePacket
	for _, p := range tr.Packet {
		z := p.GetCompressedPackets()
		if z == nil {
			packets = append(packets, p)
			continue
		}
		if len(z)+8 > 512_000 {
			t.Problems = append(t.Problems, fmt.Sprintf("a compressed bundle of %d bytes: Perfetto wants them under 512 KB", len(z)))
		}
		zr, err := zlib.NewReader(bytes.NewReader(z))
		if err != nil {
			return nil, fmt.Errorf("compressed packets: %w", err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("compressed packets: %w", err)
		}
		var inner pb.Trace
		if err := proto.Unmarshal(raw, &inner); err != nil {
			return nil, fmt.Errorf("compressed packets: %w", err)
		}
		t.Bundles++
		packets = append(packets, inner.Packet...)
	}
	t.Packets = len(packets)
	type ev struct {
		ts    uint64
		typ   pb.TrackEvent_Type
		slice Slice
	}
	var events []ev
	interned := map[int]map[uint64]string{}
	held := 0
	seq := uint32(0)
	for i, p := range packets {
		if p.GetTrustedPacketSequenceId() != 0 {
			seq = p.GetTrustedPacketSequenceId()
		}
		if p.GetSequenceFlags()&uint32(pb.TracePacket_SEQ_INCREMENTAL_STATE_CLEARED) != 0 {
			clear(interned)
			held = 0
			t.Cleared++
		}
		if d := p.GetInternedData(); d != nil {
			add := func(table int, iid uint64, s string) {
				if interned[table] == nil {
					interned[table] = map[uint64]string{}
				}
				interned[table][iid] = s
				held++
				t.MaxInterned = max(t.MaxInterned, held)
			}
			for _, e := range d.EventCategories {
				add(1, e.GetIid(), e.GetName())
			}
			for _, e := range d.EventNames {
				add(2, e.GetIid(), e.GetName())
			}
			for _, e := range d.DebugAnnotationNames {
				add(3, e.GetIid(), e.GetName())
			}
			for _, e := range d.DebugAnnotationStringValues {
				add(29, e.GetIid(), string(e.GetStr()))
			}
		}
		lookup := func(table int, iid uint64) string {
			s, ok := interned[table][iid]
			if !ok {
				t.Problems = append(t.Problems, fmt.Sprintf("packet %d (sequence %d): iid %d of table %d is not defined", i, seq, iid, table))
			}
			return s
		}
		switch {
		case p.GetTrackDescriptor() != nil:
			d := p.GetTrackDescriptor()
			track := &Track{UUID: d.GetUuid(), Parent: d.GetParentUuid(), Name: d.GetName(), Counter: d.Counter != nil}
			if d.Process != nil {
				track.Process, track.PID, track.Name = true, int64(d.Process.GetPid()), d.Process.GetProcessName()
			}
			if d.Thread != nil {
				track.Thread, track.PID, track.TID, track.Name = true, int64(d.Thread.GetPid()), d.Thread.GetTid(), d.Thread.GetThreadName()
			}
			if track.UUID != 0 {
				if _, dup := t.Tracks[track.UUID]; dup {
					t.Problems = append(t.Problems, fmt.Sprintf("track %d is described twice", track.UUID))
				}
				t.Tracks[track.UUID] = track
			}
		case p.GetClockSnapshot() != nil:
			for _, c := range p.GetClockSnapshot().Clocks {
				t.Clocks[c.GetClockId()] = c.GetTimestamp()
			}
		case p.GetTrackEvent() != nil:
			e := p.GetTrackEvent()
			s := Slice{Track: e.GetTrackUuid(), Flows: e.FlowIds, Terminating: e.TerminatingFlowIds, Parent: -1}
			if n, ok := e.NameField.(*pb.TrackEvent_NameIid); ok {
				s.Name = lookup(2, n.NameIid)
			} else {
				s.Name = e.GetName()
			}
			for _, c := range e.CategoryIids {
				s.Category = lookup(1, c)
			}
			for _, c := range e.Categories {
				s.Category = c
			}
			if len(e.DebugAnnotations) > 0 {
				s.Args = map[string]any{}
				for _, a := range e.DebugAnnotations {
					k, v := annotation(a, lookup)
					s.Args[k] = v
				}
			}
			if e.GetType() == pb.TrackEvent_TYPE_COUNTER {
				t.Counters = append(t.Counters, Counter{Track: s.Track, TS: p.GetTimestamp(), Value: e.GetDoubleCounterValue()})
				continue
			}
			events = append(events, ev{ts: p.GetTimestamp(), typ: e.GetType(), slice: s})
		}
	}
	// Pair begins and ends per track, in time order (ties in file order).
	slices.SortStableFunc(events, func(a, b ev) int {
		return cmp.Or(cmp.Compare(a.slice.Track, b.slice.Track), cmp.Compare(a.ts, b.ts))
	})
	var stack []int
	track := ^uint64(0)
	unclosed := func() {
		for _, i := range stack {
			if t.Slices[i].End != 0 {
				continue
			}
			t.Problems = append(t.Problems, fmt.Sprintf("slice %q on track %d at %d is never ended", t.Slices[i].Name, t.Slices[i].Track, t.Slices[i].Start))
		}
		stack = stack[:0]
	}
	for _, e := range events {
		if e.slice.Track != track {
			unclosed()
			track = e.slice.Track
			if _, ok := t.Tracks[track]; !ok {
				t.Problems = append(t.Problems, fmt.Sprintf("track %d has events but no descriptor", track))
			}
		}
		// A slice that ended before this event is no longer open.
		for len(stack) > 0 && t.Slices[stack[len(stack)-1]].End != 0 && t.Slices[stack[len(stack)-1]].End <= e.ts {
			stack = stack[:len(stack)-1]
		}
		s := e.slice
		s.Start = e.ts
		switch e.typ {
		case pb.TrackEvent_TYPE_SLICE_BEGIN, pb.TrackEvent_TYPE_INSTANT:
			if len(stack) > 0 {
				s.Parent = stack[len(stack)-1]
			}
			if e.typ == pb.TrackEvent_TYPE_INSTANT {
				s.Instant, s.End = true, e.ts
				t.Slices = append(t.Slices, s)
				continue
			}
			t.Slices = append(t.Slices, s)
			stack = append(stack, len(t.Slices)-1)
		case pb.TrackEvent_TYPE_SLICE_END:
			// The innermost slice still open ends here.
			open := -1
			for j := len(stack) - 1; j >= 0; j-- {
				if t.Slices[stack[j]].End == 0 {
					open = j
					break
				}
			}
			if open < 0 {
				t.Problems = append(t.Problems, fmt.Sprintf("an end on track %d at %d has no slice open", track, e.ts))
				continue
			}
			sl := &t.Slices[stack[open]]
			sl.End = e.ts
			if sl.Parent >= 0 && t.Slices[sl.Parent].End != 0 && t.Slices[sl.Parent].End < e.ts {
				t.Problems = append(t.Problems, fmt.Sprintf("slice %q on track %d ends at %d, after its parent %q", sl.Name, track, e.ts, t.Slices[sl.Parent].Name))
			}
			if open < len(stack)-1 {
				t.Problems = append(t.Problems, fmt.Sprintf("slice %q on track %d ends at %d while a child is open", sl.Name, track, e.ts))
			}
		default:
			t.Problems = append(t.Problems, fmt.Sprintf("an event of type %v", e.typ))
		}
	}
	unclosed()
	for _, tr := range t.Tracks {
		if _, ok := t.Tracks[tr.Parent]; tr.Parent != 0 && !ok {
			t.Problems = append(t.Problems, fmt.Sprintf("track %q has parent %d, which is not described", tr.Name, tr.Parent))
		}
	}
	return t, nil
}

// annotation decodes a debug annotation: its name and value.
func annotation(a *pb.DebugAnnotation, lookup func(int, uint64) string) (string, any) {
	name := a.GetName()
	if n, ok := a.NameField.(*pb.DebugAnnotation_NameIid); ok {
		name = lookup(3, n.NameIid)
	}
	switch v := a.Value.(type) {
	case *pb.DebugAnnotation_BoolValue:
		return name, v.BoolValue
	case *pb.DebugAnnotation_UintValue:
		return name, v.UintValue
	case *pb.DebugAnnotation_IntValue:
		return name, v.IntValue
	case *pb.DebugAnnotation_DoubleValue:
		return name, v.DoubleValue
	case *pb.DebugAnnotation_StringValue:
		return name, v.StringValue
	case *pb.DebugAnnotation_StringValueIid:
		return name, lookup(29, v.StringValueIid)
	}
	if len(a.DictEntries) > 0 {
		m := map[string]any{}
		for _, e := range a.DictEntries {
			k, v := annotation(e, lookup)
			m[k] = v
		}
		return name, m
	}
	var list []any
	for _, e := range a.ArrayValues {
		_, v := annotation(e, lookup)
		list = append(list, v)
	}
	return name, list
}
