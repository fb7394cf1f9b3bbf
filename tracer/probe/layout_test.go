package probe

import (
	"testing"
	"unsafe"

	"github.com/cudatap/cudatap/tracer/event"
)

// The Go decoder's idea of the record layout must match the C struct.
func TestEventLayout(t *testing.T) {
	var e cudatapEvent
	if got := int(unsafe.Offsetof(e.Stack)); got != event.HeaderSize {
		t.Errorf("stack[] at %d, decoder assumes %d", got, event.HeaderSize)
	}
	if got := int(unsafe.Offsetof(e.Copy)); got != event.CopyOffset {
		t.Errorf("copy[] at %d, decoder assumes %d", got, event.CopyOffset)
	}
	if got := int(unsafe.Sizeof(e)); got != event.RecordSize {
		t.Errorf("struct event is %d bytes, decoder assumes %d", got, event.RecordSize)
	}
	if len(e.Py) != 2*event.MaxPy || len(e.Stack) != event.MaxStack || len(e.Args) != event.NArgs {
		t.Errorf("array sizes differ: py %d stack %d args %d", len(e.Py), len(e.Stack), len(e.Args))
	}
}

// Every counter of enum stat is read into Stats.
func TestStatCounters(t *testing.T) {
	var s Stats
	seen := map[*uint64]bool{}
	for i, f := range s.counters() {
		if f == nil {
			t.Errorf("stat %d is not read", i)
		}
		if seen[f] {
			t.Errorf("stat %d read into a field already used", i)
		}
		seen[f] = true
	}
}

// The decoder reads every field of the generated struct where the C side
// writes it: a record made from cudatapEvent decodes to the same values.
func TestEventDecodesGeneratedStruct(t *testing.T) {
	var e cudatapEvent
	e.StartNs, e.EndNs, e.Cookie, e.Pid, e.Tid, e.Ret, e.Out = 1, 2, 3, 4, 5, -6, 7
	for i := range e.Args {
		e.Args[i] = uint64(100 + i)
	}
	for i := range e.Ext {
		e.Ext[i] = uint64(200 + i)
	}
	e.Caller, e.Cpu, e.Flags, e.Nstack = 8, 9, 10, 3
	for i := range e.Stack {
		e.Stack[i] = uint64(300 + i)
	}
	e.Rip, e.Rsp, e.Rbp, e.Npy, e.CopyLen = 11, 12, 13, 2, 4
	for i := range e.Py {
		e.Py[i] = uint64(400 + i)
	}
	for i := range e.Copy {
		e.Copy[i] = byte(i + 1)
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e)) // as the BPF side writes it (this build is little-endian)

	var got event.Event
	if err := event.Decode(raw, &got); err != nil {
		t.Fatal(err)
	}
	if got.Start != 1 || got.End != 2 || got.Cookie != 3 || got.PID != 4 || got.TID != 5 || got.Ret != -6 || got.Out != 7 ||
		got.Caller != 8 || got.CPU != 9 || got.Flags != 10 {
		t.Errorf("header: %+v", got)
	}
	for i := range e.Args {
		if got.Args[i] != e.Args[i] {
			t.Errorf("args[%d] = %d, want %d", i, got.Args[i], e.Args[i])
		}
	}
	for i := range e.Ext {
		if got.Ext[i] != e.Ext[i] {
			t.Errorf("ext[%d] = %d, want %d", i, got.Ext[i], e.Ext[i])
		}
	}
	if !got.HasStack || got.NStack != 3 || got.Stack[0] != 300 || got.Stack[2] != 302 {
		t.Errorf("stack: has %v, %d frames %v", got.HasStack, got.NStack, got.Stack[:got.NStack])
	}
	if got.Regs.RIP != 11 || got.Regs.RSP != 12 || got.Regs.RBP != 13 {
		t.Errorf("regs: %+v", got.Regs)
	}
	if got.NPy != 2 || got.Py[0] != [2]uint64{400, 401} || got.Py[1] != [2]uint64{402, 403} {
		t.Errorf("python frames: %d %v", got.NPy, got.Py[:got.NPy])
	}
	if string(got.Copy) != "\x01\x02\x03\x04" {
		t.Errorf("stack copy: %v", got.Copy)
	}
}

// A struct py_code written by the C layout decodes field for field.
func TestPyCodeLayout(t *testing.T) {
	var c cudatapPyCode
	if got := int(unsafe.Sizeof(c)); got != event.PyCodeRecordSize {
		t.Fatalf("struct py_code is %d bytes, decoder assumes %d", got, event.PyCodeRecordSize)
	}
	c.Cookie = uint64(event.PyCode)
	c.Pid, c.Tid, c.Code = 7, 8, 0x1000
	c.Addr = [3]uint64{0x2000, 0x3000, 0x4000}
	c.Len = [3]uint32{3, 2, 5}
	c.HeadLen = 4
	copy(c.Head[:], "head")
	copy(c.Filename[:], "a.py")
	copy(c.Name[:], "fn")
	copy(c.Table[:], "table")
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&c)), unsafe.Sizeof(c))
	if !event.IsPyCode(raw) {
		t.Fatal("IsPyCode = false")
	}
	got, err := event.DecodePyCode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != 7 || got.TID != 8 || got.Code != 0x1000 || got.Addr != c.Addr ||
		string(got.Head) != "head" || string(got.Data[0]) != "a.p" || string(got.Data[1]) != "fn" || string(got.Data[2]) != "table" {
		t.Errorf("decoded %+v", got)
	}
}

// A launch record with its parameter values, as the BPF side writes it
// (the header, then struct kernel_args), decodes to the values copied.
func TestKernelArgsLayout(t *testing.T) {
	var k cudatapKernelArgs
	if got := int(unsafe.Sizeof(k)); got != event.KernelArgsSize {
		t.Fatalf("struct kernel_args is %d bytes, decoder assumes %d", got, event.KernelArgsSize)
	}
	k.Params = 0x7ffc_0000_0f00
	k.Entry[0], k.Entry[1] = 0x7ffc_0000_1000, 0x7ffc_0000_1400
	k.Off[1], k.Len[0], k.Len[1] = 8, 8, 16
	k.Bytes[0], k.Bytes[8], k.Bytes[23] = 0x11, 0x22, 0x33
	k.Used, k.Size = 24, uint32(unsafe.Sizeof(k))
	var e cudatapEvent
	e.Cookie = event.Lookup(event.CudaLaunchKernel).KernelArgsCookie()
	raw := append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&e)), event.HeaderSize)...)
	raw = append(raw, unsafe.Slice((*byte)(unsafe.Pointer(&k)), unsafe.Sizeof(k))...)

	var got event.Event
	if err := event.Decode(raw, &got); err != nil {
		t.Fatal(err)
	}
	a := &got.KernelArgs
	at0, v0 := a.Value(0)
	at1, v1 := a.Value(1)
	if a.Params != k.Params || a.Copied() != 2 || at0 != k.Entry[0] || len(v0) != 8 || v0[0] != 0x11 ||
		at1 != k.Entry[1] || len(v1) != 16 || v1[0] != 0x22 || v1[15] != 0x33 {
		t.Errorf("kernel args %+v: value 0 %x at %#x, value 1 %x at %#x", a, v0, at0, v1, at1)
	}
	// A recording keeps the bytes used only, and reads the same back.
	rec := event.AppendRecord(nil, raw, &got)
	var again event.Event
	if err := event.Decode(rec, &again); err != nil || len(rec) != len(raw)-len(k.Bytes)+int(k.Used) {
		t.Fatalf("recorded %d bytes of %d (%v)", len(rec), len(raw), err)
	}
	if _, v := again.KernelArgs.Value(1); len(v) != 16 || v[15] != 0x33 {
		t.Errorf("recorded value 1: %x", v)
	}
}
