package recording

import (
	"encoding/binary"
	"errors"
	"io"
)

// Tap takes a session's records one at a time, as they are written, in
// place of a file: a Writer made on a Tap (NewWriter) hands each record to
// it unencoded and unbuffered, on the writer's goroutine. The flight
// recorder (internal/flight) is one: it keeps the last seconds of each
// process and writes them out as a recording of their own. It is an
// io.Writer so that it goes where a recording's file goes (a session's
// Config.Recording); its Write is never called (it returns ErrTapWrite).
type Tap interface {
	io.Writer
	// Begin gets the header the writer would have written.
	Begin(Header)
	// Record gets one record; payload is valid during the call only.
	Record(typ byte, payload []byte)
	// Flush is the writer's Flush (about once a second while a session
	// runs).
	Flush()
}

// ErrTapWrite is what a Tap's Write returns: a Tap takes records, not
// bytes.
var ErrTapWrite = errors.New("a recording tap takes records through a recording.Writer, not bytes")

// Role is what a record is to a reader that keeps a window of a recording
// rather than all of it (Classify).
type Role uint8

const (
	// RoleEvent: a CUDA call, at its time (an event record).
	RoleEvent Role = iota + 1
	// RoleTimed: something else that happened at a time and belongs with
	// the events around it (a hold, a GPU time measured or marked).
	RoleTimed
	// RoleName: a name of a process's key (the process itself, a thread,
	// a kernel, a frame, a mapping): it serves every later event.
	RoleName
	// RoleState: a lasting fact about a process (pinned memory found at
	// attach, attached late, GPU times started, handed over or stopped).
	RoleState
	// RoleGlobal: of the whole session (NVML series, GPU report, drop
	// counters), written at its end.
	RoleGlobal
	// RoleEnd: the end record.
	RoleEnd
)

// Classify says which process a record is of and what it is to a window
// (Role); ok is false for a record too short to say.
func Classify(typ byte, b []byte) (pid uint32, role Role, ok bool) {
	le := binary.LittleEndian
	switch typ {
	case RecEvent:
		if len(b) < 28 {
			return 0, 0, false
		}
		return le.Uint32(b[24:]), RoleEvent, true
	case RecProcess, RecThread, RecKernel, RecFrame, RecPyFrame, RecMapping:
		if len(b) < 4 {
			return 0, 0, false
		}
		return le.Uint32(b), RoleName, true
	case RecNote:
		if len(b) < 5 {
			return 0, 0, false
		}
		if b[0] == NoteHold {
			return le.Uint32(b[1:]), RoleTimed, true
		}
		return le.Uint32(b[1:]), RoleState, true
	case RecGPUTime:
		if len(b) < 5 {
			return 0, 0, false
		}
		if b[0] == GPUTimesMeasure || b[0] == GPUTimesMeasureStream || b[0] == GPUTimesMark {
			return le.Uint32(b[1:]), RoleTimed, true
		}
		return le.Uint32(b[1:]), RoleState, true
	case RecEnd:
		return 0, RoleEnd, true
	}
	return 0, RoleGlobal, true
}

// Raw appends a record as a Tap got it (typ and payload unchanged).
func (w *Writer) Raw(typ byte, payload []byte) { w.record(typ, payload) }
