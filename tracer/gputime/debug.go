package gputime

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// A diagnosis of the join: CUDATAP_GPUTIME_DEBUG=DIR writes, per process,
// DIR/gputime-PID.tsv: every call record (callbacks or API records) and GPU
// record its collector sent, the marks, and the GPU records given up on
// for want of their call's record; the first maxDebugLines of each kind.
// Lines are tab-separated, times CLOCK_MONOTONIC ns:
//
//	call  corr tid domain(runtime|driver) cbid start end
//	gpu   kind(kernel|memcpy|memset) corr device stream start end bytes name
//	noapi kind corr start end
//	mark  time
//	hello text
//
// Any other value (not a directory that can be made) only prints the
// first impossible records of each process to stderr.
var debugDir = os.Getenv("CUDATAP_GPUTIME_DEBUG")

var debug = debugDir != ""

const maxDebugLines = 200_000

// DebugDir is where the diagnosis goes ("" when off).
func DebugDir() string { return debugDir }

type debugLog struct {
	f     *os.File
	w     *bufio.Writer
	lines map[string]int
}

// openDebug opens pid's diagnosis file, nil when not asked for (or it
// cannot be made: said once on stderr).
func openDebug(pid uint32) *debugLog {
	if debugDir == "" {
		return nil
	}
	if err := os.MkdirAll(debugDir, 0o755); err != nil {
		return nil
	}
	f, err := os.Create(filepath.Join(debugDir, fmt.Sprintf("gputime-%d.tsv", pid)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gputime: the diagnosis cannot be written: %v\n", err)
		return nil
	}
	return &debugLog{f: f, w: bufio.NewWriterSize(f, 1<<16), lines: map[string]int{}}
}

// line writes one line of kind, past the bound nothing (counted at close).
func (d *debugLog) line(kind string, format string, args ...any) {
	if d == nil {
		return
	}
	d.lines[kind]++
	if d.lines[kind] > maxDebugLines {
		return
	}
	d.w.WriteString(kind)
	d.w.WriteByte('\t')
	fmt.Fprintf(d.w, format, args...)
	d.w.WriteByte('\n')
}

func (d *debugLog) close() {
	if d == nil {
		return
	}
	for k, n := range d.lines {
		if n > maxDebugLines {
			fmt.Fprintf(d.w, "cut\t%s\t%d\n", k, n-maxDebugLines)
		}
	}
	d.w.Flush()
	d.f.Close()
}

var kindNames = [...]string{recAPI: "api", recKernel: "kernel", recMemcpy: "memcpy", recMemset: "memset"}

func kindName(k byte) string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprint(k)
}
