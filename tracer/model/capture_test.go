package model

import (
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// Graph calls, as the x86-64 ABI passes their arguments.
func beginCapture(tid uint32, t, stream uint64) *ev {
	return call(event.CudaStreamBeginCapture, tid, t, 0, stream, 0)
}
func endCapture(tid uint32, t, stream, graph uint64) *ev {
	return call(event.CudaStreamEndCapture, tid, t, us, stream, 0x7ffd4000).out(graph)
}
func instantiate(tid uint32, t, graph, exec uint64) *ev {
	return call(event.CudaGraphInstantiateWithFlags, tid, t, 10*us, 0x7ffd5000, graph, 0).out(exec)
}
func graphLaunch(tid uint32, t, exec, stream uint64) *ev {
	return call(event.CudaGraphLaunch, tid, t, 0, exec, stream)
}
func driverLaunch(tid uint32, t, stream, fn uint64, blocks uint32) *ev {
	return call(event.CuLaunchKernel, tid, t, 0, fn, uint64(blocks), 1, 1, 128, 1, 1, 0, stream)
}

// graphOps are the ops of trace p that graph launches ran, by launch
// (correlation id), in op order.
func graphOps(p *traced) map[uint64][]GPUOp {
	out := map[uint64][]GPUOp{}
	for _, op := range p.GPUOps {
		if op.ID >= 0 && op.InGraph() {
			out[op.Correlation] = append(out[op.Correlation], op)
		}
	}
	return out
}

// TestGraphCapture: work enqueued on a capturing stream is recorded, not
// run; each launch of the instantiated graph runs one op per node, in node
// order, named as the captured call named it, with the launch's
// correlation id and the capture site of its node; without GPU times each
// is bounded inside the launch's bounds, in node order.
func TestGraphCapture(t *testing.T) {
	const s, graph, exec = 0x5000, 0x6000, 0x7000
	fns := []uint64{0xf01, 0xf02, 0xf03}
	evs := []*ev{streamCreateFlags(1, 1000, s, 1), beginCapture(1, 2000, s)}
	for i, fn := range fns {
		evs = append(evs, driverLaunch(1, 3000+uint64(i)*100, s, fn, uint32(i+1)).frames(0x401000+uint64(i)))
	}
	evs = append(evs, memcpyAsync(1, 3500, us, 0x7e00, 0x7e10, 64, event.DeviceToDevice, s).frames(0x402000),
		endCapture(1, 4000, s, graph), instantiate(1, 5000, graph, exec))
	const launches = 5
	for i := range uint64(launches) {
		evs = append(evs, graphLaunch(1, 10_000+i*1000, exec, s))
	}
	const syncEnd = 20_000 + 100*us
	evs = append(evs, streamSync(1, 20_000, 100*us, s), driverLaunch(1, 200_000, s, 0xf00, 1))
	p := run1(t, evs...)

	captured := 0
	for i := range p.Calls {
		c := &p.Calls[i]
		if c.Captured {
			captured++
			if c.GPUOp >= 0 {
				t.Errorf("captured call %s has GPU op %d", c.API, c.GPUOp)
			}
		}
	}
	if captured != 4 {
		t.Errorf("%d calls captured, want 4", captured)
	}
	byLaunch := graphOps(p)
	if len(byLaunch) != launches || len(p.GPUOps) != launches*4+1 {
		t.Fatalf("%d launches ran %d ops in all (%d graph launches), want %d launches of 4 and one kernel", len(byLaunch), len(p.GPUOps), len(byLaunch), launches)
	}
	for i := range p.Calls {
		c := &p.Calls[i]
		if c.API != event.CudaGraphLaunch {
			continue
		}
		ops := byLaunch[c.Correlation]
		if len(ops) != 4 || c.GPUOp != ops[0].ID {
			t.Fatalf("launch %d (correlation %d): ops %v, call's op %d; want 4, the first its", c.Seq, c.Correlation, ops, c.GPUOp)
		}
		prevEnd := uint64(0)
		for k, op := range ops {
			wantKind := OpKernel
			if k == 3 {
				wantKind = OpMemcpy
			}
			if op.Kind != wantKind || (k < 3 && (op.Func != fns[k] || op.Grid.X != uint32(k+1))) || (k == 3 && op.Bytes != 64) {
				t.Errorf("launch %d node %d: kind %d func %#x grid %d bytes %d; want the node captured there", c.Seq, k, op.Kind, op.Func, op.Grid.X, op.Bytes)
			}
			n := p.NodeOf(&op)
			if n == nil || n.Index != int32(k) || p.Calls[n.Call].Seq != n.Call || !p.Calls[n.Call].Captured {
				t.Fatalf("launch %d node %d: node %+v, want the call that captured node %d", c.Seq, k, n, k)
			}
			if st := p.Stacks[n.Stack]; len(st) != 1 || st[0] != 0x401000+uint64(k) && !(k == 3 && st[0] == 0x402000) {
				t.Errorf("launch %d node %d: capture stack %x, want the capture call's", c.Seq, k, st)
			}
			if op.Measured || !op.Bounded || op.Start < op.Enqueued || op.Start < prevEnd || op.End > syncEnd || op.Enqueued != c.Start {
				t.Errorf("launch %d node %d: [%d, %d] bounded %v measured %v, enqueued %d; want inside the launch's bounds [%d, %d], after node %d",
					c.Seq, k, op.Start, op.End, op.Bounded, op.Measured, op.Enqueued, c.Start, syncEnd, k-1)
			}
			prevEnd = op.End
		}
	}
	st := p.Streams[1].Stats
	if st.GraphLaunches != launches || st.GraphOps != launches*4 || st.GPUOps != launches*4+1 || p.NGPUOps != launches*4+1 {
		t.Errorf("graph launches %d, graph ops %d, stream ops %d, process ops %d; want %d, %d, %d, %d",
			st.GraphLaunches, st.GraphOps, st.GPUOps, p.NGPUOps, launches, launches*4, launches*4+1, launches*4+1)
	}
}

// TestGraphForkJoin: a stream that waits for an event recorded on a
// capturing stream joins the capture until it ends; the graph holds the
// work of both streams, in capture order.
func TestGraphForkJoin(t *testing.T) {
	const s1, s2, s3, e1, e2, graph, exec = 0x5001, 0x5002, 0x5003, 0xe1, 0xe2, 0x6000, 0x7000
	p := run1(t,
		streamCreate(1, 100, s1), streamCreate(1, 200, s2), streamCreate(1, 300, s3),
		beginCapture(1, 1000, s1),
		driverLaunch(1, 1100, s1, 0xf01, 1),
		eventRecord(1, 1200, e1, s1), streamWait(1, 1300, s2, e1), // fork
		driverLaunch(1, 1400, s2, 0xf02, 1),
		driverLaunch(1, 1500, s1, 0xf03, 1),
		eventRecord(1, 1600, e2, s2), streamWait(1, 1700, s1, e2), // join
		endCapture(1, 1800, s1, graph), instantiate(1, 1900, graph, exec),
		driverLaunch(1, 2000, s2, 0xf04, 1), // s2 left the capture with it
		graphLaunch(1, 3000, exec, s3),
	)
	var fns []uint64
	for _, op := range p.GPUOps {
		if op.InGraph() {
			fns = append(fns, op.Func)
		} else if op.Func != 0xf04 {
			t.Errorf("op %d (func %#x) ran outside the graph", op.ID, op.Func)
		}
	}
	if len(fns) != 3 || fns[0] != 0xf01 || fns[1] != 0xf02 || fns[2] != 0xf03 {
		t.Errorf("graph ran %x, want f01 f02 f03 (capture order across the fork)", fns)
	}
}

// TestGraphUnknownExec: a launch of an exec cudatap did not see made stays
// one op, "Graph launch"; an exec re-instantiated from another graph runs
// that graph's nodes.
func TestGraphUnknownExec(t *testing.T) {
	const s, g1, g2, exec = 0x5000, 0x6001, 0x6002, 0x7000
	p := run1(t,
		streamCreate(1, 100, s),
		graphLaunch(1, 500, 0xdead, s),
		beginCapture(1, 1000, s), driverLaunch(1, 1100, s, 0xf01, 1), endCapture(1, 1200, s, g1),
		beginCapture(1, 1300, s), driverLaunch(1, 1400, s, 0xf02, 1), driverLaunch(1, 1500, s, 0xf03, 1), endCapture(1, 1600, s, g2),
		instantiate(1, 2000, g1, exec), graphLaunch(1, 2100, exec, s),
		instantiate(1, 3000, g2, exec), graphLaunch(1, 3100, exec, s),
	)
	var got []uint64
	for _, op := range p.GPUOps {
		switch {
		case op.Kind == OpGraph:
			got = append(got, 0)
		case op.InGraph():
			got = append(got, op.Func)
		}
	}
	want := []uint64{0, 0xf01, 0xf02, 0xf03}
	if len(got) != len(want) {
		t.Fatalf("ops %x, want %x (an unknown exec, then g1's node, then g2's two)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ops %x, want %x (an unknown exec, then g1's node, then g2's two)", got, want)
		}
	}
}

// graphRecord is CUPTI's record of graph node id of the launch at launchT
// (thread 1), ran [start, end].
func graphRecord(launchT uint64, kind OpKind, id, start, end uint64) *Measurement {
	return &Measurement{TID: 1, APIStart: launchT + 1, APIEnd: launchT + 5, Start: start, End: end, Kind: kind, GraphNode: id}
}

// TestGraphMeasured: CUPTI's records of a graph's nodes, in any order and
// across launches, measure the op of their node: the model learns the
// exec's node ids (the k-th smallest is node k's) and parks records until
// it has them all.
func TestGraphMeasured(t *testing.T) {
	const s, graph, exec = 0x5000, 0x6000, 0x7000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{
		streamCreate(1, 100, s),
		beginCapture(1, 1000, s),
		driverLaunch(1, 1100, s, 0xf01, 1), driverLaunch(1, 1200, s, 0xf02, 1), memsetAsync(1, 1300, 0x7e00, 64, s),
		endCapture(1, 1400, s, graph), instantiate(1, 1500, graph, exec),
		graphLaunch(1, 2000, exec, s), graphLaunch(1, 3000, exec, s),
		streamSync(1, 4000, 100*us, s),
	} {
		m.Handle(&e.Event)
	}
	// The exec's clones have ids 31, 32, 33 (node order). Records of
	// launch 2 first, out of order; a fourth id would not fit.
	m.Measure(testPID, graphRecord(3000, OpMemset, 33, 60_000, 61_000))
	m.Measure(testPID, graphRecord(3000, OpKernel, 31, 50_000, 55_000))
	if n := ops(c); n != 0 {
		t.Fatalf("%d ops out before the exec's ids are known, want 0", n)
	}
	m.Measure(testPID, graphRecord(2000, OpKernel, 32, 20_000, 30_000))
	m.Measure(testPID, graphRecord(2000, OpKernel, 31, 10_000, 20_000))
	m.Measure(testPID, graphRecord(2000, OpMemset, 33, 30_000, 31_000))
	m.Measure(testPID, graphRecord(3000, OpKernel, 32, 55_000, 60_000))
	if n := ops(c); n != 6 {
		t.Fatalf("%d ops out once every record came, want 6", n)
	}
	p := finish(m, c)[0]
	want := [][2]uint64{{10_000, 20_000}, {20_000, 30_000}, {30_000, 31_000}, {50_000, 55_000}, {55_000, 60_000}, {60_000, 61_000}}
	for i, w := range want {
		op := p.GPUOps[i]
		if !op.Measured || op.Start != w[0] || op.End != w[1] {
			t.Errorf("op %d (node %d of its launch): measured %v [%d, %d], want [%d, %d]", i, i%3, op.Measured, op.Start, op.End, w[0], w[1])
		}
	}
	if d := m.Drops(); d.GPUTimesUnmatched != 0 || d.GPUTimesLate != 0 || d.GPUTimesUnmeasured != 0 {
		t.Errorf("unmatched %d late %d unmeasured %d, want none", d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesUnmeasured)
	}
	if st := p.Streams[1].Stats; st.Measured != 6 || st.BusyNs != 31_000-10_000+61_000-50_000 {
		t.Errorf("stream: %d measured, busy %d ns; want 6 and %d", st.Measured, st.BusyNs, 31_000-10_000+61_000-50_000)
	}
}

// TestGraphMeasuredMismatch: records that do not fit the exec's nodes (a
// set where its id says kernel; an id past the exec's, once its ids are
// known) are counted unmatched, never guessed: the exec's unmeasured ops
// go out bounded, and its later launches are not held for records.
func TestGraphMeasuredMismatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		records   []*Measurement
		measured  int
		unmatched uint64
	}{
		{"kind", []*Measurement{graphRecord(2000, OpKernel, 41, 10, 20), graphRecord(2000, OpMemset, 42, 20, 30)}, 0, 2},
		// The exec's two ids were known when the third came: those two
		// stand.
		{"id past the exec's", []*Measurement{graphRecord(2000, OpKernel, 41, 10, 20), graphRecord(2000, OpKernel, 42, 20, 30),
			graphRecord(2000, OpKernel, 43, 30, 40)}, 2, 1},
		{"no node id", []*Measurement{graphRecord(2000, OpKernel, 0, 10, 20)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const s, graph, exec = 0x5000, 0x6000, 0x7000
			c := NewCollector()
			m := New(c)
			m.StartMeasuring(testPID)
			for _, e := range []*ev{
				streamCreate(1, 100, s),
				beginCapture(1, 1000, s), driverLaunch(1, 1100, s, 0xf01, 1), driverLaunch(1, 1200, s, 0xf02, 1),
				endCapture(1, 1400, s, graph), instantiate(1, 1500, graph, exec),
				graphLaunch(1, 2000, exec, s),
			} {
				m.Handle(&e.Event)
			}
			for _, r := range tc.records {
				m.Measure(testPID, r)
			}
			m.Handle(&streamSync(1, 4000, 100*us, s).Event)
			if tc.records[0].GraphNode == 0 {
				// Not a reason to give the exec up: its ops still wait.
				if n := ops(c); n != 0 {
					t.Fatalf("%d ops out after a record without a node id, want 0", n)
				}
				p := finish(m, c)[0]
				if d := m.Drops(); d.GPUTimesUnmatched != tc.unmatched || p.GPUOps[0].Measured {
					t.Errorf("unmatched %d, op 0 measured %v; want %d, false", d.GPUTimesUnmatched, p.GPUOps[0].Measured, tc.unmatched)
				}
				return
			}
			if n := ops(c); n != 2 {
				t.Fatalf("%d ops out after records that do not fit, want both", n)
			}
			for _, e := range []*ev{graphLaunch(1, 200_000, exec, s), streamSync(1, 201_000, 100*us, s)} {
				m.Handle(&e.Event)
			}
			if n := ops(c); n != 4 {
				t.Fatalf("%d ops out after a later launch and its sync, want 4: the exec's ops are not held", n)
			}
			p := finish(m, c)[0]
			measured := 0
			for _, op := range p.GPUOps {
				if op.Measured {
					measured++
				}
			}
			if d := m.Drops(); d.GPUTimesUnmatched != tc.unmatched || measured != tc.measured {
				t.Errorf("unmatched %d, measured %d; want %d, %d", d.GPUTimesUnmatched, measured, tc.unmatched, tc.measured)
			}
		})
	}
}

// Graphs built by hand and changed.
func graphCreate(tid uint32, t, graph uint64) *ev {
	return call(event.CudaGraphCreate, tid, t, us, 0x7ffd6000, 0).out(graph)
}
func withNodeParams(e *ev, fn uint64, blocks uint32) *ev {
	e.Ext[0], e.Ext[1], e.Ext[2], e.Ext[3] = fn, xy(blocks, 1), xy(1, 128), xy(1, 1)
	return e
}
func addKernelNode(tid uint32, t, graph, node, fn uint64, blocks uint32) *ev {
	return withNodeParams(call(event.CudaGraphAddKernelNode, tid, t, us, 0x7ffd7000, graph, 0, 0, 0x7ffda000).out(node), fn, blocks)
}
func execSetKernel(tid uint32, t, exec, node, fn uint64, blocks uint32) *ev {
	return withNodeParams(call(event.CudaGraphExecKernelNodeSetParams, tid, t, us, exec, node, 0x7ffda000), fn, blocks)
}
func execUpdate(tid uint32, t, exec, graph uint64) *ev {
	return call(event.CudaGraphExecUpdate, tid, t, us, exec, graph, 0x7ffd8000)
}

// TestGraphBuiltAndChanged: a graph built node by node runs its nodes in
// the order they were added; cudaGraphExecKernelNodeSetParams changes the
// node it names, cudaGraphExecUpdate gives the exec another graph's nodes;
// a change the model cannot place (a node of a captured graph, whose
// handle it never saw) makes it forget the exec: its launches are one op
// again, counted in Limits.Graphs. A graph made before cudatap came is not
// followed.
func TestGraphBuiltAndChanged(t *testing.T) {
	const s, g1, g2, g3, x1, x3, n1, n2 = 0x5000, 0x6001, 0x6002, 0x6003, 0x7001, 0x7003, 0x8801, 0x8802
	col := NewCollector()
	m := New(col)
	for _, e := range []*ev{
		streamCreate(1, 100, s),
		graphCreate(1, 200, g3),
		addKernelNode(1, 300, g3, n1, 0xa1, 1), addKernelNode(1, 400, g3, n2, 0xa2, 2),
		addKernelNode(1, 450, 0x6fff, 0x8fff, 0xee, 1), // a graph made before: not followed
		instantiate(1, 500, g3, x3),
		graphLaunch(1, 1000, x3, s),
		execSetKernel(1, 1100, x3, n2, 0xb2, 3),
		graphLaunch(1, 1200, x3, s),
		beginCapture(1, 2000, s), driverLaunch(1, 2100, s, 0xf01, 1), driverLaunch(1, 2200, s, 0xf02, 1), endCapture(1, 2300, s, g1),
		beginCapture(1, 2400, s), driverLaunch(1, 2500, s, 0xf03, 1), driverLaunch(1, 2600, s, 0xf04, 1), endCapture(1, 2700, s, g2),
		instantiate(1, 2800, g1, x1),
		execUpdate(1, 2900, x1, g2),
		graphLaunch(1, 3000, x1, s),
		execSetKernel(1, 3100, x1, 0x9999, 0xc1, 1), // a captured node: cannot be placed
		graphLaunch(1, 3200, x1, s),
		graphLaunch(1, 3300, 0x6fff, s),
	} {
		m.Handle(&e.Event)
	}
	p := finish(m, col)[0]
	var got []uint64
	for _, op := range p.GPUOps {
		switch {
		case op.Kind == OpGraph:
			got = append(got, 0)
		case op.InGraph():
			got = append(got, op.Func)
			if n := p.NodeOf(&op); n == nil || p.Calls[n.Call].Args.Func != op.Func && op.Func != 0xb2 {
				t.Errorf("op %d (func %#x): node %+v, want the call that made it", op.ID, op.Func, n)
			}
		}
	}
	want := []uint64{0xa1, 0xa2, 0xa1, 0xb2, 0xf03, 0xf04, 0, 0}
	if len(got) != len(want) {
		t.Fatalf("ops ran %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ops ran %x, want %x", got, want)
		}
	}
	if g := p.GPUOps[3].Grid.X; g != 3 {
		t.Errorf("the set node runs grid %d, want 3", g)
	}
	if l := m.Drops().Limits.Graphs; l != 1 {
		t.Errorf("Limits.Graphs %d, want 1 (the change not placed)", l)
	}
}

// TestGraphMeasuredStale: an exec whose records never make up its ids (a
// node no record comes for) is given up once a launch with records waiting
// was proven complete MeasureSlack before the collector's flush: its
// records are counted unmatched and its ops go out bounded, not held for
// ever.
func TestGraphMeasuredStale(t *testing.T) {
	const s, graph, exec = 0x5000, 0x6000, 0x7000
	c := NewCollector()
	m := New(c)
	m.StartMeasuring(testPID)
	for _, e := range []*ev{
		streamCreate(1, 100, s),
		beginCapture(1, 1000, s), driverLaunch(1, 1100, s, 0xf01, 1), driverLaunch(1, 1200, s, 0xf02, 1),
		endCapture(1, 1400, s, graph), instantiate(1, 1500, graph, exec),
		graphLaunch(1, 2000, exec, s), streamSync(1, 4000, 100*us, s),
	} {
		m.Handle(&e.Event)
	}
	m.Measure(testPID, graphRecord(2000, OpKernel, 51, 10, 20)) // one record for two nodes
	m.MeasuredUntil(testPID, MeasureSlack+4000)                 // the sync returned at 4000+100µs: not yet
	if n := ops(c); n != 0 {
		t.Fatalf("%d ops out before the slack passed, want 0", n)
	}
	m.MeasuredUntil(testPID, MeasureSlack+10*ms)
	if n := ops(c); n != 2 {
		t.Fatalf("%d ops out after the slack, want 2", n)
	}
	if d := m.Drops(); d.GPUTimesUnmatched != 1 {
		t.Errorf("unmatched %d, want 1", d.GPUTimesUnmatched)
	}
	finish(m, c)
}
