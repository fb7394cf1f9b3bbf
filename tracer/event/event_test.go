package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// sample returns an event with every header field set to a distinct value.
func sample() Event {
	e := Event{
		Start: 0x1111_2222_3333_4444, End: 0x1111_2222_3333_9999,
		Cookie: Lookup(CudaLaunchKernel).Cookie(1),
		PID:    4123, TID: 4124,
		Ret: -7, Out: 0xdead_beef_0000_0001,
		Caller: 0xc0ffee, CPU: 31, Flags: FlagHasRet | FlagOutFault,
	}
	for i := range e.Args {
		e.Args[i] = 0xa0a0_0000_0000_0000 | uint64(i)
	}
	for i := range e.Ext {
		e.Ext[i] = 0xe0e0_0000_0000_0000 | uint64(i)
	}
	return e
}

// withStack makes e a stack record: frames, registers, Python frames and a
// copy of the user stack.
func withStack(e Event, frames ...uint64) Event {
	e.Cookie |= CookieStack
	e.HasStack = true
	e.NStack = len(frames)
	copy(e.Stack[:], frames)
	e.Regs = Regs{RIP: 0x7f00_1234_5678, RSP: 0x7ffc_0000_1000, RBP: 0x7ffc_0000_1040}
	return e
}

// withKernelArgs makes e a launch record that carries its parameter
// values: kernelParams with three entries, each value copied (int n at
// ...1004, float *x at ...1008, a 16-byte struct at ...1018 with a pointer
// at ...1020), then one that points at nothing readable.
func withKernelArgs(e Event) Event {
	e.Cookie |= Lookup(CudaLaunchKernel).kernelArgsCookie(SysV)
	b := binary.LittleEndian.AppendUint32(nil, 1<<20)         // n
	b = binary.LittleEndian.AppendUint64(b, 0x7f00_dead_0000) // x
	b = binary.LittleEndian.AppendUint64(b, 0)                // the struct
	b = binary.LittleEndian.AppendUint64(b, 0x7f00_beef_0100)
	k := &e.KernelArgs
	*k = KernelArgs{Params: 0x7ffc_0000_0f00, Bytes: b}
	k.Entries[0], k.Entries[1], k.Entries[2], k.Entries[3] = 0x7ffc_0000_1004, 0x7ffc_0000_1008, 0x7ffc_0000_1018, 0x10
	k.Offsets[1], k.Offsets[2] = 4, 12
	k.Lens[0], k.Lens[1], k.Lens[2] = 4, 8, 16
	return e
}

func withPy(e Event, pairs ...[2]uint64) Event {
	e.NPy = len(pairs)
	copy(e.Py[:], pairs)
	return e
}

// diffEvents describes how two events differ, "" when they are equal. Copy
// is compared by content: nil and empty are the same; the arguments by
// name are compared as each event's own fields give them (a hand-built
// want has them decoded here).
func diffEvents(got, want *Event) string {
	g, w := *got, *want
	g.Named()
	w.Named()
	g.Copy, w.Copy = nil, nil
	var d string
	if !reflect.DeepEqual(g, w) {
		d = fmt.Sprintf("\n got %+v\nwant %+v", g, w)
	}
	if !bytes.Equal(got.Copy, want.Copy) {
		d += fmt.Sprintf("\n Copy %d bytes %x..., want %d bytes", len(got.Copy), got.Copy[:min(8, len(got.Copy))], len(want.Copy))
	}
	return d
}

func TestLayoutConstants(t *testing.T) {
	// struct event in bpf/cudatap.h: 3 u64, 2 u32, ret, out, 9 args, 6 ext,
	// cgroup, cpu, flags, nstack, pad; then, for stack records, 32 frames,
	// rip, rsp, rbp, npy, copy_len, 24 Python frame pairs, the stack copy.
	if HeaderSize != 192 {
		t.Errorf("HeaderSize = %d, want 192", HeaderSize)
	}
	if CopyOffset != 864 {
		t.Errorf("CopyOffset = %d, want 864", CopyOffset)
	}
	if RecordSize != 864+8192 {
		t.Errorf("RecordSize = %d, want %d", RecordSize, 864+8192)
	}
}

// TestEncodeOffsets pins every field to its byte offset in struct event.
func TestEncodeOffsets(t *testing.T) {
	e := withPy(withStack(sample(), 0x401000, 0x402000), [2]uint64{0xc0de, 0x11}, [2]uint64{0xc0df, 0x22})
	e.Copy = []byte{1, 2, 3, 4, 5}
	b := Encode(nil, &e)
	le := binary.LittleEndian
	u64 := func(off int) uint64 { return le.Uint64(b[off:]) }
	u32 := func(off int) uint64 { return uint64(le.Uint32(b[off:])) }
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"start_ns@0", u64(0), e.Start},
		{"end_ns@8", u64(8), e.End},
		{"cookie@16", u64(16), e.Cookie},
		{"pid@24", u32(24), uint64(e.PID)},
		{"tid@28", u32(28), uint64(e.TID)},
		{"ret@32", u64(32), uint64(e.Ret)},
		{"out@40", u64(40), e.Out},
		{"args[0]@48", u64(48), e.Args[0]},
		{"args[8]@112", u64(112), e.Args[8]},
		{"ext[0]@120", u64(120), e.Ext[0]},
		{"ext[5]@160", u64(160), e.Ext[5]},
		{"caller@168", u64(168), e.Caller},
		{"cpu@176", u32(176), uint64(e.CPU)},
		{"flags@180", u32(180), uint64(e.Flags)},
		{"nstack@184", u32(184), 2},
		{"pad@188", u32(188), 0},
		{"stack[0]@192", u64(192), 0x401000},
		{"stack[1]@200", u64(200), 0x402000},
		{"stack[2]@208", u64(208), 0},
		{"stack[31]@440", u64(440), 0},
		{"rip@448", u64(448), e.Regs.RIP},
		{"rsp@456", u64(456), e.Regs.RSP},
		{"rbp@464", u64(464), e.Regs.RBP},
		{"npy@472", u32(472), 2},
		{"copy_len@476", u32(476), 5},
		{"py[0]@480", u64(480), 0xc0de},
		{"py[1]@488", u64(488), 0x11},
		{"py[2]@496", u64(496), 0xc0df},
		{"py[3]@504", u64(504), 0x22},
		{"py[4]@512", u64(512), 0},
		{"py[47]@856", u64(856), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if len(b) != CopyOffset+5 || !bytes.Equal(b[CopyOffset:], e.Copy) {
		t.Errorf("len = %d, want %d with the stack copy at %d", len(b), CopyOffset+5, CopyOffset)
	}
}

func TestRoundTrip(t *testing.T) {
	full := make([]uint64, MaxStack)
	for i := range full {
		full[i] = 0x7f00_0000_0000 + uint64(i)*0x10
	}
	fullPy := make([][2]uint64, MaxPy)
	for i := range fullPy {
		fullPy[i] = [2]uint64{0x7f11_0000_0000 + uint64(i)*0x100, uint64(i)}
	}
	bigCopy := bytes.Repeat([]byte{0xab, 0xcd}, StackCopy/2)
	copied := func(e Event, b []byte) Event { e.Copy = b; return e }
	tests := []struct {
		name    string
		in      Event
		wantLen int
	}{
		{"zero", Event{}, HeaderSize},
		{"header only", sample(), HeaderSize},
		{"header only, stack bit in the cookie", func() Event { e := sample(); e.Cookie |= CookieStack; return e }(), HeaderSize},
		{"stack record without frames", withStack(sample()), CopyOffset},
		{"one frame", withStack(sample(), 0x401234), CopyOffset},
		{"full stack", withStack(sample(), full...), CopyOffset},
		{"frames, Python frames and a stack copy", copied(withPy(withStack(sample(), 1, 2, 3), fullPy[:3]...), []byte("stack bytes")), CopyOffset + 11},
		{"everything full", copied(withPy(withStack(sample(), full...), fullPy...), bigCopy), RecordSize},
		{"max values", Event{Start: ^uint64(0), End: ^uint64(0), Cookie: ^uint64(0), PID: ^uint32(0),
			TID: ^uint32(0), Ret: -1 << 63, Out: ^uint64(0), Caller: ^uint64(0), CPU: ^uint32(0),
			Flags: ^uint32(0)}, HeaderSize + kargsFixed + 8},
		{"launch with its parameter values", withKernelArgs(sample()), HeaderSize + kargsFixed + 28 + 8},
		{"launch with a stack and its parameter values", copied(withKernelArgs(withStack(sample(), 1, 2)), []byte("stack")), CopyOffset + 5 + kargsFixed + 28 + 8},
		{"launch whose parameter values could not be read", func() Event {
			e := sample()
			e.Cookie |= Lookup(CuLaunchKernel).kernelArgsCookie(AAPCS64)
			e.Flags |= FlagKernelArgsFault
			return e
		}(), HeaderSize + kargsFixed + 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := Encode(nil, &tc.in)
			if len(b) != tc.wantLen {
				t.Fatalf("encoded %d bytes, want %d", len(b), tc.wantLen)
			}
			var got Event
			if err := Decode(b, &got); err != nil {
				t.Fatal(err)
			}
			if d := diffEvents(&got, &tc.in); d != "" {
				t.Errorf("round trip:%s", d)
			}
			// Encode appends.
			b2 := Encode([]byte("prefix"), &tc.in)
			if !bytes.Equal(b2[:6], []byte("prefix")) || !bytes.Equal(b2[6:], b) {
				t.Errorf("Encode does not append to dst")
			}
		})
	}
}

// TestDecodeReusedEvent: decoding into an event that held a stack record
// leaves nothing of it behind that the fields in use could show.
func TestDecodeReusedEvent(t *testing.T) {
	big := withPy(withStack(sample(), 1, 2, 3), [2]uint64{7, 8})
	big.Copy = []byte{9, 9, 9}
	small := sample()
	small.Start = 5
	var e Event
	for _, in := range []Event{big, small, big} {
		if err := Decode(Encode(nil, &in), &e); err != nil {
			t.Fatal(err)
		}
		if e.HasStack != in.HasStack || e.NStack != in.NStack || e.NPy != in.NPy || !bytes.Equal(e.Copy, in.Copy) || e.Start != in.Start {
			t.Errorf("reused event: HasStack %v NStack %d NPy %d Copy %v Start %d, want %v %d %d %v %d",
				e.HasStack, e.NStack, e.NPy, e.Copy, e.Start, in.HasStack, in.NStack, in.NPy, in.Copy, in.Start)
		}
	}
}

func TestEncodeClamps(t *testing.T) {
	for _, tc := range []struct {
		n, want int
	}{{-3, 0}, {MaxStack + 5, MaxStack}, {1 << 40, MaxStack}} {
		e := withStack(sample(), 42)
		e.NStack = tc.n
		e.NPy = tc.n
		e.Py[0] = [2]uint64{1, 2}
		var got Event
		if err := Decode(Encode(nil, &e), &got); err != nil {
			t.Fatal(err)
		}
		if got.NStack != tc.want {
			t.Errorf("NStack %d encoded as %d, want %d", tc.n, got.NStack, tc.want)
		}
		if wantPy := min(tc.want, MaxPy); got.NPy != wantPy {
			t.Errorf("NPy %d encoded as %d, want %d", tc.n, got.NPy, wantPy)
		}
	}
	e := withStack(sample())
	e.Copy = make([]byte, StackCopy+100)
	if b := Encode(nil, &e); len(b) != RecordSize {
		t.Errorf("oversized stack copy encoded to %d bytes, want %d", len(b), RecordSize)
	}
}

func TestDecodeShortRecord(t *testing.T) {
	full := Encode(nil, &Event{Start: 1})
	for _, n := range []int{0, 1, 8, HeaderSize / 2, HeaderSize - 1} {
		e := Event{Start: 99, NStack: 3}
		err := Decode(full[:n], &e)
		if !errors.Is(err, ErrShortRecord) {
			t.Errorf("%d bytes: err = %v, want ErrShortRecord", n, err)
		}
		if e.Start != 99 || e.NStack != 3 {
			t.Errorf("%d bytes: event modified on error: %+v", n, e)
		}
	}
	if err := Decode(full[:HeaderSize], &Event{}); err != nil {
		t.Errorf("exactly HeaderSize bytes: %v", err)
	}
}

// TestDecodeStackBounds: the counts in a record are trusted only as far as
// the record goes.
func TestDecodeStackBounds(t *testing.T) {
	le := binary.LittleEndian
	// rec builds a record with nstack, then words stack words (and, past
	// MaxStack, the rest of a stack record), then extra zero bytes.
	rec := func(nstack uint32, words int, extra int) []byte {
		e := sample()
		b := Encode(nil, &e)
		le.PutUint32(b[184:], nstack)
		for i := 0; i < words; i++ {
			b = le.AppendUint64(b, uint64(100+i))
		}
		return append(b, make([]byte, extra)...)
	}
	tests := []struct {
		name string
		b    []byte
		want int
	}{
		{"nstack 5, 2 frames present", rec(5, 2, 0), 2},
		{"nstack 3, 3 frames and a partial word", rec(3, 3, 4), 3},
		{"nstack 4, 3 frames and a partial word", rec(4, 3, 7), 3},
		{"nstack 5, no frames", rec(5, 0, 0), 0},
		{"nstack 1000, full stack", rec(1000, MaxStack, 0), MaxStack},
		{"nstack 33, more words than MaxStack", rec(33, MaxStack+4, 0), MaxStack},
		{"nstack 0xffffffff", rec(0xffffffff, 1, 0), 1},
		{"nstack 0, frames present", rec(0, 4, 0), 0},
		{"nstack 2 of 32", rec(2, MaxStack, 0), 2},
	}
	for _, tc := range tests {
		var e Event
		if err := Decode(tc.b, &e); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if e.NStack != tc.want {
			t.Errorf("%s: NStack = %d, want %d", tc.name, e.NStack, tc.want)
		}
		if e.HasStack {
			t.Errorf("%s: HasStack for a %d-byte record", tc.name, len(tc.b))
		}
		for i := 0; i < e.NStack; i++ {
			if e.Stack[i] != uint64(100+i) {
				t.Errorf("%s: Stack[%d] = %d, want %d", tc.name, i, e.Stack[i], 100+i)
			}
		}
		for i := e.NStack; i < MaxStack; i++ {
			if e.Stack[i] != 0 {
				t.Errorf("%s: Stack[%d] = %d beyond NStack", tc.name, i, e.Stack[i])
			}
		}
	}

	// npy and copy_len beyond their arrays or the record.
	stackRec := func(npy, copyLen uint32, copyBytes int) []byte {
		e := withStack(sample(), 1)
		b := Encode(nil, &e)
		le.PutUint32(b[472:], npy)
		le.PutUint32(b[476:], copyLen)
		for i := 0; i < MaxPy; i++ {
			le.PutUint64(b[480+16*i:], uint64(1000+i))
			le.PutUint64(b[488+16*i:], uint64(2000+i))
		}
		return append(b, bytes.Repeat([]byte{0xee}, copyBytes)...)
	}
	for _, tc := range []struct {
		name             string
		b                []byte
		wantPy, wantCopy int
	}{
		{"npy 3, copy 10 of 10", stackRec(3, 10, 10), 3, 10},
		{"npy 100", stackRec(100, 0, 0), MaxPy, 0},
		{"copy_len 10, 4 bytes present", stackRec(0, 10, 4), 0, 4},
		{"copy_len 0xffffffff, full copy present", stackRec(0, 0xffffffff, StackCopy+50), 0, StackCopy},
		{"copy_len 3, 100 bytes present", stackRec(MaxPy, 3, 100), MaxPy, 3},
	} {
		var e Event
		if err := Decode(tc.b, &e); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !e.HasStack || e.NStack != 1 || e.NPy != tc.wantPy || len(e.Copy) != tc.wantCopy {
			t.Errorf("%s: HasStack %v NStack %d NPy %d copy %d bytes, want true 1 %d %d", tc.name,
				e.HasStack, e.NStack, e.NPy, len(e.Copy), tc.wantPy, tc.wantCopy)
		}
		for i := 0; i < e.NPy; i++ {
			if e.Py[i] != [2]uint64{uint64(1000 + i), uint64(2000 + i)} {
				t.Errorf("%s: Py[%d] = %v", tc.name, i, e.Py[i])
			}
		}
		if len(e.Copy) > 0 && (e.Copy[0] != 0xee || &e.Copy[0] != &tc.b[CopyOffset]) {
			t.Errorf("%s: Copy does not alias the record's copy[]", tc.name)
		}
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	e := withPy(withStack(sample(), 1, 2, 3, 4), [2]uint64{5, 6})
	e.Copy = make([]byte, 512)
	for _, b := range [][]byte{Encode(nil, &e), Encode(nil, &Event{Start: 1})} {
		var got Event
		if n := testing.AllocsPerRun(100, func() { _ = Decode(b, &got) }); n != 0 {
			t.Errorf("Decode of a %d-byte record allocates %v times", len(b), n)
		}
		var a Args
		if n := testing.AllocsPerRun(100, func() { got.Decode(&a) }); n != 0 {
			t.Errorf("Event.Decode allocates %v times per record", n)
		}
	}
}

func TestEventAccessors(t *testing.T) {
	e := Event{Start: 100, End: 350, Cookie: Lookup(CudaMemcpyAsync).Cookie(1) | CookieStack, Flags: FlagHasRet}
	if e.API() != CudaMemcpyAsync || e.Spec() != Lookup(CudaMemcpyAsync) || e.SymbolIndex() != 1 {
		t.Errorf("API %v spec %p symbol %d", e.API(), e.Spec(), e.SymbolIndex())
	}
	if !e.HasReturn() || e.Duration() != 250 {
		t.Errorf("HasReturn %v Duration %d, want true 250", e.HasReturn(), e.Duration())
	}
	e = Event{Start: 100, End: 0, Cookie: 0xfffe}
	if e.HasReturn() || e.Duration() != 0 || e.Spec() != nil {
		t.Errorf("entry-only event of unknown API: HasReturn %v Duration %d Spec %v", e.HasReturn(), e.Duration(), e.Spec())
	}
	e.End = 50 // clock went backwards across CPUs
	if e.Duration() != 0 {
		t.Errorf("Duration with End < Start = %d, want 0", e.Duration())
	}
}

// TestAppendRecord: flags the tracer sets on a decoded event are recorded
// with it; the raw record it came from is left as it was.
func TestAppendRecord(t *testing.T) {
	e := sample()
	raw := Encode(nil, &e)
	orig := bytes.Clone(raw)
	var dec Event
	if err := Decode(raw, &dec); err != nil {
		t.Fatal(err)
	}
	dec.Flags |= FlagViaRuntime
	b := AppendRecord(nil, raw, &dec)
	var got Event
	if err := Decode(b, &got); err != nil || got.Flags != e.Flags|FlagViaRuntime {
		t.Errorf("flags %#x, want %#x (%v)", got.Flags, e.Flags|FlagViaRuntime, err)
	}
	if !bytes.Equal(raw, orig) {
		t.Error("the raw record changed")
	}

	// A string's record as the BPF side writes it, 4 KiB reserved for the
	// string: the recording keeps the string's bytes.
	str := Event{Cookie: Lookup(NvtxRangePushA).Cookie(0), PID: 7, TID: 8, Start: 9, HasStack: true, Copy: []byte("step 3\x00")}
	raw = append(Encode(nil, &str), make([]byte, 4096-len(str.Copy))...)
	if err := Decode(raw, &dec); err != nil {
		t.Fatal(err)
	}
	b = AppendRecord(nil, raw, &dec)
	if err := Decode(b, &got); err != nil || len(b) != CopyOffset+len(str.Copy) || got.String() != "step 3" || got.Named().Ptr != MessageKey([]byte("step 3")) {
		t.Errorf("a string's record: %d bytes, want %d; %q (%v)", len(b), CopyOffset+len(str.Copy), got.String(), err)
	}
}

// TestKernelArgsWords: the candidate pointers of a launch are the 8-byte-
// aligned words of each value copied, by the address it was copied from;
// the entries taken for parameters are those whose value was copied.
func TestKernelArgsWords(t *testing.T) {
	e := withKernelArgs(sample())
	b := Encode(nil, &e)
	var got Event
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	k := &got.KernelArgs
	if n := k.Copied(); n != 3 {
		t.Errorf("%d entries copied, want 3", n)
	}
	type word struct{ addr, value uint64 }
	var words []word
	for addr, value := range k.Words(k.Copied()) {
		words = append(words, word{addr, value})
	}
	// n (4 bytes at ...1004) holds no whole aligned word.
	want := []word{{0x7ffc_0000_1008, 0x7f00_dead_0000}, {0x7ffc_0000_1018, 0}, {0x7ffc_0000_1020, 0x7f00_beef_0100}}
	if !slices.Equal(words, want) {
		t.Errorf("words %x, want %x", words, want)
	}
	if at, v := k.Value(2); at != 0x7ffc_0000_1018 || len(v) != 16 {
		t.Errorf("value 2: %d bytes at %#x", len(v), at)
	}
	if at, v := k.Value(3); at != 0x10 || v != nil {
		t.Errorf("value 3 (not copied): %d bytes at %#x", len(v), at)
	}
	// A value said to lie past the bytes copied (a corrupt record) is none.
	k.Lens[1] = 2000
	if _, v := k.Value(1); v != nil {
		t.Errorf("value 1 past the bytes: %d bytes", len(v))
	}
}
