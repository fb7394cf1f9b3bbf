package chrome

// A live trace (Options.Pending) is written while the session that feeds
// it still names what it traces: the names are read as each event is
// written. A kernel or a Python frame can be named after its first events
// were final (a stripped library's kernels are named once its code is
// decoded, off the reader; a Python code object's copy follows the record
// that needed it). An event that names one not named yet is held in
// Pending, the unknown names as tokens, and Close writes it with the names
// known by then: every event gets the names a trace made from the
// recording would show, and the writer keeps none of them in memory.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/model"
)

// A token stands for a name in a held event: NUL, what it names, NUL.
// appendString escapes every NUL of a name, so a raw one is a token's.
const (
	tokenKernel = 'k' // then the form, the pid and the function
	tokenPy     = 'p' // then the pid, the code and the instruction
)

// Kernel name forms, as describe.Kernel has them.
const (
	formDisplay = 'd'
	formFull    = 'f'
	formMangled = 'm'
)

// kernelNamed reports whether kernel k can be written now: always, but
// in a live trace that does not know its name yet (Kernels.Of names a
// kernel anew once it is named).
func (w *Writer) kernelNamed(k describe.Kernel) bool {
	return w.opts.Pending == nil || k.Named()
}

// kernelName writes the kernel launched as f in p, in form (k's), under
// key: a token, holding the event, when its name is not known yet.
func (w *Writer) kernelName(key string, p *model.Process, f uint64, k describe.Kernel, form byte, named bool) {
	if named {
		switch form {
		case formDisplay:
			w.str(key, k.Display)
		case formFull:
			w.str(key, k.Full)
		default:
			w.str(key, k.Mangled)
		}
		return
	}
	w.key(key)
	w.holding = true
	w.b = append(w.b, 0, tokenKernel, form, ' ')
	w.b = strconv.AppendUint(w.b, uint64(p.PID), 10)
	w.b = append(w.b, ' ')
	w.b = strconv.AppendUint(w.b, f, 16)
	w.b = append(w.b, 0)
}

// pyToken writes a Python frame not named yet as a token, holding the
// event.
func (w *Writer) pyToken(pid uint32, k model.PyKey) {
	w.holding = true
	w.b = append(w.b, 0, tokenPy, ' ')
	w.b = strconv.AppendUint(w.b, uint64(pid), 10)
	w.b = append(w.b, ' ')
	w.b = strconv.AppendUint(w.b, k.Code, 16)
	w.b = append(w.b, ' ')
	w.b = strconv.AppendUint(w.b, k.Instr, 16)
	w.b = append(w.b, 0)
}

// hold puts the event built in w.b aside, one line each, until Close.
func (w *Writer) hold(ev []byte) {
	if w.err != nil {
		return
	}
	if w.held == nil {
		w.held = bufio.NewWriterSize(w.opts.Pending, 64<<10)
	}
	w.held.Write(ev)
	if err := w.held.WriteByte('\n'); err != nil {
		w.err = fmt.Errorf("hold an event until its names are known: %w", err)
	}
	w.nHeld++
}

// writeHeld writes the held events, their tokens replaced by the names
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
	r := bufio.NewReaderSize(w.opts.Pending, 64<<10)
	for n := 0; n < w.nHeld && w.err == nil; n++ {
		line, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			w.err = fmt.Errorf("read back the events held until their names were known: %w", err)
			return
		}
		w.b = append(w.b[:0], ",\n"...)
		rest := line[:len(line)-1]
		for {
			i := bytes.IndexByte(rest, 0)
			if i < 0 {
				break
			}
			j := bytes.IndexByte(rest[i+1:], 0)
			if j < 0 {
				w.err = errors.New("an event held until its names were known is cut short")
				return
			}
			w.b = append(w.b, rest[:i]...)
			w.b = appendString(w.b, w.token(rest[i+1:i+1+j], kernels, procs))
			rest = rest[i+2+j:]
		}
		w.b = append(w.b, rest...)
		w.emit(w.b)
	}
}

// token is the name a token stands for (what lies between its NULs).
func (w *Writer) token(t []byte, kernels *describe.Kernels, procs func(uint32) *model.Process) string {
	var fields [][]byte
	if len(t) > 1 && t[0] == tokenKernel {
		fields = bytes.Fields(t[2:])
	} else if len(t) > 0 {
		fields = bytes.Fields(t[1:])
	}
	num := func(i, base int) uint64 {
		if i >= len(fields) {
			return 0
		}
		v, _ := strconv.ParseUint(string(fields[i]), base, 64)
		return v
	}
	pid := uint32(num(0, 10))
	if len(t) == 0 || t[0] != tokenKernel {
		return describe.PyFrame(w.names, pid, model.PyKey{Code: num(1, 16), Instr: num(2, 16)})
	}
	p := procs(pid)
	if p == nil {
		p = &model.Process{PID: pid}
	}
	k := kernels.Of(p, num(1, 16))
	switch t[1] {
	case formDisplay:
		return k.Display
	case formMangled:
		return k.Mangled
	}
	return k.Full
}
