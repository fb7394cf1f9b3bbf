package python

import (
	"fmt"

	"github.com/cudatap/cudatap/internal/procfs"
)

// The bounds of walk_python (bpf/python.h), which the Go walker keeps too.
const (
	MaxFrames     = 24               // MAX_PY: frames kept, innermost first
	maxThreads    = 128              // PY_MAX_THREADS
	maxWalk       = MaxFrames*2 + 16 // PY_MAX_WALK: frames looked at, shims included
	ownedByCStack = 3                // FRAME_OWNED_BY_CSTACK
)

// Walk does in Go what walk_python does in BPF: it finds the thread state
// of thread tid (host tid) and returns its frames as walk_python would
// record them (entry flags included), innermost first, and whether frames
// were left out. The
// thread should be blocked (or the result is a snapshot that may tear).
//
// The thread is recognised by native_thread_id (3.11+), compared with the
// thread's tid in the target's pid namespace, or before 3.11 by thread_id
// (its pthread_t), whose struct pthread holds the tid (glibc). It returns
// no frames and no error for a thread without a thread state.
func (in *Interpreter) Walk(tid int) ([]RawFrame, bool, error) {
	ts, err := in.findThread(tid)
	if err != nil || ts == 0 {
		return nil, false, err
	}
	return in.walkFrom(ts, maxWalk)
}

// WalkThread detects the interpreter of pid and returns the named Python
// frames of thread tid, innermost first (at most MaxFrames).
func WalkThread(pid, tid int) ([]Frame, error) {
	_, in, err := Detect(pid)
	if err != nil {
		return nil, err
	}
	raw, _, err := in.Walk(tid)
	if err != nil {
		return nil, err
	}
	out := make([]Frame, 0, len(raw))
	for _, r := range raw {
		f, err := in.Frame(r.Code, r.Instr)
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
	return out, nil
}

// findThread returns the PyThreadState of host thread tid, or 0.
func (in *Interpreter) findThread(tid int) (uint64, error) {
	// CPython stores the thread's id in its own pid namespace as
	// native_thread_id.
	want, err := procfs.ThreadNSPID(in.pid, tid)
	if err != nil {
		return 0, err
	}
	c := &in.cfg
	native := c.OffTstateNativeTID != NoOffset
	if !native && in.pthreadTIDOff == 0 {
		return 0, fmt.Errorf("python %s: no way to tell thread states apart", in.version)
	}
	interp, err := in.mem.u64(c.RuntimeAddr + uint64(c.OffRuntimeInterpHead))
	if err != nil || interp == 0 {
		return 0, err
	}
	ts, err := in.mem.u64(interp + uint64(c.OffInterpThreadsHead))
	if err != nil {
		return 0, err
	}
	for i := 0; ts != 0 && i < maxThreads; i++ {
		var id uint64
		if native {
			id, err = in.mem.u64(ts + uint64(c.OffTstateNativeTID))
		} else {
			var pt uint64
			pt, err = in.mem.u64(ts + uint64(c.OffTstateThreadID))
			if err == nil && pt != 0 {
				var t uint32
				t, err = in.mem.u32(pt + in.pthreadTIDOff)
				id = uint64(t)
			}
		}
		if err != nil {
			return 0, err
		}
		if id == uint64(want) {
			return ts, nil
		}
		if ts, err = in.mem.u64(ts + uint64(c.OffTstateNext)); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// walkFrom walks the frames of thread state ts, looking at most at limit
// frames (C-stack shims included), exactly as walk_python does.
func (in *Interpreter) walkFrom(ts uint64, limit int) ([]RawFrame, bool, error) {
	c := &in.cfg
	f, err := in.mem.u64(ts + uint64(c.OffTstateFrame))
	if err != nil {
		return nil, false, err
	}
	if c.OffCFrameCurrent != NoOffset && f != 0 {
		if f, err = in.mem.u64(f + uint64(c.OffCFrameCurrent)); err != nil {
			return nil, false, err
		}
	}
	var out []RawFrame
	truncated := false
	for i := 0; i < limit && f != 0; i++ {
		owner := uint8(0)
		if c.OffFrameOwner != NoOffset {
			if owner, err = in.mem.u8(f + uint64(c.OffFrameOwner)); err != nil {
				return out, truncated, err
			}
		}
		if owner == ownedByCStack {
			// 3.12+: the shim behind the first frame of an evaluation
			// loop's activation, the frame recorded last.
			if len(out) > 0 {
				out[len(out)-1].Instr |= InstrEntry
			}
		} else {
			if len(out) >= MaxFrames {
				truncated = true
				break
			}
			code, err := in.mem.u64(f + uint64(c.OffFrameCode))
			if err != nil {
				return out, truncated, err
			}
			var instr uint64
			if c.InstrIsPtr != 0 {
				instr, err = in.mem.u64(f + uint64(c.OffFrameInstr))
			} else {
				var lasti uint32
				lasti, err = in.mem.u32(f + uint64(c.OffFrameInstr))
				instr = uint64(lasti)
			}
			if err != nil {
				return out, truncated, err
			}
			flags := uint64(InstrEntryKnown)
			switch {
			case c.Version < 3<<8|11:
				flags |= InstrEntry // a frame per activation
			case c.OffFrameIsEntry != NoOffset:
				if entry, err := in.mem.u8(f + uint64(c.OffFrameIsEntry)); err != nil {
					flags = 0
				} else if entry != 0 {
					flags |= InstrEntry
				}
			}
			out = append(out, RawFrame{Code: code, Instr: instr | flags})
		}
		if f, err = in.mem.u64(f + uint64(c.OffFrameBack)); err != nil {
			return out, truncated, err
		}
		if i == limit-1 && f != 0 {
			truncated = true
			// 3.12+: whether a shim follows the last frame is not known.
			if c.OffFrameOwner != NoOffset && len(out) > 0 {
				out[len(out)-1].Instr &^= InstrEntryKnown
			}
		}
	}
	return out, truncated, nil
}
