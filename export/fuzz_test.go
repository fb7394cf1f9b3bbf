package export_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/html"
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/merge"
	"github.com/cudatap/cudatap/export/perfetto"
	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/export/report"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// FuzzRecordings feeds every command that reads a recording (export to
// Chrome, Perfetto and pprof, report in text and HTML, lint, syncs, merge) with
// recordings that look valid: the input is not a file but a program whose
// bytes choose records and their fields, which the recording writer
// writes. So the fuzzer mutates record fields (a pid, a stream handle, a
// size, how often a record repeats), not framing, and reaches what a
// hostile recording does: many processes, threads, streams, events,
// allocations, names, samples. It checks that nothing panics, that errors
// are the reader's, that the outputs are valid, and that the model stayed
// within its bounds (a repeat makes up to 6,000 copies of a record, past
// the bounds of 1,024 processes, threads or streams).
//
// Its seeds (testdata/fuzz/FuzzRecordings, written from seeds below by
// `go test -run TestFuzzSeeds -update-seeds ./export`) replay with plain
// `go test`; make test fuzzes for 30 s more.
func FuzzRecordings(f *testing.F) {
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, prog []byte) {
		rec := build(prog)
		path := filepath.Join(dir, "in.cudatap")
		if err := os.WriteFile(path, rec, 0o644); err != nil {
			t.Fatal(err)
		}
		checkOutputs(t, rec)
		merged(t, path)
	})
}

// seeds are programs that make the shapes a recording has (and the ones a
// hostile recording has: thousands of processes, threads, streams,
// allocations, events); TestFuzzSeeds checks they do.
var seeds = map[string][]byte{
	"empty": {},
	"streams and syncs": cat(
		ev(event.CudaStreamCreate, 0, 0, handle(2), v0, v0),
		ev(event.CudaLaunchKernel, 0, 0, v0, code(1), small(64), v0, small(128), v0, v0, v0, v0, handle(2)),
		ev(event.CudaMalloc, 0, 0, dev(1), v0, small(255)),
		ev(event.CudaMemcpyAsync, 0, 1, v0, dev(1), host(1), small(64), small(1), handle(2)),
		ev(event.CudaEventRecord, 0, 1, v0, handle(5), handle(2)),
		ev(event.CudaStreamWaitEvent, 0, 0, v0, handle(3), handle(5)),
		withStack(ev(event.CudaStreamSynchronize, 0, 0, v0, handle(2))),
		[]byte{opThread, 0, 0, 1, opKernel, 0, 6, 1, 2, opFrame, 0, 6, 1, 1, opProcess, 0, 6, 6},
	),
	"processes": cat(ev(event.CudaLaunchKernel, 0, 0, v0, code(1)), repeat(1100, fieldPID, 0)),
	"threads":   cat(ev(event.CudaLaunchKernel, 0, 0, v0, code(1)), repeat(1100, fieldTID, 0)),
	"streams":   cat(ev(event.CudaLaunchKernel, 0, 0, v0, code(1), v0, v0, v0, v0, v0, v0, handle(2)), repeat(1100, fieldArg, 7)),
	"allocations": cat(ev(event.CudaMalloc, 0, 0, dev(0), v0, small(1)), repeat(5900, fieldOut, 0),
		ev(event.CudaMalloc, 0, 0, host(0), v0, small(1)), repeat(5900, fieldOut, 0)),
	"events": cat(ev(event.CudaEventRecord, 0, 0, v0, handle(5), handle(2)), repeat(5900, fieldArg, 0),
		ev(event.CudaStreamWaitEvent, 0, 0, v0, handle(3), handle(5)), repeat(5900, fieldArg, 1)),
	"nccl": cat(
		ev(event.NcclCommInitRank, 0, 0, handle(7), v0, small(2), small(0), v0, v0, v0, small(9)),
		ev(event.NcclAllReduce, 0, 0, v0, host(1), host(2), small(8), small(7), v0, handle(7), handle(2)),
		repeat(300, fieldTime, 0),
		[]byte{opEnd, 200}, // cut
	),
	"names and NVML": {opProcess, 0, 6, opThread, 1, 1, 1, opPyFrame, 0, 1, 1, 1, 2, 3, opMapping, 0, 6, 1, 1, 0xff, 2,
		opCounter, 0, 1, 9, opRepeat, 0xe8, 0x03, fieldTime, 0, opGPUReport, 0, 3, opDrops, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
}

// Seed builders: an event of api by pid and tid selectors (program.pid,
// program.tid), its out value and arguments as program.value reads them.
var (
	v0              = []byte{0}
	small           = func(x byte) []byte { return []byte{1, x} }
	handle          = func(k byte) []byte { return []byte{2 + 8*k} } // 1, 2, 0x10, 0x20, 0x30, 0xe1, 0xe2, 0xc0
	dev, host, code = func(k byte) []byte { return []byte{3, k} }, func(k byte) []byte { return []byte{4, k} }, func(k byte) []byte { return []byte{6, k} }
	cat             = func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	repeat          = func(n uint16, field, arg byte) []byte { return []byte{opRepeat, byte(n), byte(n >> 8), field, arg} }
	withStack       = func(e []byte) []byte { return append(e[:len(e)-1], 2, 1, 2, 3, 4, 5, 6, 7, 8, 1, 9, 9, 2) }
	apiIndex        = func(a event.API) byte { return byte(slices.Index(apis, a)) }
	ev              = func(a event.API, pid, tid byte, out []byte, args ...[]byte) []byte {
		b := []byte{opEvent, apiIndex(a), pid, tid, 0, 10} // symbol 0, 10 µs after the last
		if event.Lookup(a).Return {
			b = append(b, 1, 20) // 20 µs
		}
		b = append(b, 0) // returned 0
		b = append(b, out...)
		for i := range event.NArgs {
			if i < len(args) {
				b = append(b, args[i]...)
			} else {
				b = append(b, v0...)
			}
		}
		return append(b, 0) // no stack
	}
)

// What a program's bytes mean: ops, and the fields a repeat varies.
const (
	opEvent = iota
	opRepeat
	opProcess
	opThread
	opKernel
	opFrame
	opPyFrame
	opMapping
	opNote
	opGPUTimes
	opCounter
	opGPUReport
	opDrops
	opEnd
	numOps
)

const (
	fieldPID = iota
	fieldTID
	fieldArg  // the stream (or first) argument
	fieldTime // the event's start
	fieldOut
	numFields
)

// apis are every API the probes know, and one they do not.
var apis = func() []event.API {
	// By id, which is append-only: a new API does not change the seeds.
	var out []event.API
	for a := event.API(1); event.Lookup(a) != nil; a++ {
		out = append(out, a)
	}
	return append(out, event.LibraryLoad, 0x7ff)
}()

// program reads a fuzzer's input; past its end every byte is 0.
type program struct {
	b []byte
	i int
}

func (p *program) byte() byte {
	if p.i >= len(p.b) {
		p.i++
		return 0
	}
	p.i++
	return p.b[p.i-1]
}

func (p *program) done() bool { return p.i >= len(p.b) }

func (p *program) u16() uint16 { return uint16(p.byte()) | uint16(p.byte())<<8 }

func (p *program) u64() uint64 {
	var b [8]byte
	for i := range b {
		b[i] = p.byte()
	}
	return binary.LittleEndian.Uint64(b[:])
}

// value draws a field: mostly from small pools, so that records meet (the
// same stream, event, allocation), sometimes anything.
func (p *program) value() uint64 {
	s := p.byte()
	switch s % 8 {
	case 0:
		return 0
	case 1:
		return uint64(p.byte())
	case 2: // handles: streams, events, graphs, communicators
		return [...]uint64{1, 2, 0x10, 0x20, 0x30, 0xe1, 0xe2, 0xc0}[s/8%8]
	case 3: // device memory
		return 0x7f00_0000_0000 + uint64(p.byte())<<12
	case 4: // host memory
		return 0x5500_0000_0000 + uint64(p.byte())<<12
	case 5:
		return p.u64()
	case 6: // a code address: kernel stubs and stack frames
		return 0x401000 + uint64(p.byte())<<4
	}
	return 1<<63 | uint64(p.byte())
}

func (p *program) pid() uint32 {
	return [...]uint32{100, 101, 102, 0, 1<<22 + 1, 200, 100, 100}[p.byte()%8]
}
func (p *program) tid() uint32 { return [...]uint32{100, 101, 102, 103, 0, 200, 100, 100}[p.byte()%8] }

func (p *program) name() string {
	return [...]string{"", "main", "_Z6vecAddPfS_S_i", "/x/train.py:12 step", "pt_nccl_watchdg", "\xff\x00bad", "python3", "a"}[p.byte()%8]
}

// build runs prog through the recording writer and returns the recording.
func build(prog []byte) []byte {
	p := &program{b: prog}
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.NewHeader("fuzz", 0))
	now := uint64(1_000_000_000)
	// The last record, for a repeat: its j-th copy, field (of an event)
	// varied by j; name and note records vary their key.
	var last func(j int, field, arg byte)
	cut := -1
	for !p.done() {
		switch op := p.byte() % numOps; op {
		case opEvent:
			e := p.event(&now)
			last = func(j int, field, arg byte) {
				c := *e
				vary(&c, j, field, arg)
				now = max(now, c.End, c.Start)
				w.Event(event.Encode(nil, &c))
			}
			last(0, 0, 0)
		case opRepeat:
			n, field, arg := int(p.u16()%6000), p.byte()%numFields, p.byte()%event.NArgs
			for j := 1; last != nil && j <= n; j++ {
				last(j, field, arg)
			}
		case opProcess:
			pid, info := p.pid(), model.ProcessInfo{Comm: p.name(), Cmdline: p.name()}
			last = func(j int, _, _ byte) { w.Process(pid+uint32(j), info) }
			last(0, 0, 0)
		case opThread:
			pid, tid, name := p.pid(), p.tid(), p.name()
			last = func(j int, _, _ byte) { w.Thread(pid, tid+uint32(j), name) }
			last(0, 0, 0)
		case opKernel, opFrame:
			pid, addr, name := p.pid(), p.value(), p.name()
			last = func(j int, _, _ byte) {
				if op == opKernel {
					w.Kernel(pid, addr+uint64(j)*16, name)
				} else {
					w.Frame(pid, addr+uint64(j)*16, name)
				}
			}
			last(0, 0, 0)
		case opPyFrame:
			pid, code, instr, name := p.pid(), p.value(), p.value(), p.name()
			last = func(j int, _, _ byte) { w.PyFrame(pid, code+uint64(j), instr, name) }
			last(0, 0, 0)
		case opMapping:
			pid, start, size, file := p.pid(), p.value(), p.value(), p.name()
			last = func(j int, _, _ byte) {
				s := start + uint64(j)<<12
				w.Mapping(pid, model.Mapping{File: file, BuildID: "ab", Start: s, Limit: s + size, Offset: size})
			}
			last(0, 0, 0)
		case opNote:
			kind, pid, tid, a, b := p.byte()%3, p.pid(), p.tid(), p.value(), p.value()
			last = func(j int, _, _ byte) {
				switch kind {
				case 0:
					w.Hold(pid, tid+uint32(j), now+a%1_000_000, now+b%1_000_000)
				case 1:
					w.Pinned(pid, a+uint64(j)<<12, b)
				default:
					w.AttachedLate(pid + uint32(j))
				}
			}
			last(0, 0, 0)
		case opGPUTimes:
			kind, pid, t := 1+p.byte()%4, p.pid(), now+p.value()%1_000_000_000
			m := model.Measurement{TID: p.tid(), APIStart: now - uint64(p.u16()), APIEnd: now, Start: now, End: now + uint64(p.u16()),
				Kind: model.OpKind(p.byte() % 7), Device: int8(p.byte()), Bytes: p.value(), Name: p.name()}
			last = func(j int, _, _ byte) {
				mj := m
				mj.TID += uint32(j)
				w.GPUTimes(kind, pid, t, &mj)
			}
			last(0, 0, 0)
		case opCounter:
			dev, name, v := int(p.byte()%4), p.name(), float64(p.byte())
			last = func(j int, _, _ byte) {
				w.Counter(recording.Counter{Device: dev + j%3, Name: name, TS: now + uint64(j)*1_000_000, Values: map[string]float64{"util": v, name: v}})
			}
			last(0, 0, 0)
		case opGPUReport:
			g := model.GPUReport{Status: [...]string{"", "no NVML"}[p.byte()%2]}
			for i := range int(p.byte() % 8) {
				g.GPUs = append(g.GPUs, model.GPUStats{Index: i, Name: p.name(), Samples: int(p.byte()), UtilMean: model.Reading(p.byte() % 101),
					StartNs: now, EndNs: now + 1e9, Processes: []model.GPUProcess{{PID: p.pid(), MemPeak: p.value()}}, ThrottlePolls: map[string]int{p.name(): 1}})
				g.Traced = append(g.Traced, model.TracedHost{PID: p.pid(), CUDACalls: int64(p.byte()), HostBusy: model.Reading(float64(p.byte()) / 255)})
				g.Events = append(g.Events, model.GPUEvent{TS: now, Device: i, Kind: "xid", Data: uint64(p.byte())})
			}
			last = func(int, byte, byte) { w.GPU(g) }
			last(0, 0, 0)
		case opDrops:
			d := model.Drops{Submitted: p.value(), Received: p.value(), RingbufFull: p.value() % 1000, DecodeErrors: p.value() % 1000, GPUTimesLost: p.value() % 1000}
			last = func(int, byte, byte) { w.Drops(d) }
			last(0, 0, 0)
		case opEnd:
			cut = int(p.byte())
		}
	}
	w.Close()
	b := buf.Bytes()
	if cut >= 0 { // as a killed recorder leaves it
		b = b[:len(b)*cut/256]
	}
	return b
}

// event draws one call.
func (p *program) event(now *uint64) *event.Event {
	api := apis[int(p.byte())%len(apis)]
	e := &event.Event{PID: p.pid(), TID: p.tid(), Cookie: uint64(api)}
	s := event.Lookup(api)
	if s != nil {
		e.Cookie = s.Cookie(int(p.byte() % 2))
	}
	e.Start = *now + uint64(p.byte())*1000
	if s == nil || s.Return {
		e.End = e.Start + uint64(p.byte())*uint64(p.byte())*1000
		e.Flags = event.FlagHasRet
	}
	e.Ret = [...]int64{0, 0, 0, 600, 2, 0, 0, -1}[p.byte()%8]
	e.Out = p.value()
	for i := range e.Args {
		e.Args[i] = p.value()
	}
	if n := int(p.byte() % 8); n > 0 { // a native stack, and a Python one
		e.Cookie |= event.CookieStack
		e.HasStack, e.NStack = true, n*4
		for i := range e.NStack {
			e.Stack[i] = 0x401000 + uint64(p.byte())<<4
		}
		e.NPy = int(p.byte() % 4)
		for i := range e.NPy {
			e.Py[i] = [2]uint64{0x7f0000 + uint64(p.byte()), uint64(p.byte())}
		}
		e.Copy = []byte(p.name())
	}
	return e
}

// vary makes e the j-th copy of itself: field changed by j (arg: which
// argument), later in time.
func vary(e *event.Event, j int, field, arg byte) {
	d := uint64(j)
	e.Start += d * 1000
	if e.End != 0 {
		e.End += d * 1000
	}
	switch field {
	case fieldPID:
		e.PID += uint32(j)
	case fieldTID:
		e.TID += uint32(j)
	case fieldArg:
		e.Args[arg] += d * 16
	case fieldTime:
		e.Start += d * 10_000_000 // long gaps
		e.End += d * 10_000_000
	case fieldOut:
		e.Out += d * 16
	}
}

// checkOutputs runs rec through export (Chrome, pprof, the summary, lints,
// stragglers), syncs and report (text and HTML, with its memory profile),
// as the commands do, and checks what they make.
func checkOutputs(t *testing.T, rec []byte) {
	agg := export.NewAggregates()
	var trace, ptrace bytes.Buffer
	var cw *chrome.Writer
	var pw *perfetto.Writer
	res, rp, err := replay.Load(bytes.NewReader(rec), func(rp *replay.Replay) model.Sink {
		cw = chrome.NewWriter(&trace, rp.Names, chrome.Options{Version: "fuzz"})
		pw = perfetto.NewWriter(&ptrace, rp.Names, perfetto.Options{Version: "fuzz"})
		return model.Sinks{agg.Sink(), cw, pw}
	}, nil)
	if err != nil && !errors.Is(err, recording.ErrFormat) && !errors.Is(err, recording.ErrTruncated) {
		t.Fatalf("load: %v is neither ErrFormat nor ErrTruncated", err)
	}
	if res == nil {
		if rp != nil && errors.Is(err, recording.ErrTruncated) && rp.Header.Version != 0 {
			t.Fatalf("a truncated recording with a header gave no result: %v", err)
		}
		return
	}
	bounded(t, res)
	if err := cw.Close(res); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(trace.Bytes()) {
		t.Fatalf("the Chrome trace is not JSON:\n%.2000s", trace.Bytes())
	}
	if err := pw.Close(res); err != nil {
		t.Fatal(err)
	}
	if _, err := perfettotest.Read(ptrace.Bytes()); err != nil {
		t.Fatalf("the Perfetto trace does not read back: %v", err)
	}
	if _, err := pprofout.Build(res, agg.Profile, pprofout.Options{Modules: export.Modules(res.Names)}); err != nil {
		t.Fatal(err)
	}
	if err := report.Summary(io.Discard, res, agg.Syncs, report.Options{}); err != nil {
		t.Fatal(err)
	}
	agg.Stragglers.Report(io.Discard)
	if err := lint.WriteText(io.Discard, res, agg.Lints, lint.Findings(res, agg.Lints), lint.TextOptions{}); err != nil {
		t.Fatal(err)
	}
	sites, hosts := syncs.Sites(res, agg.Syncs), syncs.Hosts(res, agg.Syncs)
	if err := syncs.WriteJSON(io.Discard, res, sites, hosts); err != nil {
		t.Fatal(err)
	}
	if err := syncs.WriteText(io.Discard, res, sites, hosts, syncs.TextOptions{}); err != nil {
		t.Fatal(err)
	}

	rep, err := html.Load(bytes.NewReader(rec), html.Options{MaxSlices: 500}, nil)
	if err != nil && !errors.Is(err, recording.ErrTruncated) {
		return // what Load said above
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, "memory.pb.gz"); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteText(io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMemoryProfile(io.Discard); err != nil {
		t.Fatal(err)
	}
}

// merged runs the recording at path through merge, as the only input, to
// a merged recording that export reads back.
func merged(t *testing.T, path string) {
	plan, err := merge.Scan([]string{path}, merge.Options{})
	if err != nil {
		return // a recording export cannot read either, or one merge refuses
	}
	plan.Report(io.Discard)
	var out bytes.Buffer
	agg := export.NewAggregates()
	res, err := plan.Replay(context.Background(), &out, func(*replay.Replay) model.Sink { return agg.Sink() }, nil)
	if err != nil {
		t.Fatalf("merge replay: %v", err)
	}
	bounded(t, res)
	agg.Stragglers.ReportNamed(io.Discard, straggler.Naming{Result: res, Origins: plan.Info().Where()})
	if _, _, err := replay.Load(bytes.NewReader(out.Bytes()), nil, nil); err != nil {
		t.Fatalf("the merged recording does not read back: %v", err)
	}
}

// bounded checks the model stayed within its bounds: 1,024 processes,
// threads and streams apart (model/limits.go), and one more for those
// merged, each merge counted.
func bounded(t *testing.T, res *model.Result) {
	const limit = 1024
	l := res.Drops.Limits
	if n := len(res.Processes); n > limit+1 || n == limit+1 && l.Processes == 0 {
		t.Fatalf("%d processes, %d merged", n, l.Processes)
	}
	for _, p := range res.Processes {
		if n := len(p.Threads); n > limit+1 {
			t.Fatalf("pid %d: %d threads", p.PID, n)
		}
		if n := len(p.Streams); n > limit+1 || n == limit+1 && l.Streams == 0 {
			t.Fatalf("pid %d: %d streams, %d merged", p.PID, n, l.Streams)
		}
	}
}

var updateSeeds = flag.Bool("update-seeds", false, "write the fuzz seeds to testdata/fuzz/FuzzRecordings")

// TestFuzzSeeds: the seeds in testdata are the seeds here, and each makes
// what it is named for, through the whole replay, with the bounds acting
// where it goes past them.
func TestFuzzSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzRecordings")
	for name, prog := range seeds {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		corpus := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", prog)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(corpus), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != corpus {
			t.Errorf("%s is not seed %q (%v): go test -run TestFuzzSeeds -update-seeds ./export", file, name, err)
		}
	}
	load := func(name string) *model.Result {
		res, _, err := replay.Load(bytes.NewReader(build(seeds[name])), nil, nil)
		if err != nil && name != "nccl" {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	if r := load("streams and syncs"); len(r.Processes) != 1 || len(r.Processes[0].Streams) < 3 || r.Processes[0].NCalls != 7 {
		t.Errorf("streams and syncs: %d processes, %d streams, %d calls", len(r.Processes), len(r.Processes[0].Streams), r.Processes[0].NCalls)
	}
	for name, merged := range map[string]func(model.Limits) uint64{
		"processes":   func(l model.Limits) uint64 { return l.Processes },
		"threads":     func(l model.Limits) uint64 { return l.Threads },
		"streams":     func(l model.Limits) uint64 { return l.Streams },
		"allocations": func(l model.Limits) uint64 { return l.Allocations },
	} {
		if r := load(name); merged(r.Drops.Limits) == 0 {
			t.Errorf("%s: no bound acted: %+v", name, r.Drops.Limits)
		}
	}
	if r := load("nccl"); r.Truncated != "" || r.Processes[0].WorldSize != 2 {
		t.Errorf("nccl: world size %d", r.Processes[0].WorldSize)
	}
	if r := load("names and NVML"); len(r.Counters) < 1000 || len(r.GPU.GPUs) != 3 {
		t.Errorf("names and NVML: %d samples, %d GPUs", len(r.Counters), len(r.GPU.GPUs))
	}
}
