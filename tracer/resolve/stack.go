package resolve

import (
	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/unwind"
	"github.com/cudatap/cudatap/tracer/event"
)

// prepareStack finishes ev's stack while the process lives: code without
// frame pointers ends the BPF walk early, so the stack copy is unwound
// with .eh_frame; and a frame-pointer walk is cut at the first address
// outside every executable mapping (code built without frame pointers
// sends the walk into data, and what follows is noise).
func (r *Resolver) prepareStack(ev *event.Event) {
	p := r.look.Process(ev.PID)
	if p == nil {
		return
	}
	if len(ev.Copy) > 0 {
		// Code without frame pointers (CPython, PyTorch) ends the BPF walk
		// early: unwind the stack copy with .eh_frame instead.
		if pcs := r.unwind.Unwind(p, unwind.Regs(ev.Regs), ev.Copy, event.MaxStack); len(pcs) > ev.NStack {
			ev.NStack = copy(ev.Stack[:], pcs)
		}
	}
	maps := p.Mappings()
	n := 0
	refreshed := false
	for n < ev.NStack {
		if executable(maps, ev.Stack[n]) {
			n++
			continue
		}
		if refreshed || p.Refresh() != nil {
			break
		}
		// A library loaded since the last look may hold the frame.
		refreshed, maps = true, p.Mappings()
	}
	ev.NStack = n
}

func executable(maps []objfile.Mapping, addr uint64) bool {
	for i := range maps {
		if maps[i].Contains(addr) {
			return maps[i].Exec()
		}
	}
	return false
}

// symbolizeAddr resolves an address of a live process; it refreshes the
// process's mappings once when the address falls outside every known one
// (a library loaded since the last look).
func (r *Resolver) symbolizeAddr(pid uint32, addr uint64) symbolize.Frame {
	p := r.look.Process(pid)
	if p == nil {
		return symbolize.Frame{Addr: addr}
	}
	f := p.Symbolize(addr)
	if f.Raw == "" && f.Object == "" {
		if p.Refresh() == nil {
			f = p.Symbolize(addr)
		}
	}
	return f
}
