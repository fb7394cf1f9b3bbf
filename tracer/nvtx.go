package tracer

// NVTX (issue 27 item 5, docs/steps.md): the command cudatap launches gets
// NVTX_INJECTION64_PATH naming the collector library (tracer/gputime),
// with or without GPU times: at a process's first NVTX call, NVTX loads it,
// and the ranges and marks come over the collector directory's NVTX
// socket. The reader handles and records each as it does a probe's
// record, so a replay draws them alike.

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cudatap/cudatap/tracer/gputime"
)

// nvtxForLaunch returns the environment entry that has the launched
// command's NVTX load cudatap's collector: the GPU times' listener's, or
// one of its own (NVTX needs no CUPTI). "" when another tool's injection
// library is set already (NVTX loads one): then only NVTX libraries with
// symbols to hook are seen (docs/steps.md), and the run says so.
func (s *Session) nvtxForLaunch(env []string) (string, error) {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "NVTX_INJECTION64_PATH="); ok && v != "" {
			s.log.Warn("NVTX_INJECTION64_PATH is already set: another tool takes the program's NVTX ranges, and NVTX loads one; "+
				"cudatap draws only those of NVTX libraries it can hook (libnvToolsExt, torch.cuda.nvtx): unset it for all", "path", v)
			return "", nil
		}
	}
	s.gputimes.mu.Lock()
	var l *gputime.Listener
	if s.gputimes.launched && len(s.gputimes.listeners) > 0 {
		l = s.gputimes.listeners[len(s.gputimes.listeners)-1] // made for this launch
	}
	s.gputimes.mu.Unlock()
	if l == nil {
		var err error
		if l, err = gputime.Listen(gputime.Config{Root: "/", UID: -1, GID: -1}, s); err != nil {
			return "", fmt.Errorf("NVTX: %w", err)
		}
		s.guard.Staged("/", l.Dir())
		s.gputimes.mu.Lock()
		s.gputimes.listeners = append(s.gputimes.listeners, l)
		s.gputimes.mu.Unlock()
	}
	// The injection sees every NVTX call of the tree: probes on an NVTX
	// library would draw each range twice.
	s.targets.NVTXInjected()
	return "NVTX_INJECTION64_PATH=" + l.LibraryPath(), nil
}

// NVTX queues an NVTX call of a launched process for the reader
// (gputime.NVTXSink); one made after the probes closed is outside the
// recording.
func (s *Session) NVTX(pid uint32, raw []byte) {
	if end := s.tracingEnd.Load(); end != 0 && len(raw) >= 8 && binary.LittleEndian.Uint64(raw) > end {
		return
	}
	s.queueGPU(gpuNote{kind: gpuNVTX, pid: pid, raw: raw})
}

// NVTXDone says what a process's NVTX side could not send
// (gputime.NVTXSink).
func (s *Session) NVTXDone(pid uint32, lost uint64) {
	if lost > 0 {
		s.log.Warn("NVTX calls lost: the collector could not send them in time (the trace lacks some ranges)", "pid", pid, "lost", lost)
	}
}

// applyNVTX handles the NVTX calls among ns as probes' records, in order,
// and returns the other notes.
func (s *Session) applyNVTX(ns []gpuNote) []gpuNote {
	rest := ns[:0]
	for i := range ns {
		if ns[i].kind == gpuNVTX {
			s.handleEvent(ns[i].raw)
			continue
		}
		rest = append(rest, ns[i])
	}
	return rest
}
