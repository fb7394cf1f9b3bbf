package perfetto

// A live trace (Options.Pending) is written while the session that feeds
// it still names what it traces, as the Chrome trace is (export/chrome's
// pending.go says why names can come late). A packet that names a kernel
// or a Python frame not named yet is encoded without interned strings,
// the unknown names as tokens, and held in Pending; Close writes it with
// the names known by then.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/model"
)

// tokenMark starts a token: no message starts with a 0 byte (field 0 does
// not exist) and no name holds these bytes.
const tokenMark = "\x00\xff\xfecudatap-name:"

// What a token names: then the kernel's form, the pid (4 bytes) and the
// function (8); or the pid, the code and the instruction of a Python frame.
const (
	tokenKernel = 'k'
	tokenPy     = 'p'
)

// Kernel name forms, as describe.Kernel has them.
const (
	formDisplay = 'd'
	formFull    = 'f'
	formMangled = 'm'
)

// late reports whether the event about to be written names a kernel (f,
// when kernel) or a Python frame (of p's stack py) not named yet: in a
// live trace it is held (holdIf).
func (w *Writer) late(p *model.Process, kernel bool, f uint64, py int32) bool {
	if w.opts.Pending == nil {
		return false
	}
	if kernel && !w.kernels.Of(p, f).Named() {
		return true
	}
	if py >= 0 && int(py) < len(p.PyStacks) {
		for _, k := range p.PyStacks[py] {
			if w.names.PyFrame(p.PID, k) == "" {
				return true
			}
		}
	}
	return false
}

// holdIf makes the packets written next held (or not): encoded without
// interned strings (the sequence's tables will have changed when they are
// written), into Pending.
func (w *Writer) holdIf(hold bool) {
	w.holding = hold
	w.intern.off = hold
}

// kernelName is the kernel launched as f in p, in form (k's): a token in a
// held packet, whose name may not be known yet.
func (w *Writer) kernelName(p *model.Process, f uint64, k describe.Kernel, form byte) string {
	if !w.holding {
		switch form {
		case formDisplay:
			return k.Display
		case formFull:
			return k.Full
		}
		return k.Mangled
	}
	b := append([]byte(tokenMark), tokenKernel, form)
	b = binary.LittleEndian.AppendUint32(b, p.PID)
	b = binary.LittleEndian.AppendUint64(b, f)
	return string(b)
}

// pyToken is a Python frame not named yet, as a token in w.scratch.
func (w *Writer) pyToken(pid uint32, k model.PyKey) []byte {
	w.scratch = append(append(w.scratch[:0], tokenMark...), tokenPy)
	w.scratch = binary.LittleEndian.AppendUint32(w.scratch, pid)
	w.scratch = binary.LittleEndian.AppendUint64(w.scratch, k.Code)
	w.scratch = binary.LittleEndian.AppendUint64(w.scratch, k.Instr)
	return w.scratch
}

// hold puts a packet aside, its length first, until Close.
func (w *Writer) hold(packet []byte) {
	if w.held == nil {
		w.held = bufio.NewWriterSize(w.opts.Pending, 64<<10)
	}
	w.held.Write(binary.AppendUvarint(w.lenBuf[:0], uint64(len(packet))))
	if _, err := w.held.Write(packet); err != nil {
		w.err = fmt.Errorf("hold an event until its names are known: %w", err)
	}
	w.nHeld++
}

// writeHeld writes the held packets, their tokens replaced by the names
// known now (those still unknown as a trace from the recording names them:
// by address). procs finds a process of the result.
func (w *Writer) writeHeld(procs func(uint32) *model.Process) {
	if w.held == nil || w.err != nil {
		return
	}
	if err := w.held.Flush(); err != nil {
		w.err = fmt.Errorf("hold an event until its names are known: %w", err)
		return
	}
	if _, err := w.opts.Pending.Seek(0, io.SeekStart); err != nil {
		w.err = fmt.Errorf("read back the events held until their names were known: %w", err)
		return
	}
	kernels := describe.NewKernels(w.names)
	name := func(t []byte) string {
		if len(t) >= 14 && t[0] == tokenKernel {
			pid := binary.LittleEndian.Uint32(t[2:])
			p := procs(pid)
			if p == nil {
				p = &model.Process{PID: pid}
			}
			k := kernels.Of(p, binary.LittleEndian.Uint64(t[6:]))
			switch t[1] {
			case formDisplay:
				return k.Display
			case formMangled:
				return k.Mangled
			}
			return k.Full
		}
		if len(t) >= 21 && t[0] == tokenPy {
			k := model.PyKey{Code: binary.LittleEndian.Uint64(t[5:]), Instr: binary.LittleEndian.Uint64(t[13:])}
			return describe.PyFrame(w.names, binary.LittleEndian.Uint32(t[1:]), k)
		}
		return "(name lost)"
	}
	r := bufio.NewReaderSize(w.opts.Pending, 64<<10)
	var packet, out []byte
	for range w.nHeld {
		n, err := binary.ReadUvarint(r)
		if err == nil {
			packet = append(packet[:0], make([]byte, n)...)
			_, err = io.ReadFull(r, packet)
		}
		if err == nil {
			out, err = withNames(out[:0], packet, name)
		}
		if err != nil {
			w.err = fmt.Errorf("read back the events held until their names were known: %w", err)
			return
		}
		w.write(out)
	}
}

// withNames appends msg, a message's encoded fields, to out with every
// string that is a token replaced by the name it stands for; the
// messages that hold a token are encoded anew (their lengths change).
func withNames(out, msg []byte, name func(token []byte) string) ([]byte, error) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return out, protowire.ParseError(n)
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, msg[n:])
			if m < 0 {
				return out, protowire.ParseError(m)
			}
			out, msg = append(out, msg[:n+m]...), msg[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(msg[n:])
		if m < 0 {
			return out, protowire.ParseError(m)
		}
		switch {
		case bytes.HasPrefix(v, []byte(tokenMark)):
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendString(out, name(v[len(tokenMark):]))
		case bytes.Contains(v, []byte(tokenMark)): // a message holding one
			inner, err := withNames(nil, v, name)
			if err != nil {
				return out, err
			}
			out = protowire.AppendTag(out, num, protowire.BytesType)
			out = protowire.AppendBytes(out, inner)
		default:
			out = append(out, msg[:n+m]...)
		}
		msg = msg[n+m:]
	}
	return out, nil
}
