package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/nvml"
)

const (
	gib       = 1 << 30
	h200Total = 143771 << 20 // an H200's memory as NVML reports it
)

func renderSamples() []nvml.Sample {
	nan := math.NaN()
	return []nvml.Sample{
		{Device: 0, UUID: "GPU-8f1c0d2e-5a3b-4c6d-9e7f-a0b0c0d00000", Name: "NVIDIA H200", GPUUtil: 87, MemUtil: 45,
			MemUsed: 60 * gib, MemTotal: h200Total, TempC: 54, PowerW: 512.3, PowerLimitW: 700, SMClockMHz: 1980, MemClockMHz: 3201,
			PCIeRxBps: 1.5e9, PCIeTxBps: 2e6, ThrottleReasons: []string{"sw_power_cap"},
			Processes: []nvml.ProcSample{{PID: 4123, MemUsed: 59 * gib, SMUtil: 85}, {PID: 31337, MemUsed: 512 << 20, SMUtil: nan}}},
		{Device: 1, UUID: "GPU-8f1c0d2e-5a3b-4c6d-9e7f-a0b0c0d00001", Name: "NVIDIA H200", GPUUtil: 0, MemUtil: 0,
			MemUsed: 540 << 20, MemTotal: h200Total, TempC: nan, PowerW: nan, PowerLimitW: nan, MemClockMHz: 3201,
			PCIeRxBps: nan, PCIeTxBps: nan, ThrottleReasons: []string{"gpu_idle"}},
	}
}

func testProcInfo(pid uint32) procInfo {
	if pid == 4123 {
		return procInfo{Comm: "python3", Container: "0123456789ab (trainer-0)"}
	}
	return procInfo{}
}

func TestRenderGPUs(t *testing.T) {
	var b bytes.Buffer
	if err := renderGPUs(&b, "580.95.05", renderSamples(), testProcInfo); err != nil {
		t.Fatal(err)
	}
	want := `NVIDIA driver 580.95.05, 2 GPU(s)

GPU  NAME         UUID                                      UTIL  MEM UTIL  MEMORY                  TEMP  POWER        SM CLOCK  MEM CLOCK  THROTTLE
0    NVIDIA H200  GPU-8f1c0d2e-5a3b-4c6d-9e7f-a0b0c0d00000  87%   45%       60.0 / 140.4 GiB (43%)  54°C  512 / 700 W  1980 MHz  3201 MHz   sw_power_cap
1    NVIDIA H200  GPU-8f1c0d2e-5a3b-4c6d-9e7f-a0b0c0d00001  0%    0%        0.5 / 140.4 GiB (0%)    n/a   n/a          n/a       3201 MHz   -

GPU  PID    PROCESS  CONTAINER                 MEMORY     SM UTIL
0    4123   python3  0123456789ab (trainer-0)  59.0 GiB   85%
0    31337  -        -                         512.0 MiB  n/a
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	b.Reset()
	samples := renderSamples()
	samples[0].Processes = nil
	renderGPUs(&b, "", samples, nil)
	if !strings.HasSuffix(b.String(), "\nNo process is using the GPUs.\n") || strings.Contains(b.String(), "driver") {
		t.Errorf("no processes:\n%s", b.String())
	}
}

func TestTopLines(t *testing.T) {
	r := &topRenderer{Driver: "580.95.05", Proc: testProcInfo, PIDs: []uint32{4123},
		Extra: func() []string {
			return []string{"pid 4123  stream 7  launches/s 12.3k  copy 4.1 GB/s  sync 31%  queue 17"}
		}}
	now := time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC)
	lines := r.Lines(now, renderSamples())
	want := []string{
		"cudatap top  12:00:01  2 GPU(s)  driver 580.95.05",
		"",
		"GPU UTIL               MEM UTIL MEMORY                   POWER           TEMP   SM CLOCK  MEM CLOCK PCIE RX / TX          THROTTLE",
		"0   [#########.]  87%  45%      60.0 / 140.4 GiB (43%)   512 / 700 W     54°C   1980 MHz  3201 MHz  1.5 GB/s / 2.0 MB/s   sw_power_cap",
		"1   [..........]   0%  0%       0.5 / 140.4 GiB (0%)     n/a             n/a    n/a       3201 MHz  n/a / n/a             -",
		"",
		"GPU PID      PROCESS          CONTAINER                        MEMORY     SM UTIL",
		"0   4123     python3          0123456789ab (trainer-0)         59.0 GiB   85%",
		"",
		"pid 4123  stream 7  launches/s 12.3k  copy 4.1 GB/s  sync 31%  queue 17",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range lines {
		if strings.ContainsRune(l, '\x1b') {
			t.Errorf("escape sequence in a plain line: %q", l)
		}
	}

	// no NVML: the warning and the tracer's lines still show
	r = &topRenderer{Warning: "NVML not available: ...", Extra: func() []string { return []string{"x"} }}
	lines = r.Lines(now, nil)
	if strings.Join(lines, "|") != "cudatap top  12:00:01  0 GPU(s)|NVML not available: ...||x" {
		t.Errorf("no NVML: %q", lines)
	}
	// a selected process without GPU memory
	r = &topRenderer{PIDs: []uint32{5}}
	lines = r.Lines(now, renderSamples())
	if lines[len(lines)-1] != "The selected processes hold no GPU memory." {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
}
