package model

import "github.com/cudatap/cudatap/tracer/event"

// maxMessages bounds the NVTX messages kept per process: a program naming
// every range differently ("step 1", "step 2", ...) keeps the first ones;
// the ranges past it are drawn unnamed, counted in Limits.Names.
const maxMessages = 1 << 14

// annotation keeps the message of an NVTX call (its range or mark), by the
// key its calls carry (Args.Ptr): exporters name ranges from it. The
// ranges themselves are the calls, paired by the exporters.
func (m *Model) annotation(p *Process, a *event.Args, ev *event.Event) {
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
