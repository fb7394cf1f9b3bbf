package model

// Sink receives what the model concludes, as soon as it is final: a call
// and the synchronizations it caused when the call is handled, a GPU op
// when a synchronization bounds it, when the window of pending ops is full
// or at Finish. The pointers are valid only during the call: a sink copies
// what it keeps. Sinks aggregate (profiles, sync sites) or stream (traces);
// the model itself keeps none of these.
type Sink interface {
	Call(p *Process, c *Call)
	Sync(p *Process, s *Sync)
	GPUOp(p *Process, op *GPUOp)
	Dependency(p *Process, d *Dependency)
	Hold(p *Process, h *Hold)
}

// Sinks fans out to several sinks, in order.
type Sinks []Sink

func (s Sinks) Call(p *Process, c *Call) {
	for _, k := range s {
		k.Call(p, c)
	}
}

func (s Sinks) Sync(p *Process, y *Sync) {
	for _, k := range s {
		k.Sync(p, y)
	}
}

func (s Sinks) GPUOp(p *Process, op *GPUOp) {
	for _, k := range s {
		k.GPUOp(p, op)
	}
}

func (s Sinks) Dependency(p *Process, d *Dependency) {
	for _, k := range s {
		k.Dependency(p, d)
	}
}

func (s Sinks) Hold(p *Process, h *Hold) {
	for _, k := range s {
		k.Hold(p, h)
	}
}

// Discard is a sink that keeps nothing.
type Discard struct{}

func (Discard) Call(*Process, *Call)             {}
func (Discard) Sync(*Process, *Sync)             {}
func (Discard) GPUOp(*Process, *GPUOp)           {}
func (Discard) Dependency(*Process, *Dependency) {}
func (Discard) Hold(*Process, *Hold)             {}

// Trace is everything a Collector kept of one process.
type Trace struct {
	Calls  []Call // by Seq
	GPUOps []GPUOp
	Syncs  []Sync
	Deps   []Dependency
	Holds  []Hold
}

// Collector keeps every call, sync, op and dependency, per process: for
// tests and small tools. Its memory grows with the recording; the
// recorder and exporters never use it.
type Collector struct {
	Traces map[uint32]*Trace
}

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{Traces: map[uint32]*Trace{}} }

func (c *Collector) trace(pid uint32) *Trace {
	t := c.Traces[pid]
	if t == nil {
		t = &Trace{}
		c.Traces[pid] = t
	}
	return t
}

func (c *Collector) Call(p *Process, x *Call) {
	t := c.trace(p.PID)
	t.Calls = append(t.Calls, *x)
}

func (c *Collector) Sync(p *Process, s *Sync) {
	t := c.trace(p.PID)
	t.Syncs = append(t.Syncs, *s)
}

// GPUOp keeps ops in enqueue order (they are final in another order).
func (c *Collector) GPUOp(p *Process, op *GPUOp) {
	t := c.trace(p.PID)
	for len(t.GPUOps) <= op.ID {
		t.GPUOps = append(t.GPUOps, GPUOp{ID: -1})
	}
	t.GPUOps[op.ID] = *op
	t.GPUOps[op.ID].released, t.GPUOps[op.ID].enqEnd, t.GPUOps[op.ID].provenAt = false, 0, 0 // the model's bookkeeping
}

func (c *Collector) Dependency(p *Process, d *Dependency) {
	t := c.trace(p.PID)
	t.Deps = append(t.Deps, *d)
}

func (c *Collector) Hold(p *Process, h *Hold) {
	t := c.trace(p.PID)
	t.Holds = append(t.Holds, *h)
}
