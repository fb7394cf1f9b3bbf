package tracer

// GPU times (--gpu-times): cudatap's collector measures each traced
// process's GPU ops with the process's own CUPTI (tracer/gputime); its
// measurements reach the model through the reader goroutine, in order with
// the notes, and are recorded, so a replay draws the same ops.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/inject"
	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/gputime"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
)

// maxGPUNotes bounds the measurements waiting for the reader (64 bytes
// each): past it they are counted lost (Drops.GPUTimesLost).
const maxGPUNotes = 1 << 18

type gpuNoteKind uint8

const (
	gpuStart gpuNoteKind = iota + 1
	gpuMeasure
	gpuMark
	gpuStop
	gpuHandOver
	gpuRefused
	gpuNVTX // an NVTX call the collector's NVTX side reported (nvtx.go)
)

type gpuNote struct {
	kind gpuNoteKind
	pid  uint32
	t    uint64 // start: measured since; mark, hand-over: its time; stop: records lost
	m    model.Measurement
	raw  []byte // NVTX: the call, as a probe's record
}

// gpuTimes is the session's side of the collectors.
type gpuTimes struct {
	mu        sync.Mutex
	listeners []*gputime.Listener
	byPID     map[int]*gputime.Listener // attached ones, released when the process exits
	tried     map[int]bool              // processes adopted under --all/--container
	status    map[uint32]string         // per process: measuring, or why not
	lost      uint64                    // measurements that found the queue full
	loading   sync.Mutex                // one ptrace load at a time
	inflight  sync.WaitGroup            // loads started by gpuTimesAdopted, hand-overs under way
	closed    bool                      // stopGPUTimes ran: no new listener
	watches   map[uint32]*cuptiWatch    // by pid: the collector holds CUPTI there
	refusals  map[string]bool           // reasons for not measuring said already
	launched  bool                      // the launched command loads a collector
	misses    *missLog                  // CUDATAP_GPUTIME_DEBUG: the join's misses, or nil
}

// cuptiWatch is the watch on a process's libcupti while cudatap's
// collector holds it: another client's call into it is held until the
// collector has let CUPTI go (handOver).
type cuptiWatch struct {
	att       *probe.Attachment
	collector uint32 // the collector's thread: its own calls are not another client's
	away      bool   // CUPTI handed over
}

// maxMeasured bounds the processes measured at once under --all and
// --container (a listener and a socket each); beyond, new ones are refused
// with that reason.
const maxMeasured = 64

// GPUTimeStatus says, per process, whether its GPU ops were measured and
// with which CUPTI, or why not.
func (s *Session) GPUTimeStatus() map[uint32]string {
	s.gputimes.mu.Lock()
	defer s.gputimes.mu.Unlock()
	out := make(map[uint32]string, len(s.gputimes.status))
	for k, v := range s.gputimes.status {
		out[k] = v
	}
	return out
}

// gpuTimesForLaunch makes the collector ready for a command cudatap
// launches and returns the environment entry that has the CUDA driver load
// it (at cuInit, before any work reaches the GPU); "" when another tool
// injects itself into CUDA already (the driver loads one): then the
// command's GPU ops are drawn within bounds, and the run says why.
func (s *Session) gpuTimesForLaunch(env []string) (string, error) {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CUDA_INJECTION64_PATH="); ok && v != "" {
			s.notMeasured(0, fmt.Sprintf("CUDA_INJECTION64_PATH is already set (%s): another tool injects itself into CUDA, "+
				"and the driver loads only one; unset it to measure GPU times", v))
			return "", nil
		}
	}
	s.logMisses()
	// The command shares cudatap's root and runs as its user.
	l, err := gputime.Listen(gputime.Config{Root: "/", CUPTI: s.cfg.CUPTIPath, UID: -1, GID: -1, Join: os.Getenv("CUDATAP_GPU_JOIN")}, s)
	if err != nil {
		return "", err
	}
	s.guard.Staged("/", l.Dir())
	s.gputimes.mu.Lock()
	s.gputimes.listeners = append(s.gputimes.listeners, l)
	s.gputimes.launched = true
	s.gputimes.mu.Unlock()
	return "CUDA_INJECTION64_PATH=" + l.LibraryPath(), nil
}

// stopGPUTimes asks every collector for its last records and to stop.
func (s *Session) stopGPUTimes() {
	s.gputimes.mu.Lock()
	s.gputimes.closed = true
	s.gputimes.mu.Unlock()
	s.gputimes.inflight.Wait() // loads and hand-overs under way finish (bounded by the collector's word)
	s.gputimes.mu.Lock()
	ls := s.gputimes.listeners
	s.gputimes.listeners = nil
	watches := s.gputimes.watches
	s.gputimes.watches = nil
	s.gputimes.mu.Unlock()
	for pid, w := range watches {
		s.unwatch(int(pid), w)
	}
	for _, l := range ls {
		s.stopListener(l, 3*time.Second)
	}
}

func (s *Session) queueGPU(n gpuNote) {
	s.notesMu.Lock()
	if len(s.gpuNotes) >= maxGPUNotes && (n.kind == gpuMeasure || n.kind == gpuNVTX) {
		s.notesMu.Unlock()
		s.gputimes.mu.Lock()
		s.gputimes.lost++
		s.gputimes.mu.Unlock()
		return
	}
	s.gpuNotes = append(s.gpuNotes, n)
	s.notesMu.Unlock()
	s.notesQueued.Store(true)
}

func (s *Session) setGPUStatus(pid uint32, st string) {
	s.gputimes.mu.Lock()
	if s.gputimes.status == nil {
		s.gputimes.status = map[uint32]string{}
	}
	s.gputimes.status[pid] = st
	s.gputimes.mu.Unlock()
	s.obs.GPUTimes(pid, st)
}

// The gputime.Sink methods, called on the listener's goroutines.

func (s *Session) Started(pid uint32, h gputime.Hello) {
	if h.Resumed {
		s.log.Info("GPU times measured by CUPTI again: the other CUPTI client is done", "pid", pid)
	} else {
		s.log.Info("GPU times measured by CUPTI", "pid", pid, "collector", h.Info)
	}
	s.queueGPU(gpuNote{kind: gpuStart, pid: pid, t: h.Since})
	s.setGPUStatus(pid, "measured ("+h.Info+")")
	s.watchCUPTI(pid, h)
}

func (s *Session) Refused(pid uint32, why string) {
	s.notMeasured(pid, why)
	s.queueGPU(gpuNote{kind: gpuRefused, pid: pid}) // held since the launch: release them
}

// notMeasured says why pid's GPU ops are not measured (0: the launched
// command's), once per reason: a job of many processes without CUPTI says
// it once.
func (s *Session) notMeasured(pid uint32, why string) {
	s.gputimes.mu.Lock()
	said := s.gputimes.refusals[why]
	if !said && len(s.gputimes.refusals) < maxRefusalsSaid {
		if s.gputimes.refusals == nil {
			s.gputimes.refusals = map[string]bool{}
		}
		s.gputimes.refusals[why] = true
	}
	s.gputimes.mu.Unlock()
	if !said {
		s.log.Warn("GPU times not measured: GPU ops are drawn within bounds", "pid", pid, "reason", why)
	}
	if pid != 0 {
		s.setGPUStatus(pid, "not measured: "+why)
	}
}

// maxRefusalsSaid bounds the distinct reasons for not measuring said once.
const maxRefusalsSaid = 64

func (s *Session) HandedOver(pid uint32, t uint64) {
	s.log.Info("GPU times: CUPTI handed over to another client of the process (a profiler); its GPU ops are drawn within bounds until it finalizes CUPTI", "pid", pid)
	s.queueGPU(gpuNote{kind: gpuHandOver, pid: pid, t: t})
	s.setGPUStatus(pid, "handed over to another CUPTI client of the process: GPU ops bounded until it finalizes CUPTI")
}

func (s *Session) Kept(pid uint32, why string) {
	s.log.Info("GPU times: CUPTI not taken back, another client still holds it", "pid", pid, "reason", why)
}

// expectGPUTimes: the process cudatap is about to launch will load the
// collector at its first CUDA call; its ops wait for their measurement
// from the start (the collector's hello races the first events).
func (s *Session) expectGPUTimes(pid int) {
	s.gputimes.mu.Lock()
	launched := s.gputimes.launched
	s.gputimes.mu.Unlock()
	if launched {
		s.queueGPU(gpuNote{kind: gpuStart, pid: uint32(pid)})
	}
}

func (s *Session) Measure(pid uint32, m *model.Measurement) {
	if end := s.tracingEnd.Load(); end != 0 && m.APIStart > end {
		return // its call came after the probes closed: outside the recording
	}
	s.queueGPU(gpuNote{kind: gpuMeasure, pid: pid, m: *m})
}

func (s *Session) Mark(pid uint32, t uint64) { s.queueGPU(gpuNote{kind: gpuMark, pid: pid, t: t}) }

func (s *Session) Stopped(pid uint32, lost gputime.Lost) {
	if lost.Total() > 0 {
		s.log.Info("GPU time records lost", "pid", pid, "not sent", lost.Collector, "CUPTI had no buffer", lost.CUPTI,
			"no API record", lost.NoAPI, "impossible times", lost.Invalid)
	}
	s.queueGPU(gpuNote{kind: gpuStop, pid: pid, t: lost.Total()})
}

// applyGPUNotes hands queued measurements to the model and the recording;
// on the reader goroutine (from applyNotes).
func (s *Session) applyGPUNotes(ns []gpuNote) {
	ns = s.applyNVTX(ns)
	s.modelMu.Lock()
	for i := range ns {
		n := &ns[i]
		switch n.kind {
		case gpuStart:
			s.model.StartMeasuringSince(n.pid, n.t)
		case gpuMeasure:
			s.model.Measure(n.pid, &n.m)
		case gpuMark:
			s.model.MeasuredUntil(n.pid, n.t)
		case gpuStop:
			s.model.AddGPUTimesLost(n.t)
			s.model.StopMeasuring(n.pid)
		case gpuHandOver:
			s.model.HandedOver(n.pid, n.t)
		case gpuRefused:
			s.model.NotMeasured(n.pid)
		}
	}
	s.modelMu.Unlock()
	if s.rec == nil {
		return
	}
	kinds := [...]byte{gpuStart: recording.GPUTimesStart, gpuMeasure: recording.GPUTimesMeasure, gpuMark: recording.GPUTimesMark,
		gpuStop: recording.GPUTimesStop, gpuHandOver: recording.GPUTimesHandOver, gpuRefused: recording.GPUTimesRefused}
	for i := range ns {
		n := &ns[i]
		var m *model.Measurement
		if n.kind == gpuMeasure {
			m = &n.m
		}
		s.rec.GPUTimes(kinds[n.kind], n.pid, n.t, m)
	}
}

// stopListener stops a collector's listener, which removes its directory,
// and tells the guardian it need not.
func (s *Session) stopListener(l *gputime.Listener, timeout time.Duration) {
	l.Stop(timeout)
	s.guard.Unstaged(l.Root(), l.Dir())
}

// gpuTimesLost is what the session itself lost (the queue was full).
func (s *Session) gpuTimesLost() uint64 {
	s.gputimes.mu.Lock()
	defer s.gputimes.mu.Unlock()
	return s.gputimes.lost
}

// gpuTimesAdopted measures a process --all or --container found, once, off
// the control loop (loading CUPTI takes a fraction of a second).
func (s *Session) gpuTimesAdopted(pid int) {
	s.gputimes.mu.Lock()
	if s.gputimes.tried == nil {
		s.gputimes.tried = map[int]bool{}
	}
	if s.gputimes.tried[pid] {
		s.gputimes.mu.Unlock()
		return
	}
	if len(s.gputimes.tried) >= 1<<16 {
		// Bounded: most are long gone. One still alive and tried again
		// gets the same library path, which dlopen loads once.
		clear(s.gputimes.tried)
	}
	s.gputimes.tried[pid] = true
	full, closed := len(s.gputimes.byPID) >= maxMeasured, s.gputimes.closed
	if !full && !closed {
		s.gputimes.inflight.Add(1)
	}
	s.gputimes.mu.Unlock()
	if full {
		s.setGPUStatus(uint32(pid), fmt.Sprintf("not measured: %d processes are measured already", maxMeasured))
	}
	if full || closed {
		return
	}
	go func() {
		defer s.gputimes.inflight.Done()
		s.gpuTimesAttach(pid) // a refusal is logged and shown in the process's GPU-times status

	}()
}

// gpuTimesExited releases the collector's listener of a process that ended.
func (s *Session) gpuTimesExited(pid int) {
	s.gputimes.mu.Lock()
	l := s.gputimes.byPID[pid]
	delete(s.gputimes.byPID, pid)
	if l != nil {
		s.gputimes.listeners = slices.DeleteFunc(s.gputimes.listeners, func(x *gputime.Listener) bool { return x == l })
	}
	w := s.gputimes.watches[uint32(pid)]
	delete(s.gputimes.watches, uint32(pid))
	s.gputimes.mu.Unlock()
	if w != nil {
		s.unwatch(pid, w)
	}
	if l != nil {
		go s.stopListener(l, time.Second) // its collector is gone with it: nothing to wait for
	}
}

// The hand-over. A profiler started in a process whose CUPTI cudatap's
// collector holds (torch.profiler, Nsight, any cuptiSubscribe) would find
// it taken, and trace nothing. So while the collector holds CUPTI, a probe
// on the process's libcupti stops the process as another thread enters
// cuptiSubscribe or cuptiActivityRegisterCallbacks (probe.AttachCUPTIWatch);
// the guardian keeps that thread stopped and lets the rest of the process
// run; the collector flushes and lets CUPTI go; then the thread goes on
// into CUPTI, as if cudatap had never been there. When that client
// finalizes CUPTI (a probe on cuptiFinalize's return), the collector takes
// it back. Ops enqueued in between are bounded, and the trace says why.

// handOverTimeout bounds the wait for the collector to let CUPTI go: the
// other client's thread waits that long at most.
const handOverTimeout = 5 * time.Second

// watchCUPTI puts the watch on pid's libcupti once its collector started.
func (s *Session) watchCUPTI(pid uint32, h gputime.Hello) {
	s.gputimes.mu.Lock()
	defer s.gputimes.mu.Unlock()
	if w := s.gputimes.watches[pid]; w != nil {
		w.away = false // taken back
		return
	}
	if s.gputimes.closed || h.CUPTI == "" || h.Resumed {
		return
	}
	s.guard.Hold(int(pid)) // before the probe can stop it: were cudatap killed, the guardian continues it
	att, err := s.tr.AttachCUPTIWatch(int(pid), fmt.Sprintf("/proc/%d/root%s", pid, h.CUPTI), h.CUPTI, s.cache)
	if err != nil {
		s.guard.Free(int(pid))
		s.log.Warn("GPU times: cannot watch the process's CUPTI: a profiler started in it later would find CUPTI taken", "pid", pid, "err", err)
		return
	}
	if s.gputimes.watches == nil {
		s.gputimes.watches = map[uint32]*cuptiWatch{}
	}
	s.gputimes.watches[pid] = &cuptiWatch{att: att, collector: h.TID}
}

// unwatch removes a watch and continues the process, which its probe may
// have stopped with no one left to hand CUPTI over.
func (s *Session) unwatch(pid int, w *cuptiWatch) {
	w.att.Close()
	unix.Kill(pid, unix.SIGCONT)
	s.guard.Free(pid)
}

// cuptiCall handles the watch's record (reader goroutine): a thread of a
// process whose CUPTI the collector holds entered cuptiSubscribe or
// cuptiActivityRegisterCallbacks (the process is stopped there), or
// returned from cuptiFinalize.
func (s *Session) cuptiCall(ev *event.Event) {
	pid, tid := ev.PID, ev.TID
	s.gputimes.mu.Lock()
	w := s.gputimes.watches[pid]
	other := w != nil && tid != w.collector
	client := other && ev.API() == event.CUPTIClient && !w.away
	release := other && ev.API() == event.CUPTIReleased && w.away
	if client {
		w.away = true
		s.gputimes.inflight.Add(1)
	}
	ls := slices.Clone(s.gputimes.listeners)
	s.gputimes.mu.Unlock()
	switch {
	case client:
		go func() {
			defer s.gputimes.inflight.Done()
			s.handOver(int(pid), int(tid), ls)
		}()
	case ev.API() == event.CUPTIClient:
		// The collector's own call, or one after CUPTI was handed over
		// already (or the watch is gone): nothing to wait for, but the
		// stop, which can come after its record.
		go func() {
			inject.WaitStopped(int(tid), time.Second)
			unix.Kill(int(pid), unix.SIGCONT)
		}()
	case release:
		for _, l := range ls {
			if err := l.TakeBack(pid); err == nil {
				break
			}
		}
	}
}

// handOver keeps thread tid of pid at its call into CUPTI while pid's
// collector lets CUPTI go, then lets it go on.
func (s *Session) handOver(pid, tid int, ls []*gputime.Listener) {
	if err := s.guard.HoldThread(pid, tid); err != nil {
		unix.Kill(pid, unix.SIGCONT)
		s.log.Warn("GPU times: another CUPTI client started in the process, but its thread could not be held: it may find CUPTI taken",
			"pid", pid, "tid", tid, "err", err)
		return
	}
	err := gputime.ErrNoCollector
	for _, l := range ls {
		if err = l.HandOver(uint32(pid), handOverTimeout); !errors.Is(err, gputime.ErrNoCollector) {
			break
		}
	}
	if err != nil {
		s.log.Warn("GPU times: CUPTI not handed over to the process's other client, which may find it taken", "pid", pid, "err", err)
	}
	if err := s.guard.ReleaseThread(tid); err != nil {
		s.log.Warn("GPU times: let the other CUPTI client's thread go", "pid", pid, "tid", tid, "err", err)
	}
}

// gpuTimesAttach loads the collector into a running process (-p): it is
// written where the process sees it (its own /tmp, through /proc/PID/root:
// a container's), then the process is made to dlopen it with ptrace. It is
// refused, the process untouched, where that cannot be done safely.
//
// A collector directory someone tampered with (gputime.ErrPlanted) is
// returned as well: for -p, the session ends on it.
func (s *Session) gpuTimesAttach(pid int) error {
	refuse := func(why string) { s.notMeasured(uint32(pid), why) }
	if s.cfg.CUPTIPath == "" {
		if _, err := findCUPTI(pid); err != nil {
			refuse(err.Error())
			return nil
		}
	}
	uid, gid := procOwner(pid)
	root := "/"
	if !sameRoot(pid) {
		root = fmt.Sprintf("/proc/%d/root", pid) // a container's
	}
	l, err := gputime.Listen(gputime.Config{Root: root, CUPTI: s.cfg.CUPTIPath, Attach: true, UID: uid, GID: gid, Join: os.Getenv("CUDATAP_GPU_JOIN")}, s)
	if err != nil {
		refuse(err.Error())
		if errors.Is(err, gputime.ErrPlanted) {
			return err
		}
		return nil
	}
	s.guard.Staged(root, l.Dir())
	s.logMisses()
	// The guardian borrows the process: were cudatap killed mid-call, it
	// still gives the thread back.
	s.gputimes.loading.Lock()
	_, err = s.guard.Inject(pid, l.LibraryPath())
	s.gputimes.loading.Unlock()
	if err != nil {
		s.stopListener(l, 0)
		refuse(fmt.Sprintf("load the collector: %v", err))
		return nil
	}
	s.gputimes.mu.Lock()
	s.gputimes.listeners = append(s.gputimes.listeners, l)
	if s.gputimes.byPID == nil {
		s.gputimes.byPID = map[int]*gputime.Listener{}
	}
	s.gputimes.byPID[pid] = l
	s.gputimes.mu.Unlock()
	// The collector sets CUPTI up on a thread of its own: wait for its
	// word, so that "attached" means measured from here on.
	select {
	case <-l.Ready():
	case <-time.After(collectorReadyTimeout):
		s.log.Warn("--gpu-times: the collector has not reported yet; GPU ops are measured once it does", "pid", pid, "waited", collectorReadyTimeout)
	}
	return nil
}

// collectorReadyTimeout bounds the wait for a loaded collector's first
// word (loading CUPTI takes a fraction of a second on the H200).
const collectorReadyTimeout = 10 * time.Second

// findCUPTI finds the CUPTI a running process would use, as the collector
// will (csrc/collector.c, find_cupti): one it mapped already, one next to
// its libcudart, the toolkit's. The path is the process's own.
func findCUPTI(pid int) (string, error) {
	maps, err := objfile.ReadMaps(pid)
	if err != nil {
		return "", err
	}
	var cands []string
	for _, o := range objfile.ObjectFiles(maps) {
		base := filepath.Base(o.Path)
		if strings.HasPrefix(base, "libcupti.so") {
			return o.Path, nil
		}
		if strings.HasPrefix(base, "libcudart.so") {
			d := filepath.Dir(o.Path)
			cands = append(cands, filepath.Join(d, "libcupti.so.13"), filepath.Join(d, "libcupti.so.12"),
				filepath.Join(d, "../../cuda_cupti/lib/libcupti.so.12"))
		}
	}
	cands = append(cands, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", "/usr/local/cuda/lib64/libcupti.so",
		"/usr/lib/x86_64-linux-gnu/libcupti.so")
	for _, c := range cands {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", pid, c)); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("no CUPTI found for this process (looked for %s): install the CUDA toolkit's CUPTI or pip's nvidia-cuda-cupti in its environment, or give --cupti PATH",
		strings.Join(cands, ", "))
}

// sameRoot says whether pid sees the same root directory as cudatap (not
// a container's): then its /tmp is cudatap's, reachable after it exits.
func sameRoot(pid int) bool {
	var a, b unix.Stat_t
	if unix.Stat("/", &a) != nil || unix.Stat(fmt.Sprintf("/proc/%d/root", pid), &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// procOwner is the real uid and gid a process runs as (-1, -1 unknown).
func procOwner(pid int) (uid, gid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1, -1
	}
	uid, gid = -1, -1
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Uid:":
			uid, _ = strconv.Atoi(f[1])
		case "Gid:":
			gid, _ = strconv.Atoi(f[1])
		}
	}
	return uid, gid
}
