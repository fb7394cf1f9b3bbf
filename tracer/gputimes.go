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

	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/tracer/gputime"
	"github.com/cudatap/cudatap/tracer/model"
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
)

type gpuNote struct {
	kind gpuNoteKind
	pid  uint32
	t    uint64 // mark: its time; stop: records lost
	m    model.Measurement
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
	inflight  sync.WaitGroup            // loads started by gpuTimesAdopted
	closed    bool                      // stopGPUTimes ran: no new listener
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
// it (at cuInit, before any work reaches the GPU).
func (s *Session) gpuTimesForLaunch(env []string) (string, error) {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CUDA_INJECTION64_PATH="); ok && v != "" {
			return "", fmt.Errorf("--gpu-times: CUDA_INJECTION64_PATH is already set (%s): another tool injects itself into CUDA, "+
				"and the driver loads only one; unset it or leave out --gpu-times", v)
		}
	}
	// The command shares cudatap's root and runs as its user.
	l, err := gputime.Listen(gputime.Config{Root: "/", CUPTI: s.cfg.CUPTIPath, UID: -1, GID: -1}, s)
	if err != nil {
		return "", err
	}
	s.guard.staged("/", l.Dir())
	s.gputimes.mu.Lock()
	s.gputimes.listeners = append(s.gputimes.listeners, l)
	s.gputimes.mu.Unlock()
	return "CUDA_INJECTION64_PATH=" + l.LibraryPath(), nil
}

// stopGPUTimes asks every collector for its last records and to stop.
func (s *Session) stopGPUTimes() {
	s.gputimes.mu.Lock()
	s.gputimes.closed = true
	s.gputimes.mu.Unlock()
	s.gputimes.inflight.Wait() // loads under way finish (bounded by the collector's word)
	s.gputimes.mu.Lock()
	ls := s.gputimes.listeners
	s.gputimes.listeners = nil
	s.gputimes.mu.Unlock()
	for _, l := range ls {
		s.stopListener(l, 3*time.Second)
	}
}

func (s *Session) queueGPU(n gpuNote) {
	s.notesMu.Lock()
	if len(s.gpuNotes) >= maxGPUNotes && n.kind == gpuMeasure {
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
	if s.cfg.OnGPUTimes != nil {
		s.cfg.OnGPUTimes(pid, st)
	}
}

// The gputime.Sink methods, called on the listener's goroutines.

func (s *Session) Started(pid uint32, info string) {
	s.log.Info("GPU times measured by CUPTI", "pid", pid, "collector", info)
	s.queueGPU(gpuNote{kind: gpuStart, pid: pid})
	s.setGPUStatus(pid, "measured ("+info+")")
}

func (s *Session) Refused(pid uint32, why string) {
	s.log.Warn("GPU times not measured: ops are drawn within bounds", "pid", pid, "reason", why)
	s.setGPUStatus(pid, "not measured: "+why)
	s.queueGPU(gpuNote{kind: gpuStop, pid: pid}) // held since the launch: release them
}

// expectGPUTimes: the process cudatap is about to launch will load the
// collector at its first CUDA call; its ops wait for their measurement
// from the start (the collector's hello races the first events).
func (s *Session) expectGPUTimes(pid int) {
	s.queueGPU(gpuNote{kind: gpuStart, pid: uint32(pid)})
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
	s.modelMu.Lock()
	for i := range ns {
		n := &ns[i]
		switch n.kind {
		case gpuStart:
			s.model.StartMeasuring(n.pid)
		case gpuMeasure:
			s.model.Measure(n.pid, &n.m)
		case gpuMark:
			s.model.MeasuredUntil(n.pid, n.t)
		case gpuStop:
			s.model.AddGPUTimesLost(n.t)
			s.model.StopMeasuring(n.pid)
		}
	}
	s.modelMu.Unlock()
	if s.rec == nil {
		return
	}
	for i := range ns {
		n := &ns[i]
		switch n.kind {
		case gpuStart:
			s.rec.GPUTimes(recording.GPUTimesStart, n.pid, 0, nil)
		case gpuMeasure:
			s.rec.GPUTimes(recording.GPUTimesMeasure, n.pid, 0, &n.m)
		case gpuMark:
			s.rec.GPUTimes(recording.GPUTimesMark, n.pid, n.t, nil)
		case gpuStop:
			s.rec.GPUTimes(recording.GPUTimesStop, n.pid, n.t, nil)
		}
	}
}

// stopListener stops a collector's listener, which removes its directory,
// and tells the guardian it need not.
func (s *Session) stopListener(l *gputime.Listener, timeout time.Duration) {
	l.Stop(timeout)
	s.guard.unstaged(l.Root(), l.Dir())
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
	s.gputimes.mu.Unlock()
	if l != nil {
		go s.stopListener(l, time.Second) // its collector is gone with it: nothing to wait for
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
	refuse := func(why string) {
		s.log.Warn("--gpu-times: not measuring this process: its GPU ops are drawn within bounds", "pid", pid, "reason", why)
		s.setGPUStatus(uint32(pid), "not measured: "+why)
	}
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
	l, err := gputime.Listen(gputime.Config{Root: root, CUPTI: s.cfg.CUPTIPath, Attach: true, UID: uid, GID: gid}, s)
	if err != nil {
		refuse(err.Error())
		if errors.Is(err, gputime.ErrPlanted) {
			return err
		}
		return nil
	}
	s.guard.staged(root, l.Dir())
	// The guardian borrows the process: were cudatap killed mid-call, it
	// still gives the thread back.
	s.gputimes.loading.Lock()
	_, err = s.guard.inject(pid, l.LibraryPath())
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
