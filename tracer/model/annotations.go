package model

import "github.com/cudatap/cudatap/tracer/event"

// maxMessages bounds the NVTX messages kept per process: a program naming
// every range differently ("step 1", "step 2", ...) keeps the first ones;
// the ranges past it are drawn unnamed, counted in Limits.Names.
const maxMessages = 1 << 14

// maxDomains bounds the NVTX domains told apart per process in probed
// calls (the injection library numbers at most as many); past it they
// share the last number, counted in Limits.Names.
const maxDomains = 256

// annotation keeps the message of an NVTX call (its range or mark), by the
// key its calls carry (Args.Ptr): exporters name ranges from it. The
// ranges themselves are the calls, paired by the exporters. A probed
// call's domain, a handle, becomes the domain's number.
func (m *Model) annotation(ps *procState, _ *event.Spec, ev *event.Event) {
	p, a := ps.p, &m.call.Args
	if a.Comm != 0 && ev.Flags&event.FlagInjected == 0 {
		a.Comm = m.domainNumber(p, a.Comm)
	}
	if a.Ptr == 0 {
		return
	}
	if _, ok := p.Messages[a.Ptr]; ok {
		return
	}
	if len(p.Messages) >= maxMessages {
		m.drops.Limits.Names++
		return
	}
	if p.Messages == nil {
		p.Messages = map[uint64]string{}
	}
	p.Messages[a.Ptr] = ev.String()
}

// Message is the text of an NVTX message by its key, "" when unknown.
func (p *Process) Message(key uint64) string { return p.Messages[key] }

// domainNumber numbers the NVTX domain handle h of a probed call: 1, 2, …
// in the order the process first used them, as the injection library
// numbers domains (by creation), so that a range reads the same whichever
// way it was seen. All domains without a tool share one handle
// (event.NVTXUnnamedDomain), hence one number.
func (m *Model) domainNumber(p *Process, h uint64) uint64 {
	if n, ok := p.nvtxDomains[h]; ok {
		return n
	}
	if len(p.nvtxDomains) >= maxDomains {
		m.drops.Limits.Names++
		return maxDomains
	}
	if p.nvtxDomains == nil {
		p.nvtxDomains = map[uint64]uint64{}
	}
	n := uint64(len(p.nvtxDomains) + 1)
	p.nvtxDomains[h] = n
	return n
}
