// Package gputime receives the GPU times cudatap's CUPTI collector
// (tracer/gputime/collector) measures inside traced processes, and joins
// each GPU record to the API call that enqueued it, so the model can draw
// every op where the GPU really ran it (model.Measurement).
//
// A Listener owns a directory the target can see, in its /tmp, made so
// that the target's user cannot turn it against the node (stage.go): the
// collector library, its config and a SOCK_SEQPACKET socket. Each process that loads the
// collector connects once; its messages (wire.h) are read on a goroutine
// of their own, joined by CUPTI correlation id, and handed to the Sink in
// order. Every buffer is bounded; what does not fit is counted.
package gputime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/gputime/collector"
	"github.com/cudatap/cudatap/tracer/model"
)

// Sink receives what the collectors say. Calls for one process come from
// one goroutine, in order; calls for different processes may interleave.
type Sink interface {
	// Started: pid's collector is measuring the GPU ops enqueued from
	// h.Since on.
	Started(pid uint32, h Hello)
	// Refused: pid's collector is not measuring, and why.
	Refused(pid uint32, why string)
	Measure(pid uint32, m *model.Measurement)
	// Mark: the collector flushed CUPTI at t.
	Mark(pid uint32, t uint64)
	// HandedOver: pid's collector let CUPTI go to another client of the
	// process at t, every record of the ops before sent: nothing more is
	// measured until Started again (it took CUPTI back).
	HandedOver(pid uint32, t uint64)
	// Kept: the collector could not take CUPTI back (another client
	// still holds it), and why; it stays handed over.
	Kept(pid uint32, why string)
	// Stopped: pid's collector is done; lost counts the records the
	// collector, CUPTI or the join lost over its whole life.
	Stopped(pid uint32, lost Lost)
}

// Hello is what a collector says when it starts measuring, or resumes.
type Hello struct {
	Info  string // its CUPTI, clock and join, in words
	CUPTI string // the libcupti it uses, as the process sees it
	// TID is the collector's own thread: its calls into CUPTI are its own,
	// never another client's.
	TID uint32
	// Since: GPU ops enqueued from then on are measured (CLOCK_MONOTONIC).
	Since uint64
	// Resumed: CUPTI taken back after a hand-over.
	Resumed bool
}

// Lost counts the GPU records of one process that never became
// measurements: not sent (the socket stayed full), dropped by CUPTI (no
// buffer), never joined to an API record, or with impossible times.
type Lost struct {
	Collector, CUPTI, NoAPI, Invalid uint64
}

// Total is every record lost.
func (l Lost) Total() uint64 { return l.Collector + l.CUPTI + l.NoAPI + l.Invalid }

// Wire format (wire.h).
const (
	magic      = 0x50415443
	version    = 3
	headerSize = 48
	recordSize = 48
	maxRecords = 1024
	maxMessage = headerSize + maxRecords*recordSize

	msgHello   = 1
	msgRecords = 2
	msgMark    = 3
	msgBye     = 4
	msgError   = 5
	msgName    = 6
	msgHanded  = 7
	msgResumed = 8
	msgKept    = 9

	flagMonotonic = 1

	recAPI    = 1
	recKernel = 2
	recMemcpy = 3
	recMemset = 4
)

// Bounds of the join: CUPTI API records kept for GPU records still to come,
// and GPU records waiting for their API record (CUPTI writes them to other
// buffers, flushed in any order; the mark after a flush settles them).
const (
	maxAPIRecords     = 1 << 18 // driver calls: seconds of a busy job, the GPU can lag that far
	maxWaitingRecords = 1 << 16
	maxNames          = 1 << 16 // distinct kernel names kept per process
)

// maxOpNs: a GPU record longer than this is not a real time.
const maxOpNs = uint64(time.Hour)

// Config says where the collector's files go and how it runs.
type Config struct {
	// Root is the target's root directory as cudatap reaches it: "/" for a
	// process that shares cudatap's, /proc/PID/root for one in a
	// container. The collector's directory is made in its /tmp (see
	// stage.go: nothing is done by a path the target's user controls).
	Root string
	// CUPTI, if set, is the libcupti the collector must use (as the target
	// sees it); else it finds the target's own.
	CUPTI string
	// Attach: the library is loaded with dlopen into a running process
	// (it starts its own thread) rather than by the CUDA driver.
	Attach bool
	// FlushEvery is how often the collector flushes CUPTI (default 200ms).
	FlushEvery time.Duration
	// Join is how GPU records are joined to the calls that enqueued them:
	// "callbacks" (default: CUPTI callbacks on the enqueuing calls), "api"
	// (CUPTI's runtime and driver API records, of every call), or "none"
	// (GPU records only, joined to nothing: to measure what they cost).
	Join string
	// UID, GID own the socket, so a target running as another user can
	// connect (-1: cudatap's).
	UID, GID int

	name       string // the directory's name; drawn at random unless a test sets it
	afterMkdir func() // a test's attacker, between mkdir and open
}

// Listener serves the collectors of the processes that see one directory.
type Listener struct {
	cfg     Config
	staging *staging
	sink    Sink
	ln      *net.UnixListener
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[*net.UnixConn]*peer
	done  bool

	// The NVTX socket and its connections (nvtx.go), for a Sink that
	// takes NVTX records.
	nvtx      *net.UnixListener
	nvtxConns map[*net.UnixConn]bool

	readyOnce sync.Once
	ready     chan struct{}
}

// Ready is closed when a collector first said it measures, or why not.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

func (l *Listener) Started(pid uint32, h Hello) {
	l.sink.Started(pid, h)
	l.readyOnce.Do(func() { close(l.ready) })
}

func (l *Listener) Refused(pid uint32, why string) {
	l.sink.Refused(pid, why)
	l.readyOnce.Do(func() { close(l.ready) })
}

func (l *Listener) Measure(pid uint32, m *model.Measurement) { l.sink.Measure(pid, m) }
func (l *Listener) Mark(pid uint32, t uint64)                { l.sink.Mark(pid, t) }
func (l *Listener) Stopped(pid uint32, lost Lost)            { l.sink.Stopped(pid, lost) }
func (l *Listener) HandedOver(pid uint32, t uint64)          { l.sink.HandedOver(pid, t) }
func (l *Listener) Kept(pid uint32, why string)              { l.sink.Kept(pid, why) }

// Listen makes the collector's directory in the target's /tmp, writes the
// collector and its config into it and listens on its socket.
func Listen(cfg Config, sink Sink) (*Listener, error) {
	name := cfg.name
	if name == "" {
		var err error
		if name, err = newStagingName(); err != nil {
			return nil, fmt.Errorf("GPU times: %w", err)
		}
	}
	st, err := makeStaging(cfg.Root, name, cfg.afterMkdir)
	if err != nil {
		return nil, err
	}
	ln, err := stageCollector(st, cfg)
	if err != nil {
		st.remove()
		return nil, err
	}
	l := &Listener{cfg: cfg, staging: st, sink: sink, ln: ln, conns: map[*net.UnixConn]*peer{}, ready: make(chan struct{}),
		nvtxConns: map[*net.UnixConn]bool{}}
	if err := l.listenNVTX(); err != nil {
		ln.Close()
		st.remove()
		return nil, err
	}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// stageCollector writes the collector and its config into st and listens
// on its socket.
func stageCollector(st *staging, cfg Config) (*net.UnixListener, error) {
	if err := st.writeFile(libraryFile, collector.Library, 0o755); err != nil {
		return nil, err
	}
	flush := cfg.FlushEvery
	if flush <= 0 {
		flush = 200 * time.Millisecond
	}
	conf := fmt.Sprintf("socket=%s\nflush_ms=%d\n", path.Join(st.target, socketFile), flush.Milliseconds())
	if cfg.CUPTI != "" {
		conf += "cupti=" + cfg.CUPTI + "\n"
	}
	if cfg.Attach {
		conf += "mode=attach\n"
	}
	if os.Getenv("CUDATAP_CUPTI_CLOCK") == "cupti" {
		conf += "clock=cupti\n" // a diagnosis: CUPTI's clock and an offset, not a timestamp callback
	}
	if cfg.Join != "" {
		conf += "join=" + cfg.Join + "\n"
	}
	if err := st.writeFile(configFile, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return st.listen(socketFile, cfg.UID, cfg.GID)
}

// Dir is the collector's directory's name in the target's /tmp.
func (l *Listener) Dir() string { return l.staging.name }

// Root is the target's root the directory was made under (Config.Root).
func (l *Listener) Root() string { return l.cfg.Root }

// LibraryPath is the collector as the target sees it: what
// CUDA_INJECTION64_PATH names, or what cudatap makes the process dlopen.
func (l *Listener) LibraryPath() string {
	return path.Join(l.staging.target, libraryFile)
}

func (l *Listener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.done {
			l.mu.Unlock()
			c.Close()
			return
		}
		p := newPeer(peerPID(c), l)
		p.conn = c
		l.conns[c] = p
		l.wg.Add(1)
		l.mu.Unlock()
		go l.serve(c, p)
	}
}

// ErrNoCollector: the process has no collector connected to this listener
// (it exited, or never loaded one).
var ErrNoCollector = errors.New("no GPU-time collector in the process")

// HandOver asks pid's collector to let CUPTI go to another client of the
// process, and waits until it has (every record before sent), or timeout.
// Another CUPTI client's thread is held meanwhile: the wait is bounded.
func (l *Listener) HandOver(pid uint32, timeout time.Duration) error {
	c, p := l.conn(pid)
	if c == nil {
		return ErrNoCollector
	}
	select {
	case <-p.handedOver: // an answer no one waited for
	default:
	}
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("H")); err != nil {
		return fmt.Errorf("ask the collector to hand CUPTI over: %w", err)
	}
	select {
	case <-p.handedOver:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("the collector did not hand CUPTI over within %v", timeout)
	}
}

// TakeBack asks pid's collector to take CUPTI back (the other client
// finalized it); its answer reaches the Sink: Started, or Kept.
func (l *Listener) TakeBack(pid uint32) error {
	c, _ := l.conn(pid)
	if c == nil {
		return ErrNoCollector
	}
	c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("T")); err != nil {
		return fmt.Errorf("ask the collector to take CUPTI back: %w", err)
	}
	return nil
}

// conn is pid's collector's connection (nil when none).
func (l *Listener) conn(pid uint32) (*net.UnixConn, *peer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, p := range l.conns {
		if p.pid == pid {
			return c, p
		}
	}
	return nil, nil
}

// Stop asks every collector to flush and stop, waits for them up to
// timeout, and removes the directory. The library stays mapped in the
// processes that loaded it, inert: its thread has ended and CUPTI is
// finalized.
func (l *Listener) Stop(timeout time.Duration) {
	l.mu.Lock()
	l.done = true
	deadline := time.Now().Add(timeout)
	for c := range l.conns {
		c.SetWriteDeadline(deadline)
		c.Write([]byte("S"))
		c.SetReadDeadline(deadline)
	}
	l.stopNVTX(deadline)
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
	l.staging.remove()
}

func newPeer(pid uint32, sink Sink) *peer {
	return &peer{pid: pid, sink: sink, api: map[uint32]apiRecord{}, waiting: map[uint32][]gpuRecord{}, names: map[uint64]string{},
		handedOver: make(chan struct{}, 1), dbg: openDebug(pid)}
}

// serve reads one collector's messages until it says bye or goes away.
func (l *Listener) serve(c *net.UnixConn, p *peer) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, maxMessage)
	defer func() { p.dbg.close() }()
	for {
		n, _, _, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			p.end()
			return
		}
		if done := p.message(buf[:n]); done {
			return
		}
	}
}

// peerPID is the connecting process's pid in cudatap's namespace: the
// kernel translates SO_PEERCRED's.
func peerPID(c *net.UnixConn) uint32 {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var pid uint32
	raw.Control(func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			pid = uint32(cred.Pid)
		}
	})
	return pid
}

type apiRecord struct {
	tid        uint32
	start, end uint64
}

type gpuRecord struct {
	mark       int // the marks seen when it came
	kind       byte
	corr       uint32
	start, end uint64
	device     uint32
	stream     uint32 // CUPTI's stream id
	copyKind   uint8  // a copy's CUPTI_ACTIVITY_MEMCPY_KIND_*
	bytes      uint64
	node       uint64 // CUPTI's graphNodeId (0: not a graph launch's)
}

// peer is one connected collector: its clock, its threads' ids and the
// join state.
type peer struct {
	pid     uint32
	sink    Sink
	started bool
	stopped bool
	nsPID   uint32
	offset  int64 // added to CUPTI's times: 0 when it stamps CLOCK_MONOTONIC
	tids    map[uint32]uint32

	api      map[uint32]apiRecord
	apiOrder []uint32 // insertion order, for eviction
	apiHead  int
	waiting  map[uint32][]gpuRecord
	nWaiting int
	names    map[uint64]string // kernel names by the hash records carry

	lost   Lost
	marks  int  // marks seen, to age the records waiting for their API record
	noJoin bool // join=none: no call record will come, a GPU record is lost at once

	handedOver chan struct{} // HandOver's answer
	conn       *net.UnixConn // to answer hello
	dbg        *debugLog     // CUDATAP_GPUTIME_DEBUG's file, or nil
}

// message handles one message; done when nothing more will come.
func (p *peer) message(b []byte) (done bool) {
	if len(b) < headerSize {
		return false
	}
	le := binary.LittleEndian
	if le.Uint32(b) != magic || le.Uint16(b[4:]) != version {
		p.refuse("the collector speaks another protocol version: use the cudatap that loaded it")
		return true
	}
	typ, count := le.Uint16(b[6:]), le.Uint32(b[8:])
	p.nsPID = le.Uint32(b[12:])
	t, ct := le.Uint64(b[16:]), le.Uint64(b[24:])
	p.lost.Collector, p.lost.CUPTI = le.Uint64(b[32:]), le.Uint64(b[40:])
	body := b[headerSize:]
	text := func() string { return string(body[:min(int(count), len(body))]) }
	switch typ {
	case msgHello:
		p.dbg.line("hello", "%s", text())
		h := parseHello(text())
		if strings.Contains(h.Info, "clock=cupti") {
			p.offset = int64(t) - int64(ct)
		}
		p.noJoin = strings.Contains(h.Info, "join=none")
		p.started = true
		p.sink.Started(p.pid, h)
		// The program waits for this word (a while at most): cudatap
		// watches for other CUPTI clients from here on.
		if p.conn != nil {
			p.conn.SetWriteDeadline(time.Now().Add(time.Second))
			p.conn.Write([]byte("A"))
		}
	case msgHanded:
		// Every record before was sent: what still waits for its call's
		// record never gets it, and correlation ids may start over.
		p.settle(p.marks + 1)
		clear(p.api)
		p.apiOrder, p.apiHead = p.apiOrder[:0], 0
		p.sink.HandedOver(p.pid, t)
		select {
		case p.handedOver <- struct{}{}:
		default:
		}
	case msgResumed:
		h := parseHello(text())
		h.Since, h.Resumed = t, true
		p.sink.Started(p.pid, h)
	case msgKept:
		p.sink.Kept(p.pid, text())
	case msgError:
		p.refuse(text())
		return true
	case msgRecords:
		if int(count)*recordSize > len(body) {
			// A message cut short: its records are lost, counted.
			p.lost.Invalid += uint64(count)
			return false
		}
		for i := range int(count) {
			p.record(body[i*recordSize : (i+1)*recordSize])
		}
	case msgMark:
		p.dbg.line("mark", "%d", t)
		p.marks++
		p.settle(p.marks - 2)
		p.sink.Mark(p.pid, uint64(int64(t)))
	case msgBye:
		p.end()
		return true
	case msgName:
		if count >= 8 && int(count) <= len(body) {
			if len(p.names) >= maxNames {
				clear(p.names) // the collector sends a name again after a collision only: rare
			}
			p.names[le.Uint64(body)] = string(body[8:count])
		}
	}
	return false
}

func (p *peer) refuse(why string) {
	if !p.stopped {
		p.stopped = true
		p.sink.Refused(p.pid, why)
	}
}

// end: the collector said bye or went away.
func (p *peer) end() {
	if p.stopped {
		return
	}
	p.stopped = true
	p.settle(p.marks + 1)
	if p.started {
		p.sink.Stopped(p.pid, p.lost)
	}
}

// parseHello reads "cupti=PATH clock=C join=J tid=N since=T" (the path
// has no spaces: the collector finds or is given it, and says so).
func parseHello(info string) Hello {
	h := Hello{Info: info}
	for _, f := range strings.Fields(info) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "cupti":
			h.CUPTI = v
		case "tid":
			n, _ := strconv.ParseUint(v, 10, 32)
			h.TID = uint32(n)
		case "since":
			h.Since, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	return h
}

func (p *peer) time(t uint64) uint64 { return uint64(int64(t) + p.offset) }

func (p *peer) record(r []byte) {
	le := binary.LittleEndian
	kind, corr := r[0], le.Uint32(r[4:])
	start, end := p.time(le.Uint64(r[8:])), p.time(le.Uint64(r[16:]))
	if le.Uint16(r[2:])&flagMonotonic != 0 {
		start, end = le.Uint64(r[8:]), le.Uint64(r[16:]) // the collector's own clock
	}
	a, b, bytes, node := le.Uint32(r[24:]), le.Uint32(r[28:]), le.Uint64(r[32:]), le.Uint64(r[40:])
	if kind == recAPI {
		if p.dbg != nil {
			p.dbg.line("call", "%d\t%d\t%s\t%d\t%d\t%d", corr, p.hostTID(a), [2]string{"driver", "runtime"}[r[1]&1], b, start, end)
		}
		p.addAPI(corr, apiRecord{tid: p.hostTID(a), start: start, end: end})
		return
	}
	if p.dbg != nil {
		name := ""
		if kind == recKernel {
			name = p.names[bytes]
		}
		p.dbg.line("gpu", "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", kindName(kind), corr, a, b, start, end, bytes, name)
	}
	if start == 0 || end < start || end-start > maxOpNs {
		// CUPTI stamps some records it could not time with 0 or garbage
		// (seen on the H200: device-to-device copies): not a time.
		if p.lost.Invalid < 5 && debug {
			fmt.Fprintf(os.Stderr, "gputime: impossible record kind %d sub %d corr %d start %d end %d a %d raw %x\n",
				kind, r[1], corr, le.Uint64(r[8:]), le.Uint64(r[16:]), a, r)
		}
		p.lost.Invalid++
		return
	}
	if p.noJoin {
		// Nothing to join it to (join=none measures what CUPTI's GPU
		// records alone cost): counted, and nothing kept.
		p.lost.NoAPI++
		return
	}
	g := gpuRecord{kind: kind, corr: corr, start: start, end: end, device: a, stream: b, copyKind: r[1], bytes: bytes, node: node}
	if api, ok := p.api[corr]; ok {
		p.emit(api, g)
		return
	}
	if p.nWaiting >= maxWaitingRecords {
		p.lost.NoAPI++
		p.dbg.line("noapi", "%s\t%d\t%d\t%d", kindName(kind), corr, start, end)
		return
	}
	g.mark = p.marks
	p.waiting[corr] = append(p.waiting[corr], g)
	p.nWaiting++
}

func (p *peer) addAPI(corr uint32, a apiRecord) {
	// A runtime call and the driver call it makes share a correlation id;
	// the first (innermost, it ends first) is as good as the outer one:
	// both lie inside the traced call.
	if _, ok := p.api[corr]; !ok {
		if len(p.apiOrder) < maxAPIRecords {
			p.apiOrder = append(p.apiOrder, corr)
		} else {
			delete(p.api, p.apiOrder[p.apiHead])
			p.apiOrder[p.apiHead] = corr
			p.apiHead = (p.apiHead + 1) % maxAPIRecords
		}
		p.api[corr] = a
	}
	if gs, ok := p.waiting[corr]; ok {
		delete(p.waiting, corr)
		p.nWaiting -= len(gs)
		for _, g := range gs {
			p.emit(a, g)
		}
	}
}

func (p *peer) emit(a apiRecord, g gpuRecord) {
	m := model.Measurement{TID: a.tid, APIStart: a.start, APIEnd: a.end, Start: g.start, End: g.end,
		Device: int8(min(g.device, 127)), Bytes: g.bytes, Correlation: g.corr, GraphNode: g.node, CUPTIStream: g.stream + 1}
	switch g.kind {
	case recKernel:
		m.Kind = model.OpKernel
		m.Name = p.names[g.bytes]
		m.Bytes = 0
	case recMemcpy:
		m.Kind = model.OpMemcpy
		m.CopyKind = copyKind(g.copyKind)
	case recMemset:
		m.Kind = model.OpMemset
	default:
		return
	}
	p.sink.Measure(p.pid, &m)
}

// copyKind is the direction of CUPTI's CUPTI_ACTIVITY_MEMCPY_KIND_*:
// arrays are device memory, peers' copies device to device.
func copyKind(k uint8) event.MemcpyKind {
	switch k {
	case 1, 3: // HtoD, HtoA
		return event.HostToDevice
	case 2, 4: // DtoH, AtoH
		return event.DeviceToHost
	case 5, 6, 7, 8, 10: // AtoA, AtoD, DtoA, DtoD, PtoP
		return event.DeviceToDevice
	case 9:
		return event.HostToHost
	}
	return event.DefaultKind
}

// settle gives up on GPU records that came before mark number upto and
// still wait for their API record: the flushes behind two marks delivered
// every record written before them (one was not always enough on the H200).
func (p *peer) settle(upto int) {
	for corr, gs := range p.waiting {
		n := 0
		for _, g := range gs {
			if g.mark < upto {
				p.lost.NoAPI++
				p.dbg.line("noapi", "%s\t%d\t%d\t%d", kindName(g.kind), corr, g.start, g.end)
			} else {
				gs[n] = g
				n++
			}
		}
		p.nWaiting -= len(gs) - n
		if n == 0 {
			delete(p.waiting, corr)
		} else {
			p.waiting[corr] = gs[:n]
		}
	}
}

// hostTID maps a thread id from the process's pid namespace (CUPTI's
// threadId is gettid() there) to cudatap's.
func (p *peer) hostTID(tid uint32) uint32 {
	if p.nsPID == 0 || p.nsPID == p.pid {
		return tid
	}
	if h, ok := p.tids[tid]; ok {
		return h
	}
	p.tids = nsThreads(p.pid)
	if h, ok := p.tids[tid]; ok {
		return h
	}
	return tid
}

// nsThreads maps the namespace tids of pid's threads to host tids, from
// the NSpid lines of /proc/PID/task/*/status.
func nsThreads(pid uint32) map[uint32]uint32 {
	out := map[uint32]uint32{}
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		host, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" {
				if ns, err := strconv.ParseUint(f[len(f)-1], 10, 32); err == nil {
					out[uint32(ns)] = uint32(host)
				}
			}
		}
	}
	return out
}
