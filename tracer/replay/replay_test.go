package replay

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// live mimics a recording session: names are written after the record
// that first uses them (a replay must not depend on that order), records
// that do not decode are counted and not written, the stack copy is
// dropped once used.
type live struct {
	w     *recording.Writer
	m     *model.Model
	col   *model.Collector
	out   bytes.Buffer
	enc   []byte
	named map[[3]uint64]bool
}

var (
	liveProcs = map[uint32]model.ProcessInfo{
		100: {Comm: "python3", Cmdline: "python3 train.py --epochs 1", NSPID: 7, Container: "0123456789abcdef0123",
			PodUID: "pod-1", Libraries: []string{"/usr/lib/libcuda.so.1", "/venv/lib/libcudart.so.13"}},
		200: {Comm: "bench"},
		300: {Comm: "idle", Libraries: []string{}}, // attached, never calls CUDA
	}
	liveThreads = map[[2]uint32]string{{100, 100}: "python3", {100, 101}: "pt_autograd_0", {200, 200}: ""}
	liveSyms    = map[uint64]string{
		0x401000: "_Z6kernelPfi", 0x402000: "_Z4gemmv",
		0x7f00_0000_1000: "cudaLaunchKernel (libcudart.so.13)", 0x7f00_0000_2000: "forward (libtorch_cuda.so)",
		0x7f00_0000_3000: "",
	}
)

func newLive(t testing.TB) *live {
	l := &live{col: model.NewCollector(), named: map[[3]uint64]bool{}}
	w, err := recording.NewWriter(&l.out, recording.NewHeader("cudatap-test", -1_700_000_000_000_000_000))
	if err != nil {
		t.Fatal(err)
	}
	l.w = w
	l.m = model.New(l.col)
	return l
}

// liveNames is what a replay of liveSession must know.
func liveNames() *model.Names {
	n := model.NewNames()
	for pid, info := range liveProcs {
		n.Procs[pid] = info
	}
	for k, v := range liveThreads {
		n.Threads[model.NameKey{PID: k[0], Key: uint64(k[1])}] = v
	}
	for _, pid := range []uint32{100, 200} {
		n.Kernels[model.NameKey{PID: pid, Key: 0x401000}] = liveSyms[0x401000]
	}
	n.Kernels[model.NameKey{PID: 100, Key: 0x402000}] = liveSyms[0x402000]
	for _, pc := range []uint64{0x7f00_0000_1000, 0x7f00_0000_2000, 0x7f00_0000_3000} {
		n.Frames[model.NameKey{PID: 100, Key: pc}] = liveSyms[pc]
	}
	for _, k := range []model.PyKey{{Code: 0xc0de, Instr: 42}, {Code: 0xc0df, Instr: 7}, {Code: 0xc0de, Instr: 43}} {
		n.Py[model.PyNameKey{PID: 100, PyKey: k}] = fmt.Sprintf("train.py:%d step", k.Instr)
	}
	return n
}

// name writes the names an event introduces, once per key, as the
// session's resolver does.
func (l *live) name(ev *event.Event) {
	once := func(kind, a, b uint64) bool {
		k := [3]uint64{kind<<32 | uint64(ev.PID), a, b}
		if l.named[k] {
			return false
		}
		l.named[k] = true
		return true
	}
	if once(0, 0, 0) {
		l.w.Process(ev.PID, liveProcs[ev.PID])
	}
	if once(1, uint64(ev.TID), 0) {
		l.w.Thread(ev.PID, ev.TID, liveThreads[[2]uint32{ev.PID, ev.TID}])
	}
	if ev.Spec().Class == event.ClassLaunch && ev.Spec().Layer == event.Runtime {
		var a event.Args
		ev.Decode(&a)
		if once(2, a.Func, 0) {
			l.w.Kernel(ev.PID, a.Func, liveSyms[a.Func])
		}
	}
	for _, pc := range ev.Stack[:ev.NStack] {
		if once(3, pc, 0) {
			l.w.Frame(ev.PID, pc, liveSyms[pc])
		}
	}
	for _, py := range ev.Py[:ev.NPy] {
		if once(4, py[0], py[1]) {
			l.w.PyFrame(ev.PID, py[0], py[1], fmt.Sprintf("train.py:%d step", py[1]))
		}
	}
}

func (l *live) raw(b []byte) {
	var ev event.Event
	if err := event.Decode(b, &ev); err != nil {
		l.m.DecodeError()
		return
	}
	if ev.API() == event.LibraryLoad {
		l.m.Auxiliary()
		l.w.Event(b)
		return
	}
	l.m.Handle(&ev)
	if event.CookieHasStack(ev.Cookie) && len(ev.Copy) > 0 {
		ev.Copy = nil
		l.enc = event.Encode(l.enc[:0], &ev)
		l.w.Event(l.enc)
	} else {
		l.w.Event(b)
	}
	if ev.Spec() != nil {
		l.name(&ev)
	}
}

func (l *live) ev(e event.Event) { l.raw(event.Encode(nil, &e)) }

// mk builds a call of api at start; return-probed calls last dur.
func mk(api event.API, pid, tid uint32, start, dur uint64, args ...uint64) event.Event {
	s := event.Lookup(api)
	e := event.Event{Cookie: s.Cookie(0), PID: pid, TID: tid, Start: start}
	copy(e.Args[:], args)
	if s.Return {
		e.End, e.Flags = start+dur, event.FlagHasRet
	}
	return e
}

func withStack(e event.Event, pcs ...uint64) event.Event {
	e.Cookie |= event.CookieStack
	e.HasStack = true
	e.NStack = copy(e.Stack[:], pcs)
	e.Regs = event.Regs{RIP: pcs[0], RSP: 0x7ffc_0000_0000, RBP: 0x7ffc_0000_0040}
	e.Copy = bytes.Repeat([]byte{0x5a}, 256)
	return e
}

const ms = 1_000_000

// liveSession records a small but complete session and returns its model
// result, what the model handed its sink, and the file.
func liveSession(t testing.TB) (*model.Result, *model.Collector, []byte) {
	l := newLive(t)
	l.m.AddProcess(300)
	l.w.Process(300, liveProcs[300])
	aux := event.Event{Cookie: uint64(event.LibraryLoad) | event.CookieStop, PID: 100, TID: 100, Start: 1}
	l.ev(aux)
	// What the session notes outside the ring buffer: the hold at that
	// load (inside the first call below), pinned memory found at attach.
	l.m.AddHold(100, 100, 1*ms+100, 1*ms+5000)
	l.w.Hold(100, 100, 1*ms+100, 1*ms+5000)
	l.m.AttachedLate(200)
	l.w.AttachedLate(200)
	l.m.AddPinned(200, 0x7f30_0000_0000, 1<<21)
	l.w.Pinned(200, 0x7f30_0000_0000, 1<<21)

	e := mk(event.CudaStreamCreateWithFlags, 100, 100, 1*ms, 10_000, 0x7ffd0000, 1)
	e.Out = 0xa0
	l.ev(e)
	e = withStack(mk(event.CudaLaunchKernel, 100, 100, 2*ms, 0, 0x401000, 1|1<<32, 1, 256|1<<32, 1, 0, 0, 0xa0),
		0x7f00_0000_1000, 0x7f00_0000_2000)
	e.NPy = 2
	e.Py[0], e.Py[1] = [2]uint64{0xc0de, 42}, [2]uint64{0xc0df, 7}
	l.ev(e)
	// A driver kernel named at load time, then launched through its handle.
	e = mk(event.CuModuleGetFunction, 100, 100, 3*ms, 5000, 0x7ffd1000, 0x6000, 0x7ffd2000)
	e.Out, e.HasStack, e.Copy = 0x55f000, true, []byte("_Z3addPfS_i\x00")
	l.ev(e)
	l.ev(mk(event.CuLaunchKernel, 100, 100, 4*ms, 0, 0x55f000, 8, 1, 1, 128, 1, 1, 0, 0xa0))
	e = withStack(mk(event.CudaMemcpyAsync, 100, 100, 5*ms, 2*ms, 0x5555_0000_0000, 0x7f10_0000_0000, 4096, 2, 0xa0),
		0x7f00_0000_3000, 0x7f00_0000_2000)
	e.NPy = 1
	e.Py[0] = [2]uint64{0xc0de, 43}
	l.ev(e)
	l.ev(mk(event.CudaEventRecord, 100, 100, 8*ms, 0, 0xe1, 0xa0))
	l.ev(mk(event.CudaStreamWaitEvent, 100, 101, 9*ms, 0, 0x2, 0xe1, 0))
	l.ev(mk(event.CudaLaunchKernel, 100, 101, 10*ms, 0, 0x402000, 1|1<<32, 1, 1|1<<32, 1, 0, 0, 0x2))
	l.ev(mk(event.CudaStreamSynchronize, 100, 100, 11*ms, 3*ms, 0xa0))
	unknown := mk(event.CudaLaunchKernel, 100, 100, 15*ms, 0)
	unknown.Cookie = 0x7777
	l.ev(unknown)
	l.raw(make([]byte, 10)) // does not decode

	l.ev(func() event.Event {
		e := mk(event.CudaMalloc, 200, 200, 1*ms, 20_000, 0x7ffd3000, 1<<20)
		e.Out = 0x7f20_0000_0000
		return e
	}())
	l.ev(mk(event.CudaLaunchKernel, 200, 200, 2*ms, 0, 0x401000, 1|1<<32, 1, 1|1<<32, 1, 0, 0, 0))
	l.ev(mk(event.CudaDeviceSynchronize, 200, 200, 3*ms, ms))
	l.ev(mk(event.CudaFree, 200, 200, 5*ms, 100_000, 0x7f20_0000_0000))

	l.m.SetKernelStats(20, 1, 2, 3, 4)
	l.m.SetAttachFailures(5)
	l.m.SetNested(7)
	res := l.m.Finish()
	res.Name(liveNames())
	res.WallOffsetNs = -1_700_000_000_000_000_000
	// The NVML sampler's series and conclusions go in after the events.
	res.Counters = []recording.Counter{
		{Name: "gpu_util", Device: 0, TS: 2 * ms, Values: map[string]float64{"gpu0": 97.5, "gpu1": 0}},
		{Name: "gpu_mem", Device: 1, TS: 3 * ms, Values: map[string]float64{"used_bytes": 1 << 33}},
	}
	res.GPU = model.GPUReport{Devices: []string{"GPU 0 NVIDIA H200: 2 samples"}, Verdicts: []string{"host bound"}, ClockErrorNs: 1500}
	for _, c := range res.Counters {
		l.w.Counter(c)
	}
	l.w.GPU(res.GPU)
	l.w.Drops(res.Drops)
	if err := l.w.Close(); err != nil {
		t.Fatal(err)
	}
	if l.w.Size() != int64(l.out.Len()) {
		t.Errorf("Writer.Size() = %d, wrote %d bytes", l.w.Size(), l.out.Len())
	}
	return res, l.col, l.out.Bytes()
}

func TestRoundTrip(t *testing.T) {
	want, wantCol, file := liveSession(t)
	var ticks []int64
	col := model.NewCollector()
	got, rp, err := Load(bytes.NewReader(file), func(*Replay) model.Sink { return col }, func(n int64) { ticks = append(ticks, n) })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(col, wantCol) {
		t.Errorf("replayed calls, syncs and ops differ from the live ones")
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("replayed model differs from the live one")
		if !reflect.DeepEqual(got.Drops, want.Drops) {
			t.Errorf("drops\n got %+v\nwant %+v", got.Drops, want.Drops)
		}
		for i := range min(len(got.Processes), len(want.Processes)) {
			g, w := got.Processes[i], want.Processes[i]
			gv, wv := reflect.ValueOf(*g), reflect.ValueOf(*w)
			for f := 0; f < gv.NumField(); f++ {
				if !reflect.DeepEqual(gv.Field(f).Interface(), wv.Field(f).Interface()) {
					t.Errorf("pid %d: %s\n got %+v\nwant %+v", w.PID, gv.Type().Field(f).Name, gv.Field(f).Interface(), wv.Field(f).Interface())
				}
			}
		}
		if len(got.Processes) != len(want.Processes) {
			t.Errorf("%d processes, want %d", len(got.Processes), len(want.Processes))
		}
	}
	// Spot checks, so that a model that drops everything cannot pass.
	if len(want.Processes) != 3 || len(wantCol.Traces[100].Calls) != 9 || len(wantCol.Traces[200].Calls) != 4 {
		t.Fatalf("live session: %d processes", len(want.Processes))
	}
	p, n := got.Processes[0], got.Names
	if name, _ := p.KernelSymbol(0x55f000); p.Info.Comm != "python3" || n.Thread(100, 101) != "pt_autograd_0" ||
		n.Kernel(100, 0x401000) != "_Z6kernelPfi" || name != "_Z3addPfS_i" ||
		n.Frame(100, 0x7f00_0000_2000) != "forward (libtorch_cuda.so)" ||
		n.PyFrame(100, model.PyKey{Code: 0xc0de, Instr: 43}) != "train.py:43 step" || len(p.Stacks) != 2 || len(p.PyStacks) != 2 {
		t.Errorf("names not replayed: %+v %+v", p.Info, n)
	}
	if q := got.Processes[1]; p.HeldNs != 4900 || wantCol.Traces[100].Calls[0].HoldNs != 4900 || !q.AttachedLate || q.PinnedRecovered != 1<<21 {
		t.Errorf("notes not replayed: held %d, attached late %v, pinned found %d", p.HeldNs, q.AttachedLate, q.PinnedRecovered)
	}
	if p := got.Processes[2]; p.PID != 300 || p.Info.Comm != "idle" || p.NCalls != 0 {
		t.Errorf("process without calls: %+v", p)
	}
	wantDrops := model.Drops{Submitted: 20, Received: 16, RingbufFull: 1, InflightFull: 2, OrphanReturns: 3, ReadFaults: 4,
		DecodeErrors: 1, UnknownAPI: 1, AttachFailures: 5, Nested: 7}
	if got.Drops != wantDrops {
		t.Errorf("drops %+v, want %+v", got.Drops, wantDrops)
	}
	if got.WallOffsetNs != -1_700_000_000_000_000_000 || rp.Header.WallOffsetNs != got.WallOffsetNs {
		t.Errorf("wall offset %d", got.WallOffsetNs)
	}
	wantHdr := recording.NewHeader("cudatap-test", -1_700_000_000_000_000_000)
	if !reflect.DeepEqual(rp.Header, wantHdr) {
		t.Errorf("header\n got %+v\nwant %+v", rp.Header, wantHdr)
	}
	wantCounters := []recording.Counter{
		{Name: "gpu_util", Device: 0, TS: 2 * ms, Values: map[string]float64{"gpu0": 97.5, "gpu1": 0}},
		{Name: "gpu_mem", Device: 1, TS: 3 * ms, Values: map[string]float64{"used_bytes": 1 << 33}},
	}
	if !reflect.DeepEqual(rp.Counters, wantCounters) {
		t.Errorf("counters %+v", rp.Counters)
	}
	if rp.GPU == nil || !reflect.DeepEqual(*rp.GPU, want.GPU) || got.GPU.ClockErrorNs != 1500 {
		t.Errorf("GPU report %+v", rp.GPU)
	}
	if rp.Drops == nil || *rp.Drops != want.Drops {
		t.Errorf("recorded drops %+v, want %+v", rp.Drops, want.Drops)
	}
	recs := parseRecords(t, file)
	if rp.Records != uint64(len(recs)-1) || len(rp.Processes) != 3 {
		t.Errorf("Records = %d, want %d", rp.Records, len(recs)-1)
	}
	if len(ticks) == 0 || ticks[len(ticks)-1] != int64(len(file)) {
		t.Errorf("progress %v, want it to end at %d", ticks, len(file))
	}
	// The stack copies are not kept; the load-time call's name is.
	for _, r := range recs {
		if r.typ == recording.RecEvent && r.len > event.CopyOffset+64 {
			t.Errorf("event record of %d bytes kept its stack copy", r.len)
		}
	}
}

type rec struct {
	typ      byte
	len, end int // payload length, offset after the record
}

// parseRecords walks the file independently of Read.
func parseRecords(t testing.TB, b []byte) []rec {
	hlen := int(binary.LittleEndian.Uint32(b[12:]))
	off := 16 + hlen
	var out []rec
	for off < len(b) {
		typ := b[off]
		n, k := binary.Uvarint(b[off+1:])
		if k <= 0 {
			t.Fatalf("bad varint at %d", off)
		}
		off += 1 + k + int(n)
		out = append(out, rec{typ, int(n), off})
	}
	if off != len(b) || len(out) == 0 || out[len(out)-1].typ != recording.RecEnd {
		t.Fatalf("file does not end with an end record")
	}
	return out
}

// TestTruncated cuts the recording at every byte of its prelude and
// header, and in every record at each place a cut can fall (its type byte,
// its length, its payload, its last byte): Read never panics, says
// recording.ErrFormat or recording.ErrTruncated, and delivers everything before the cut. (At
// every byte of the file it took 15 s, quadratic in the file's size; the
// fuzzers cover arbitrary cuts.)
func TestTruncated(t *testing.T) {
	_, _, file := liveSession(t)
	recs := parseRecords(t, file)
	hdrEnd := 16 + int(binary.LittleEndian.Uint32(file[12:]))
	cuts := map[int]bool{len(file): true}
	for cut := 0; cut <= hdrEnd+1; cut++ {
		cuts[cut] = true
	}
	start := hdrEnd
	for _, r := range recs {
		for _, c := range []int{start, start + 1, start + 2, (start + r.end) / 2, r.end - 1} {
			if c >= 0 && c <= len(file) {
				cuts[c] = true
			}
		}
		start = r.end
	}
	order := slices.Sorted(maps.Keys(cuts))
	// Read wraps its input in a 1 MiB bufio.Reader unless it already is
	// one: reuse one so that 2×13k reads do not allocate 26 GiB.
	br := bufio.NewReaderSize(nil, 1<<20)
	in := func(b []byte) *bufio.Reader { br.Reset(bytes.NewReader(b)); return br }
	for _, cut := range order {
		m := model.New(nil)
		rp, err := ReadEvents(in(file[:cut]), m, nil)
		if _, nerr := ReadNames(in(file[:cut])); (nerr == nil) != (err == nil) {
			t.Fatalf("cut at %d: events %v, names %v", cut, err, nerr)
		}
		switch {
		case cut == len(file):
			if err != nil {
				t.Fatalf("whole file: %v", err)
			}
		case cut < 16:
			if !errors.Is(err, recording.ErrFormat) {
				t.Fatalf("cut at %d (prelude): %v", cut, err)
			}
		case cut < hdrEnd:
			if !errors.Is(err, recording.ErrTruncated) {
				t.Fatalf("cut at %d (header): %v", cut, err)
			}
		default:
			if !errors.Is(err, recording.ErrTruncated) || rp == nil {
				t.Fatalf("cut at %d: %v, replay %v", cut, err, rp != nil)
			}
		}
		if cut < hdrEnd {
			continue
		}
		// Complete records before the cut.
		var whole, events uint64
		var drops bool
		for _, r := range recs {
			if r.end > cut || r.typ == recording.RecEnd {
				break
			}
			whole++
			if r.typ == recording.RecEvent {
				events++
			}
			drops = drops || r.typ == recording.RecDrops
		}
		if rp.Records != whole {
			t.Fatalf("cut at %d: %d records delivered, want %d", cut, rp.Records, whole)
		}
		if got := m.Drops().Received; got != events {
			t.Fatalf("cut at %d: model received %d events, want %d", cut, got, events)
		}
		if nrp, _ := ReadNames(in(file[:cut])); (nrp.Drops != nil) != drops {
			t.Fatalf("cut at %d: drops record delivered %v, want %v", cut, nrp.Drops != nil, drops)
		}
		// Load gives the partial result with the error.
		res, _, lerr := Load(bytes.NewReader(file[:cut]), nil, nil)
		if res == nil || !errors.Is(lerr, recording.ErrTruncated) && cut != len(file) {
			t.Fatalf("Load cut at %d: result %v, %v", cut, res != nil, lerr)
		}
	}
}

// TestReadRecordTypes checks each record type lands where it belongs.
func TestReadRecordTypes(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.NewHeader("t", 5))
	if err != nil {
		t.Fatal(err)
	}
	w.Process(7, model.ProcessInfo{Comm: "a.out", Libraries: []string{"/x/libcudart.so.13"}})
	w.Thread(7, 8, "worker")
	w.Kernel(7, 0x1000, "_Z1kv")
	w.Frame(7, 0x2000, "main (a.out)")
	w.PyFrame(7, 0xc0de, 12, "x.py:3 f")
	e := mk(event.CudaLaunchKernel, 7, 8, 100, 0, 0x1000)
	w.Event(event.Encode(nil, &e))
	w.Event([]byte{1, 2, 3}) // a record that does not decode
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rp, err := ReadNames(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if rp.Records != 7 || rp.Drops != nil || len(rp.Counters) != 0 {
		t.Errorf("replay %+v", rp)
	}
	n := rp.Names
	if info := n.Procs[7]; info.Comm != "a.out" || len(info.Libraries) != 1 {
		t.Errorf("process info %+v", info)
	}
	if n.Thread(7, 8) != "worker" || n.Kernel(7, 0x1000) != "_Z1kv" || n.Frame(7, 0x2000) != "main (a.out)" ||
		n.PyFrame(7, model.PyKey{Code: 0xc0de, Instr: 12}) != "x.py:3 f" {
		t.Error("names not read back")
	}
	if n.Thread(8, 8) != "" || n.Kernel(7, 0x1001) != "" || n.Procs[8].Comm != "" {
		t.Error("names answered for unknown keys")
	}
	m := model.New(nil)
	if _, err := ReadEvents(bytes.NewReader(buf.Bytes()), m, nil); err != nil {
		t.Fatal(err)
	}
	d := m.Drops()
	if d.Received != 2 || d.DecodeErrors != 1 || m.Calls() != 1 {
		t.Errorf("drops %+v, %d calls", d, m.Calls())
	}
	res := m.Finish()
	res.Name(n)
	if p := res.Processes[0]; p.Info.Comm != "a.out" || p.NCalls != 1 {
		t.Errorf("process %+v", p)
	}
}

// TestReplayAnyNameOrder: name records may come before, after or between
// the events that use them; a replay gives the same result and the same
// calls whatever their order.
func TestReplayAnyNameOrder(t *testing.T) {
	want, wantCol, file := liveSession(t)
	recs := parseRecords(t, file)
	hdrEnd := 16 + int(binary.LittleEndian.Uint32(file[12:]))
	var names, others [][]byte
	start := hdrEnd
	for _, r := range recs {
		b := file[start:r.end]
		start = r.end
		switch r.typ {
		case recording.RecThread, recording.RecKernel, recording.RecFrame, recording.RecPyFrame:
			names = append(names, b)
		default:
			others = append(others, b)
		}
	}
	rng := rand.New(rand.NewPCG(7, 9))
	for _, order := range []string{"names first", "names last", "shuffled"} {
		out := bytes.Clone(file[:hdrEnd])
		body := others[:len(others)-1] // all but the end record
		switch order {
		case "names first":
			out = append(out, bytes.Join(names, nil)...)
			out = append(out, bytes.Join(body, nil)...)
		case "names last":
			out = append(out, bytes.Join(body, nil)...)
			out = append(out, bytes.Join(names, nil)...)
		default:
			// Each name record at a random place among the others, whose
			// order is kept (events keep their ring-buffer order).
			pos := make([][][]byte, len(body)+1)
			for _, n := range names {
				i := rng.IntN(len(pos))
				pos[i] = append(pos[i], n)
			}
			for i := range body {
				out = append(out, bytes.Join(pos[i], nil)...)
				out = append(out, body[i]...)
			}
			out = append(out, bytes.Join(pos[len(body)], nil)...)
		}
		out = append(out, others[len(others)-1]...)
		col := model.NewCollector()
		got, _, err := Load(bytes.NewReader(out), func(*Replay) model.Sink { return col }, nil)
		if err != nil {
			t.Fatalf("%s: %v", order, err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(col, wantCol) {
			t.Errorf("%s: replay differs", order)
		}
	}
}

// TestGPUTimesCUPTIStream: a measurement keeps CUPTI's stream, copy kind
// and graph node through a recording, so a replay shows an op CUPTI alone
// saw where the live model did: a copy whose call no probe traced, on the
// stream of the launch measured before it. A measurement of an older
// recording (no stream) still measures its op.
func TestGPUTimesCUPTIStream(t *testing.T) {
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.NewHeader("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	w.Process(100, model.ProcessInfo{Comm: "w"})
	w.GPUTimes(recording.GPUTimesStart, 100, 0, nil)
	ev := func(e event.Event) { w.Event(event.Encode(nil, &e)) }
	e := mk(event.CudaStreamCreateWithFlags, 100, 100, 1000, 1000, 0x7ffd0000, 1)
	e.Out = 0xa0
	ev(e)
	for i, at := range []uint64{ms, 2 * ms} {
		l := mk(event.CudaLaunchKernel, 100, 100, at, 0, 0x401000, 1|1<<32, 1, 1|1<<32, 1, 0, 0, 0xa0)
		l.End, l.Flags = at+2000, event.FlagHasRet
		ev(l)
		m := &model.Measurement{TID: 100, APIStart: at + 100, APIEnd: at + 1900, Start: at + 20_000, End: at + 30_000, Kind: model.OpKernel}
		if i == 0 {
			m.CUPTIStream = 8
			w.GPUTimes(recording.GPUTimesMeasure, 100, 0, m)
			continue
		}
		// As an older cudatap wrote it: no stream.
		le := binary.LittleEndian
		b := []byte{recording.GPUTimesMeasure}
		b = le.AppendUint32(b, 100)
		b = le.AppendUint64(b, 0)
		b = le.AppendUint32(b, m.TID)
		for _, v := range []uint64{m.APIStart, m.APIEnd, m.Start, m.End} {
			b = le.AppendUint64(b, v)
		}
		b = append(b, byte(m.Kind), 0)
		b = le.AppendUint64(b, 0)
		w.Raw(recording.RecGPUTime, append(b, "_Z1kv"...))
	}
	// A device-to-host copy under a call after the first launch: no op.
	w.GPUTimes(recording.GPUTimesMeasure, 100, 0, &model.Measurement{TID: 100, APIStart: ms + 3000, APIEnd: ms + 4000, Start: ms + 30_000,
		End: ms + 31_000, Kind: model.OpMemcpy, Bytes: 4096, CUPTIStream: 8, CopyKind: event.DeviceToHost})
	ev(mk(event.CudaStreamSynchronize, 100, 100, 3*ms, 200_000, 0xa0))
	w.GPUTimes(recording.GPUTimesStop, 100, 0, nil)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	col := model.NewCollector()
	if _, _, err := Load(bytes.NewReader(buf.Bytes()), func(*Replay) model.Sink { return col }, nil); err != nil {
		t.Fatal(err)
	}
	var launches, copies int
	for _, op := range col.Traces[100].GPUOps {
		switch {
		case op.ID < 0:
		case op.Kind == model.OpKernel && op.Measured && !op.CUPTIOnly():
			launches++
		case op.Kind == model.OpMemcpy && op.CUPTIOnly() && op.CopyKind == event.DeviceToHost && op.Bytes == 4096 &&
			op.Stream == col.Traces[100].GPUOps[0].Stream && op.Start == ms+30_000:
			copies++
		default:
			t.Errorf("op %+v", op)
		}
	}
	if launches != 2 || copies != 1 {
		t.Errorf("%d launches measured, %d copies CUPTI alone saw: want 2 and 1", launches, copies)
	}
}
