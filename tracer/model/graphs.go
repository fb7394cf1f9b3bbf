package model

import (
	"slices"

	"github.com/cudatap/cudatap/tracer/event"
)

// CUDA graphs. Work enqueued on a capturing stream is recorded into the
// graph being captured, not run (Call.Captured); cudaStreamEndCapture
// returns that graph, cudaGraphInstantiate makes an executable graph (an
// exec) of it, and each cudaGraphLaunch of the exec runs its nodes. The
// model keeps the nodes of every graph it followed — what each runs, and
// the call that made it (Process.GraphNodes) — and expands each launch into
// one GPU op per node, in node order, on the launch's stream: named as the
// captured op is (a kernel by its function), all with the launch call's
// correlation id, as CUPTI and Kineto give a graph's kernels the
// correlation of the cudaGraphLaunch that ran them. Without GPU times the
// ops are bounded as any are (the launch's bounds, shared in node order);
// with them, each is measured by the CUPTI record of its node (nodeOp).
//
// A stream that waits for an event recorded on a capturing stream joins
// that capture (CUDA's fork), until the capture ends. A graph built by hand
// (cudaGraphCreate, cudaGraphAddKernelNode) holds its kernel nodes in the
// order they were added. cudaGraphExecUpdate gives an exec the nodes of
// another graph of its shape, cudaGraphExecKernelNodeSetParams one node a
// new kernel; a change the model cannot place (a node of a captured graph:
// its handle is never seen) makes it forget the exec rather than name its
// ops wrongly. A launch of an exec the model does not know (instantiated
// before cudatap attached, past the bounds, or changed so) stays one op,
// OpGraph: "Graph launch".

// GraphNode is a node of a CUDA graph as the call that made it: a launch,
// copy, set or collective captured on a capturing stream, or a kernel node
// added by hand. The ops a graph launch runs point at their node's
// (GPUOp.Node, Process.NodeOf).
type GraphNode struct {
	Index          int32     // its place in its graph, in node order (capture order, or the order nodes were added)
	Call           int       // Seq of the call that made it
	API            event.API // that call's API, as the program called it (a runtime launch, not the driver's under it)
	TID            uint32    // its thread
	Stack, PyStack int32     // its stacks (Process.Stacks, PyStacks), -1 = none
}

// NodeOf is the graph node op ran, nil when op is not a graph launch's
// or its node's call was not kept.
func (p *Process) NodeOf(op *GPUOp) *GraphNode {
	if op.Node <= 0 || int(op.Node) > len(p.GraphNodes) {
		return nil
	}
	return &p.GraphNodes[op.Node-1]
}

// InGraph reports whether a graph launch ran op, as one of its graph's
// nodes.
func (op *GPUOp) InGraph() bool { return op.Node != 0 }

// maxGraphNodes bounds the nodes a process's graphs and execs hold, and the
// nodes' calls it keeps (Process.GraphNodes): a graph that does not fit is
// not followed (Limits.Graphs), its launches stay one op each. vLLM
// captures some tens of graphs of about a thousand nodes.
const maxGraphNodes = 1 << 18

// graphNode is what a node runs.
type graphNode struct {
	fn, bytes   uint64
	grid, block event.Dim3
	site        int32 // GPUOp.Node of its ops
	api         event.API
	kind        OpKind
	copyKind    event.MemcpyKind
	pageable    bool
}

// graphDef is a graph's nodes, in node order. A graph and the execs made
// of it share the slice: whoever changes a node copies it first.
type graphDef struct {
	nodes  []graphNode
	shared bool
}

// execDef is an executable graph: the nodes its launches run, the graph
// they came from (whose node handles name them), and what the model learnt
// of CUPTI's ids for them (nodeOp).
type execDef struct {
	graphDef
	from uint64
	// measurable: the nodes CUPTI times (not host functions), by index;
	// ids: CUPTI's ids of them, sorted, as its records taught them; bad:
	// its records do not fit its nodes, they are not joined.
	measurable []int32
	ids        []uint64
	bad        bool
	parked     []parkedMeasurement
}

// capture is a stream capture under way, on its origin stream and the
// streams that joined it.
type capture struct {
	nodes    []graphNode
	overflow bool // more nodes than fit: the graph will not be followed
}

// beginCapture starts a capture on the call's stream, unless it failed (a
// stream capturing already, the legacy stream).
func (m *Model) beginCapture(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	if call.failed() {
		return
	}
	ps.capturing[int(call.Stream)] = &capture{}
}

// captured records op, which the current call enqueued on a stream of
// capture c, as the capture's next node.
func (m *Model) captured(ps *procState, c *capture, op *GPUOp) {
	call := &m.call
	call.Captured = true
	if c.overflow || ps.graphNodes+len(c.nodes) >= maxGraphNodes {
		c.overflow = true
		return
	}
	site := op.Node // a graph launched into the capture: its nodes keep their calls
	if site == 0 {
		site = ps.newSite(call, len(c.nodes))
	}
	api := op.API // a graph launched into the capture: what its node runs
	if api == 0 {
		api = call.API
	}
	c.nodes = append(c.nodes, graphNode{fn: op.Func, bytes: op.Bytes, grid: op.Grid, block: op.Block, site: site, api: api,
		kind: op.Kind, copyKind: op.CopyKind, pageable: op.Pageable})
}

// newSite keeps call as the maker of node index of its graph; the node's
// GPUOp.Node (-1: not kept).
func (ps *procState) newSite(call *Call, index int) int32 {
	if len(ps.p.GraphNodes) >= maxGraphNodes {
		return -1
	}
	api := call.API
	if rt := event.RuntimeLaunch(api); call.ViaRuntime && rt != 0 {
		api = rt
	}
	ps.p.GraphNodes = append(ps.p.GraphNodes, GraphNode{Index: int32(index), Call: call.Seq, API: api,
		TID: call.TID, Stack: call.Stack, PyStack: call.PyStack})
	return int32(len(ps.p.GraphNodes))
}

// endCapture ends the capture of the call's stream: the graph it returned
// holds the nodes captured, on every stream that joined.
func (m *Model) endCapture(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	c := ps.capturing[int(call.Stream)]
	if c == nil {
		return
	}
	for sid, other := range ps.capturing {
		if other == c {
			delete(ps.capturing, sid)
		}
	}
	if call.failed() || call.Args.Graph == 0 {
		return // capture failed (invalidated): no graph
	}
	if c.overflow {
		m.drops.Limits.Graphs++
		m.forgetGraph(ps, call.Args.Graph)
		return
	}
	m.keepGraph(ps, call.Args.Graph, &graphDef{nodes: c.nodes})
}

// instantiate follows cudaGraphInstantiate: the exec runs the graph's
// nodes as they are now.
func (m *Model) instantiate(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	a := &call.Args
	if call.failed() || a.Ptr == 0 {
		return
	}
	g := ps.graphs[a.Graph]
	if g == nil {
		// A graph not followed: the exec's launches stay one op each
		// (and a handle reused forgets the exec it named before).
		m.forgetExec(ps, a.Ptr)
		return
	}
	g.shared = true
	m.keepExec(ps, a.Ptr, newExec(g.nodes, a.Graph))
}

func newExec(nodes []graphNode, from uint64) *execDef {
	x := &execDef{graphDef: graphDef{nodes: nodes, shared: true}, from: from}
	for i := range nodes {
		if nodes[i].kind != OpHostFunc {
			x.measurable = append(x.measurable, int32(i))
		}
	}
	return x
}

// keepGraph remembers graph g's nodes, while there is room.
func (m *Model) keepGraph(ps *procState, g uint64, def *graphDef) {
	m.forgetGraph(ps, g)
	if len(ps.graphs) >= maxGraphs || ps.graphNodes+len(def.nodes) > maxGraphNodes {
		m.drops.Limits.Graphs++
		return
	}
	ps.graphs[g] = def
	ps.graphNodes += len(def.nodes)
}

func (m *Model) keepExec(ps *procState, h uint64, x *execDef) {
	m.forgetExec(ps, h)
	if len(ps.execs) >= maxGraphs || ps.graphNodes+len(x.nodes) > maxGraphNodes {
		m.drops.Limits.Graphs++
		return
	}
	ps.execs[h] = x
	ps.graphNodes += len(x.nodes)
}

func (m *Model) forgetGraph(ps *procState, g uint64) {
	if old := ps.graphs[g]; old != nil {
		ps.graphNodes -= len(old.nodes)
		delete(ps.graphs, g)
	}
}

// forgetExec forgets exec h. Records of its launches still to come find
// it through them (launchState).
func (m *Model) forgetExec(ps *procState, h uint64) {
	if old := ps.execs[h]; old != nil {
		ps.graphNodes -= len(old.nodes)
		delete(ps.execs, h)
	}
}

// nodeRef is where a node added by hand lives: its graph, its index.
type nodeRef struct {
	graph uint64
	index int
}

// graphCall follows the calls that build a graph by hand, change an exec,
// or destroy either.
func (m *Model) graphCall(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	a := &call.Args
	if call.failed() {
		return // it failed: nothing changed
	}
	switch call.API {
	case event.CudaGraphCreate, event.CuGraphCreate:
		if a.Graph != 0 {
			m.keepGraph(ps, a.Graph, &graphDef{})
		}
	case event.CudaGraphAddKernelNode, event.CuGraphAddKernelNode:
		m.addKernelNode(ps, call)
	case event.CudaGraphExecKernelNodeSetParams, event.CuGraphExecKernelNodeSetParams:
		m.setExecKernel(ps, call)
	case event.CudaGraphExecUpdate, event.CuGraphExecUpdate:
		m.execUpdate(ps, a.Ptr, a.Graph)
	case event.CudaGraphDestroy, event.CuGraphDestroy:
		m.forgetGraph(ps, a.Graph)
	case event.CudaGraphExecDestroy, event.CuGraphExecDestroy:
		m.forgetExec(ps, a.Ptr)
	}
}

// addKernelNode appends a kernel node to a graph the model follows (one
// made before cudatap attached is not: its first nodes are unknown).
func (m *Model) addKernelNode(ps *procState, call *Call) {
	a := &call.Args
	g := ps.graphs[a.Graph]
	if g == nil {
		return
	}
	if ps.graphNodes >= maxGraphNodes || len(ps.nodeRefs) >= maxGraphNodes {
		m.drops.Limits.Graphs++
		m.forgetGraph(ps, a.Graph)
		return
	}
	// An exec that shares the nodes sees only those it was made with:
	// appending leaves them as they are.
	g.nodes = append(g.nodes, graphNode{fn: a.Func, grid: a.Grid, block: a.Block, site: ps.newSite(call, len(g.nodes)),
		api: call.API, kind: OpKernel})
	ps.graphNodes++
	if a.Node != 0 {
		if ps.nodeRefs == nil {
			ps.nodeRefs = map[uint64]nodeRef{}
		}
		ps.nodeRefs[a.Node] = nodeRef{graph: a.Graph, index: len(g.nodes) - 1}
	}
}

// setExecKernel gives the exec's node the call names its new kernel; a
// node it cannot place makes it forget the exec.
func (m *Model) setExecKernel(ps *procState, call *Call) {
	a := &call.Args
	x := ps.execs[a.Ptr]
	if x == nil {
		return
	}
	ref, ok := ps.nodeRefs[a.Node]
	if !ok || ref.graph != x.from || ref.index >= len(x.nodes) || x.nodes[ref.index].kind != OpKernel {
		m.drops.Limits.Graphs++
		m.forgetExec(ps, a.Ptr)
		return
	}
	if x.shared {
		x.nodes, x.shared = slices.Clone(x.nodes), false
	}
	n := &x.nodes[ref.index]
	n.fn, n.grid, n.block = a.Func, a.Grid, a.Block
}

// execUpdate gives exec h the nodes of graph g, which has its shape (else
// CUDA refuses the update, and the call failed). Its nodes keep their
// CUPTI ids. An update from a graph the model does not follow makes it
// forget the exec.
func (m *Model) execUpdate(ps *procState, h, g uint64) {
	x, def := ps.execs[h], ps.graphs[g]
	if x == nil {
		return
	}
	same := def != nil && len(def.nodes) == len(x.nodes)
	for i := 0; same && i < len(x.nodes); i++ {
		same = def.nodes[i].kind == x.nodes[i].kind
	}
	if !same {
		m.drops.Limits.Graphs++
		m.forgetExec(ps, h)
		return
	}
	def.shared = true
	x.nodes, x.shared, x.from = def.nodes, true, g
}

// graphLaunch follows cudaGraphLaunch: it enqueues the ops the exec runs,
// one per node, or one OpGraph for an exec not followed.
func (m *Model) graphLaunch(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	ps.p.Streams[call.Stream].Stats.GraphLaunches++
	x := ps.execs[call.Args.Ptr]
	if x == nil || len(x.nodes) == 0 {
		m.enqueue(ps, GPUOp{Kind: OpGraph})
		return
	}
	m.corr++
	corr, first := m.corr, -1
	for i := range x.nodes {
		n := &x.nodes[i]
		id := m.enqueueAs(ps, GPUOp{Kind: n.kind, Func: n.fn, Bytes: n.bytes, Grid: n.grid, Block: n.block, Node: n.site,
			API: n.api, CopyKind: n.copyKind, Pageable: n.pageable}, corr)
		if id < 0 {
			continue // launched into a capture: its nodes joined the capture
		}
		if first < 0 {
			first = id
		}
	}
	if first < 0 {
		return
	}
	call.GPUOp = first
	ps.p.Streams[call.Stream].Stats.GraphOps += int64(len(x.nodes))
	if ps.measuring {
		if x.bad {
			// Its records do not fit its nodes: not held for them.
			for id := first; id < first+len(x.nodes) && len(ps.shared) < maxGroupOps; id++ {
				ps.shared[id] = true
			}
		} else if len(ps.launches) < maxGroupOps {
			ps.launches[corr] = &launchState{exec: x, first: first, left: len(x.nodes)}
		}
	}
}

// Measured graph launches. CUPTI gives each op a graph launch ran the
// launch's correlation id and the id of the node that ran it
// (graphNodeId): unique in the process, handed out as nodes are made, so
// an exec's nodes have increasing ids in node order (captured or added in
// that order, instantiated in it). The model learns the ids of an exec's
// measurable nodes from its records — once it has seen as many distinct
// ids as the exec has such nodes, the k-th smallest is node k's — and
// parks records until then. A record whose kind (kernel, copy, set) or
// kernel name does not fit the node its id points at, or an id past the
// exec's, marks the exec bad: its records are counted unmatched, never
// guessed, and its ops go out bounded.

// launchState is a measured graph launch whose ops are not all released.
type launchState struct {
	exec  *execDef
	first int // op ID of node 0
	left  int // ops not released yet
}

// parkedMeasurement waits until its exec's ids are known.
type parkedMeasurement struct {
	r    Measurement
	corr uint64 // the launch's correlation id
}

// maxParked bounds the measurements a process parks; past it they are
// counted unmatched.
const maxParked = 1 << 14

// nodeOp finds the op of graph launch `last` (its last op, which the
// measurement's call enqueued) that r measured; wait says r was parked.
func (m *Model) nodeOp(ps *procState, last *GPUOp, r *Measurement) (op *GPUOp, wait bool) {
	ls := ps.launches[last.Correlation]
	if ls == nil || r.GraphNode == 0 || ls.exec.bad {
		return nil, false
	}
	x := ls.exec
	if len(x.ids) == len(x.measurable) {
		return m.nodeOpOf(ps, ls, r), false
	}
	if ps.nParked >= maxParked {
		return nil, false
	}
	x.parked = append(x.parked, parkedMeasurement{*r, last.Correlation})
	ps.nParked++
	if i, found := slices.BinarySearch(x.ids, r.GraphNode); !found {
		x.ids = slices.Insert(x.ids, i, r.GraphNode)
	}
	if len(x.ids) == len(x.measurable) {
		m.unpark(ps, x)
	}
	return nil, true
}

// staleExecs gives up the execs whose ids are still not all known though
// a launch with records parked was proven complete before t: its records
// have all come (t is MeasureSlack before the collector's flush), so the
// exec has nodes no record comes for (a node cudatap saw twice, one CUPTI
// does not time), and its ids would never be known.
func (m *Model) staleExecs(ps *procState, t uint64) {
	for _, ls := range ps.launches {
		x := ls.exec
		if len(x.parked) == 0 || x.bad {
			continue
		}
		if last := ps.op(ls.first + len(x.nodes) - 1); last != nil && last.final && last.provenAt < t {
			m.badExec(ps, x)
		}
	}
}

// nodeOpOf is the op of launch ls whose node has CUPTI id r.GraphNode;
// nil, and the exec marked bad, when r does not fit it.
func (m *Model) nodeOpOf(ps *procState, ls *launchState, r *Measurement) *GPUOp {
	x := ls.exec
	k, found := slices.BinarySearch(x.ids, r.GraphNode)
	var op *GPUOp
	if found {
		op = ps.op(ls.first + int(x.measurable[k]))
	}
	if op == nil {
		if !found {
			m.badExec(ps, x)
		}
		return nil
	}
	fits := op.Kind == r.Kind || (op.Kind == OpCollective && r.Kind == OpKernel)
	if fits && r.Kind == OpKernel && r.Name != "" {
		if name, ok := ps.p.MeasuredNames[op.Func]; ok && name != r.Name {
			fits = false
		}
	}
	if !fits {
		m.badExec(ps, x)
		return nil
	}
	return op
}

// unpark joins what waited for exec x's ids, once they are known. Every
// parked record must fit its node, or none is joined.
func (m *Model) unpark(ps *procState, x *execDef) {
	parked := x.parked
	x.parked = nil
	ps.nParked -= len(parked)
	ops := make([]*GPUOp, len(parked))
	for i := range parked {
		if ls := ps.launches[parked[i].corr]; ls != nil && ls.exec == x {
			if ops[i] = m.nodeOpOf(ps, ls, &parked[i].r); ops[i] == nil {
				break // x is bad now
			}
		}
	}
	for i := range parked {
		r := &parked[i].r
		switch {
		case x.bad:
			m.drops.GPUTimesUnmatched++
			m.missed(ps.p.PID, "graph node", r, nil)
		case ops[i] == nil:
			m.drops.GPUTimesLate++ // its launch's ops went out meanwhile
			m.missed(ps.p.PID, "late", r, nil)
		default:
			m.apply(ps, ops[i], r, false)
		}
	}
}

// badExec gives up joining exec x's records: those parked are counted
// unmatched, and the unmeasured ops of its launches are no longer held.
func (m *Model) badExec(ps *procState, x *execDef) {
	if x.bad {
		return
	}
	x.bad = true
	m.dropParked(ps, x)
	for corr, ls := range ps.launches {
		if ls.exec != x {
			continue
		}
		delete(ps.launches, corr)
		for id := ls.first; id < ls.first+len(x.nodes); id++ {
			op := ps.op(id)
			if op == nil || op.released || op.Measured {
				continue
			}
			if len(ps.shared) < maxGroupOps {
				ps.shared[id] = true
			}
			if op.final {
				m.release(ps, op)
			}
		}
	}
}

// dropParked counts exec x's parked measurements unmatched.
func (m *Model) dropParked(ps *procState, x *execDef) {
	for i := range x.parked {
		m.drops.GPUTimesUnmatched++
		m.missed(ps.p.PID, "graph node", &x.parked[i].r, nil)
	}
	ps.nParked -= len(x.parked)
	x.parked = nil
}

// dropAllParked: no more ids will be learnt (measuring ended). Execs
// forgotten since their launches are found through those.
func (m *Model) dropAllParked(ps *procState) {
	for _, x := range ps.execs {
		m.dropParked(ps, x)
	}
	for _, ls := range ps.launches {
		m.dropParked(ps, ls.exec)
	}
	clear(ps.launches)
}

// launchReleased notes that op, which a graph launch ran, went to the sink.
func (ps *procState) launchReleased(op *GPUOp) {
	if ls := ps.launches[op.Correlation]; ls != nil {
		if ls.left--; ls.left <= 0 {
			delete(ps.launches, op.Correlation)
		}
	}
}
