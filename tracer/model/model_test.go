package model

import (
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

func TestDrops(t *testing.T) {
	m := New(nil)
	unknown := call(event.CudaLaunchKernel, 1, 1000, 0)
	unknown.Cookie = 0x7777
	m.Handle(&unknown.Event)
	m.Auxiliary()
	m.DecodeError()
	m.Handle(&launch(1, 2000, 0, kern).Event)
	m.Handle(&launch(2, 3000, 0, kern).pid(200).Event)
	m.SetKernelStats(10, 1, 2, 3, 4)
	m.SetKernelStats(11, 1, 2, 3, 5) // cumulative: the last call wins
	m.SetAttachFailures(6)
	want := Drops{Submitted: 11, Received: 5, RingbufFull: 1, InflightFull: 2, OrphanReturns: 3, ReadFaults: 5,
		DecodeErrors: 1, UnknownAPI: 1, AttachFailures: 6}
	if got := m.Drops(); got != want {
		t.Errorf("drops\n got %+v\nwant %+v", got, want)
	}
	// Ring buffer full, in-flight table full, decode errors, unknown APIs;
	// orphan returns began before the probes were attached.
	if got := want.Lost(); got != 1+2+1+1 {
		t.Errorf("Lost() = %d, want 5", got)
	}
	if (Drops{ReadFaults: 9, AttachFailures: 9, Submitted: 9, Received: 9, OrphanReturns: 9}).Lost() != 0 {
		t.Error("read faults, attach failures, orphans or counts counted as lost")
	}
	if m.Calls() != 2 {
		t.Errorf("Calls() = %d, want 2", m.Calls())
	}
	r := m.Finish()
	if r.Drops != want {
		t.Errorf("result drops %+v", r.Drops)
	}
	// The unknown API created no process.
	if len(r.Processes) != 2 || r.Processes[0].PID != testPID || r.Processes[1].PID != 200 {
		t.Errorf("processes %v", r.Processes)
	}
}

// TestStacksInterned: the model keeps each distinct native and Python
// stack once per process, and raw keys only: naming is the exporters' job.
func TestStacksInterned(t *testing.T) {
	py := func(e *ev, pairs ...[2]uint64) *ev { e.NPy = copy(e.Py[:], pairs); return e }
	r := run(t,
		launch(1, 1000, 0, 11).frames(1, 2),
		launch(1, 2000, 0, 11).frames(2, 3),
		launch(2, 3000, 0, 12).frames(1, 2),
		py(launch(2, 3500, 0, 12), [2]uint64{7, 1}, [2]uint64{7, 2}),
		py(launch(2, 3600, 0, 12), [2]uint64{7, 2}, [2]uint64{8, 2}),
		py(launch(2, 3700, 0, 12), [2]uint64{7, 1}, [2]uint64{7, 2}),
		launch(1, 4000, 0, 11).pid(200).frames(1),
		streamSync(2, 6000, us, 0).pid(200),
	)
	p := r[0]
	if !reflect.DeepEqual(p.Threads, map[uint32]struct{}{1: {}, 2: {}}) ||
		!reflect.DeepEqual(p.Stacks, [][]uint64{{1, 2}, {2, 3}}) {
		t.Errorf("threads %v stacks %v", p.Threads, p.Stacks)
	}
	wantPy := [][]PyKey{{{7, 1}, {7, 2}}, {{7, 2}, {8, 2}}}
	if !reflect.DeepEqual(p.PyStacks, wantPy) {
		t.Errorf("python stacks %v", p.PyStacks)
	}
	for i, w := range []int32{0, 1, 0, -1, -1, -1} {
		if p.Calls[i].Stack != w {
			t.Errorf("call %d: stack %d, want %d", i, p.Calls[i].Stack, w)
		}
	}
	for i, w := range []int32{-1, -1, -1, 0, 1, 0} {
		if p.Calls[i].PyStack != w {
			t.Errorf("call %d: Python stack %d, want %d", i, p.Calls[i].PyStack, w)
		}
	}
	if q := r[1]; !reflect.DeepEqual(q.Stacks, [][]uint64{{1}}) || q.Label() != "process (pid 200)" {
		t.Errorf("pid 200: stacks %v label %q", q.Stacks, q.Label())
	}
}

// TestStacksBounded: past maxStacks distinct stacks a process keeps no
// more, and says how many calls went without.
func TestStacksBounded(t *testing.T) {
	m := New(nil)
	for i := range uint64(maxStacks + 10) {
		m.Handle(&launch(1, 1000+i, 0, 11).frames(i + 1).Event)
	}
	r := m.Finish()
	if n := len(r.Processes[0].Stacks); n != maxStacks || r.Drops.StacksDropped != 10 {
		t.Errorf("%d stacks kept, %d dropped; want %d, 10", n, r.Drops.StacksDropped, maxStacks)
	}
}

func TestCallFields(t *testing.T) {
	col := NewCollector()
	m := New(col)
	e := memcpyAsync(3, 1000, 200*us, hostQ, devA, 64, event.DeviceToHost, 0x2).ptsz().frames(9)
	e.Flags |= event.FlagStackArgFault
	m.Handle(&e.Event)
	m.Handle(&launch(3, 300_000, 0, kern).pid(50).Event) // another process: correlations keep counting
	m.Handle(&launch(3, 400_000, 0, kern).Event)
	entry := call(event.CudaStreamDestroy, 3, 500_000, 0, 0x77) // entry-only
	m.Handle(&entry.Event)
	r := finish(m, col)
	p := r[1]
	var wantArgs event.Args
	e.Decode(&wantArgs)
	want := Call{Start: 1000, End: 201_000, TID: 3, API: event.CudaMemcpyAsync, Symbol: 1, Stream: 1, Ret: 0, HasRet: true,
		Args: wantArgs, Correlation: 1, GPUOp: 0, Sync: SyncPageableMemcpy, BlockedNs: 200 * us, Stack: 0, PyStack: -1,
		ReadFault: true, Pageable: true}
	if !reflect.DeepEqual(p.Calls[0], want) {
		t.Errorf("call\n got %+v\nwant %+v", p.Calls[0], want)
	}
	if c := p.Calls[0]; c.SymbolName() != "cudaMemcpyAsync_ptsz" || c.Duration() != 200*us || c.Spec().Name != "cudaMemcpyAsync" {
		t.Errorf("symbol %q duration %d", c.SymbolName(), c.Duration())
	}
	if c := p.Calls[1]; c.Correlation != 3 || p.GPUOps[1].Correlation != 3 || r[0].Calls[0].Correlation != 2 {
		t.Errorf("correlations %d %d %d, want 3 3 2", c.Correlation, p.GPUOps[1].Correlation, r[0].Calls[0].Correlation)
	}
	if c := p.Calls[2]; c.End != c.Start || c.Duration() != 0 || c.HasRet || c.GPUOp != -1 || c.Correlation != 0 {
		t.Errorf("entry-only call %+v", c)
	}
	op := p.GPUOps[0]
	wantOp := GPUOp{ID: 0, TID: 3, AfterStream: -1, Kind: OpMemcpy, Stream: 1, Call: 0, Correlation: 1, Enqueued: 1000, Start: 1000, End: 201_000,
		Bounded: true, After: -1, API: event.CudaMemcpyAsync, Bytes: 64, CopyKind: event.DeviceToHost, Pageable: true, final: true}
	if !reflect.DeepEqual(op, wantOp) {
		t.Errorf("op\n got %+v\nwant %+v", op, wantOp)
	}
	if p.FirstSeen != 1000 || p.LastSeen != 500_000 || r[0].FirstSeen != 300_000 || r[0].LastSeen != 300_000 {
		t.Errorf("process %d..%d", p.FirstSeen, p.LastSeen)
	}
	if (&Call{API: 999}).SymbolName() != "api#999" {
		t.Error("unknown API symbol name")
	}
}

func TestAddProcess(t *testing.T) {
	m := New(nil)
	m.AddProcess(300)
	m.AddProcess(300)
	m.Handle(&launch(1, 1000, 0, kern).pid(300).Event)
	m.AddProcess(20)
	r := m.Finish()
	names := NewNames()
	names.Procs[20] = ProcessInfo{Comm: "x"}
	r.Name(names)
	if len(r.Processes) != 2 || r.Processes[0].PID != 20 || r.Processes[1].PID != 300 ||
		r.Processes[0].NCalls != 0 || r.Processes[1].NCalls != 1 || len(r.Processes[1].Streams) != 1 ||
		r.Processes[0].Info.Comm != "x" || r.Processes[1].Label() != "process (pid 300)" {
		t.Errorf("processes %+v", r.Processes)
	}
}

// TestLayoutNoOverflow: splitting a long busy interval among many ops must
// not overflow (t-begin)*(k+1).
func TestLayoutNoOverflow(t *testing.T) {
	const begin = uint64(1e9)
	var evs []*ev
	for i := uint64(0); i < 4; i++ {
		evs = append(evs, launch(1, begin+i, stream, kern))
	}
	syncStart := uint64(1e19) - 5*ms
	evs = append(evs, streamSync(1, syncStart, 5*ms, stream))
	p := run1(t, evs...)
	end := syncStart + 5*ms
	for k, op := range p.GPUOps {
		share := new(big.Int).SetUint64(end - begin)
		share.Mul(share, big.NewInt(int64(k+1)))
		share.Div(share, big.NewInt(4))
		want := begin + share.Uint64()
		if op.End != want || !op.Bounded {
			t.Errorf("op %d ends at %d, want %d", k, op.End, want)
		}
	}
}

// TestLayoutInvariants drives the model with a long random but realistic
// call sequence and checks what must hold for any inferred GPU layout.
func TestLayoutInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		evs := randomSession(seed, 3000)
		p := run1(t, evs...)
		checkLayout(t, seed, p)
	}
}

// TestWindowBounded: with no synchronization for longer than the window,
// the oldest pending ops are laid out as Finish would have laid them out,
// each counted; memory stays at the window; the layout stays valid.
func TestWindowBounded(t *testing.T) {
	var evs []*ev
	for i := range uint64(1000) {
		evs = append(evs, launch(1, 1000+10*i, stream, kern))
	}
	small, smallCol := New(NewCollector()), NewCollector()
	small.sink, small.window = smallCol, 64
	big := NewCollector()
	bigM := New(big)
	for _, e := range evs {
		small.Handle(&e.Event)
		bigM.Handle(&e.Event)
	}
	if n := len(small.procs[testPID].ops); n != 64 {
		t.Errorf("window grew to %d ops, want 64", n)
	}
	rs, rb := small.Finish(), bigM.Finish()
	if rs.Drops.WindowFull != 1000-64 || rb.Drops.WindowFull != 0 {
		t.Errorf("window full %d / %d, want %d / 0", rs.Drops.WindowFull, rb.Drops.WindowFull, 1000-64)
	}
	if !reflect.DeepEqual(smallCol.Traces, big.Traces) {
		t.Error("ops laid out early differ from the same ops laid out at Finish")
	}
	// Random sessions through a tiny window keep every op, in order, valid.
	for seed := uint64(1); seed <= 5; seed++ {
		col := NewCollector()
		m := New(col)
		m.window = 16
		for _, e := range randomSession(seed, 3000) {
			m.Handle(&e.Event)
		}
		p := finish(m, col)[0]
		if int64(len(p.GPUOps)) != p.NGPUOps {
			t.Fatalf("seed %d: %d ops reached the sink, %d enqueued", seed, len(p.GPUOps), p.NGPUOps)
		}
		for i, op := range p.GPUOps {
			if op.ID != i || op.Start < op.Enqueued || op.End < op.Start {
				t.Fatalf("seed %d op %d: %+v", seed, i, op)
			}
		}
	}
}

// randomSession makes n calls, one after another (each starts after the
// previous one returned), over every kind of stream.
func randomSession(seed uint64, n int) []*ev {
	rng := rand.New(rand.NewPCG(seed, seed*7919))
	streams := []uint64{0, 0x1, 0x2, stream, nbStrm, 0xc0 /* pre-existing */}
	events := []uint64{0xe1, 0xe2, 0xe3}
	now := uint64(1_000_000)
	var out []*ev
	add := func(e *ev) {
		out = append(out, e)
		now = max(e.Start, e.End) + 1 + rng.Uint64N(20*us)
	}
	add(streamCreate(1, now, stream))
	add(streamCreateFlags(1, now, nbStrm, 1))
	add(hostAlloc(1, now, hostP, 1<<20))
	add(malloc(1, now, us, devA, 1<<20))
	pick := func(s []uint64) uint64 { return s[rng.IntN(len(s))] }
	dur := func() uint64 { return []uint64{2 * us, 40 * us, 60 * us, 500 * us, 3 * ms}[rng.IntN(5)] }
	for len(out) < n {
		tid := uint32(1 + rng.IntN(3))
		s := pick(streams)
		switch r := rng.IntN(100); {
		case r < 50:
			add(launch(tid, now, s, kern+uint64(rng.IntN(4))*0x100))
		case r < 60:
			host := uint64(hostP)
			if rng.IntN(2) == 0 {
				host = hostQ
			}
			if rng.IntN(2) == 0 {
				add(memcpyAsync(tid, now, dur(), devA, host, 4096, event.HostToDevice, s))
			} else {
				add(memcpyAsync(tid, now, dur(), host, devA, 4096, event.DeviceToHost, s))
			}
		case r < 63:
			add(memsetAsync(tid, now, devA, 64, s))
		case r < 70:
			add(eventRecord(tid, now, pick(events), s))
		case r < 76:
			add(streamWait(tid, now, s, pick(events)))
		case r < 82:
			add(streamSync(tid, now, dur(), s))
		case r < 85:
			add(eventSync(tid, now, dur(), pick(events)))
		case r < 87:
			add(deviceSync(tid, now, dur()))
		case r < 90:
			k := rng.IntN(4)
			for i := 0; i < k; i++ {
				add(streamQuery(tid, now, us, s, 600))
			}
			add(streamQuery(tid, now, us, s, 0))
		case r < 92:
			add(eventQuery(tid, now, us, pick(events), int64(600*rng.IntN(2))))
		case r < 94:
			add(memcpySync(tid, now, dur(), hostQ, devA, 64, event.DeviceToHost))
		case r < 95:
			add(memsetSync(tid, now, dur(), devA, 64))
		case r < 97:
			add(malloc(tid, now, dur(), devB, 64))
			add(free(tid, now, dur(), devB))
		default:
			add(launch(tid, now, s, kern).ptsz())
		}
	}
	return out
}

func checkLayout(t *testing.T, seed uint64, p *traced) {
	t.Helper()
	ops := p.GPUOps
	last := map[int]int{}
	for i, op := range ops {
		if op.Start < op.Enqueued || op.End < op.Start {
			t.Fatalf("seed %d op %d: enqueued %d start %d end %d", seed, i, op.Enqueued, op.Start, op.End)
		}
		if op.Call < 0 || p.Calls[op.Call].GPUOp != i || p.Calls[op.Call].Correlation != op.Correlation {
			t.Fatalf("seed %d op %d: call %d does not point back", seed, i, op.Call)
		}
		if j, ok := last[op.Stream]; ok && op.Start < ops[j].End {
			t.Fatalf("seed %d: op %d [%d,%d] overlaps op %d [%d,%d] on stream %d", seed, i, op.Start, op.End, j, ops[j].Start, ops[j].End, op.Stream)
		}
		last[op.Stream] = i
		if op.After >= 0 {
			if op.After >= i {
				t.Fatalf("seed %d op %d waits for a later op %d", seed, i, op.After)
			}
			if dep := ops[op.After]; op.Start < dep.End {
				t.Fatalf("seed %d op %d starts at %d, before op %d it waits for ends at %d", seed, i, op.Start, op.After, dep.End)
			}
		}
	}
	// Every blocking sync bounds what it covers, no later than it returned.
	blocking := func(sid int) bool { return p.Streams[sid].Blocking() }
	for _, s := range p.Syncs {
		c := p.Calls[s.Call]
		var covers func(op GPUOp) bool
		switch s.Kind {
		case SyncStream:
			covers = func(op GPUOp) bool { return op.Stream == s.Stream || (s.Stream == 0 && blocking(op.Stream)) }
		case SyncDevice, SyncFree:
			covers = func(GPUOp) bool { return true }
		case SyncMemcpy, SyncMemset:
			covers = func(op GPUOp) bool { return op.Stream == s.Stream || (s.Stream == 0 && blocking(op.Stream)) }
		default:
			continue
		}
		for i, op := range ops {
			if op.Call > s.Call || !covers(op) || (op.Call == s.Call && s.Kind != SyncMemcpy && s.Kind != SyncMemset) {
				continue
			}
			if !op.Bounded || op.End > c.End {
				t.Fatalf("seed %d: %v at %d..%d (call %d) leaves op %d (call %d, stream %d) bounded %v ending at %d",
					seed, s.Kind, c.Start, c.End, s.Call, i, op.Call, op.Stream, op.Bounded, op.End)
			}
		}
	}
}

// TestRetire: a retired process is concluded as Finish would (its op no
// synchronization bounded goes to the sink), then forgotten: the others
// stay, and it is in no later result.
func TestRetire(t *testing.T) {
	c := NewCollector()
	m := New(c)
	m.Handle(&launch(1, 1000, 0, kern).Event)
	m.Handle(&launch(2, 2000, 0, kern).pid(200).Event)
	if n := len(c.Traces[testPID].GPUOps); n != 0 {
		t.Fatalf("%d ops out before any synchronization", n)
	}
	p := m.Retire(testPID)
	if p == nil || p.PID != testPID || p.NCalls != 1 {
		t.Fatalf("retired %+v", p)
	}
	if ops := c.Traces[testPID].GPUOps; len(ops) != 1 || !ops[0].final {
		t.Errorf("the retired process's op: %+v, want it laid out and handed to the sink", ops)
	}
	if m.Retire(testPID) != nil {
		t.Error("retired twice")
	}
	if pids := m.PIDs(); !reflect.DeepEqual(pids, []uint32{200}) {
		t.Errorf("PIDs after retiring %d: %v", testPID, pids)
	}
	if r := m.Finish(); len(r.Processes) != 1 || r.Processes[0].PID != 200 {
		t.Errorf("final processes %v", r.Processes)
	}
}

// TestPyFrameBySite: a Python frame's name is kept once per site (code
// object and instruction), whatever entry flags a stack carries; names a
// recording kept by the whole key are still found.
func TestPyFrameBySite(t *testing.T) {
	n := NewNames()
	site := PyKey{Code: 0x10, Instr: 42}
	n.Py[PyNameKey{7, site}] = "train.py:3 step"
	for _, k := range []PyKey{site, {0x10, 42 | PyInstrEntry | PyInstrEntryKnown}, {0x10, 42 | PyInstrEntryKnown}} {
		if got := n.PyFrame(7, k); got != "train.py:3 step" {
			t.Errorf("PyFrame(%#x) = %q", k.Instr, got)
		}
	}
	old := PyKey{Code: 0x20, Instr: 5 | PyInstrEntryKnown}
	n.Py[PyNameKey{7, old}] = "old.py:1 f"
	if got := n.PyFrame(7, old); got != "old.py:1 f" {
		t.Errorf("a name kept by the whole key: %q", got)
	}
}

// TestEveryClassHandled: every class an API has, but ClassOther, has a
// handler; a class left out would count its calls and change nothing.
func TestEveryClassHandled(t *testing.T) {
	n := 0
	for a := event.API(1); event.Lookup(a) != nil; a++ {
		s := event.Lookup(a)
		n++
		if s.Class != event.ClassOther && (int(s.Class) >= len(handlers) || handlers[s.Class] == nil) {
			t.Errorf("%s: class %d has no handler", s.Name, s.Class)
		}
	}
	if n < 50 {
		t.Errorf("only %d APIs looked up", n)
	}
}
