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
