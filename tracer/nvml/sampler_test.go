package nvml_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/nvml"
	"github.com/cudatap/cudatap/tracer/nvml/nvmlmock"
)

const gib = 1 << 30

func newSampler(t testing.TB, srv *nvmlmock.Server, opts nvml.Options) *nvml.Sampler {
	t.Helper()
	opts.Lib = srv
	if opts.BufferInterval == 0 {
		opts.BufferInterval = time.Nanosecond // drain at every poll
	}
	if opts.Clock == nil {
		opts.Clock = srv.Clock()
	}
	s, err := nvml.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func poll(t testing.TB, s *nvml.Sampler) ([]nvml.Sample, []nvml.Event) {
	t.Helper()
	samples, events, err := s.Poll()
	if err != nil {
		t.Fatal(err)
	}
	return samples, events
}

func TestDevices(t *testing.T) {
	srv := nvmlmock.NewH200(8)
	s := newSampler(t, srv, nvml.Options{})
	devs := s.Devices()
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	for i, d := range devs {
		if d.Index != i || d.Name != "NVIDIA H200" || d.UUID != srv.Devices[i].UUID ||
			d.MemTotal != 143771<<20 || d.PowerLimitW != 700 || d.MaxSMClock != 1980 {
			t.Errorf("device %d = %+v", i, d)
		}
	}
	if s.Driver() != "580.95.05" {
		t.Errorf("driver %q", s.Driver())
	}
	if s.Interval() != 100*time.Millisecond {
		t.Errorf("default interval %v", s.Interval())
	}
}

func TestPollFields(t *testing.T) {
	srv := nvmlmock.NewH200(8)
	s := newSampler(t, srv, nvml.Options{})
	d := srv.Devices[3]
	d.GPUUtil, d.MemUtil = 87, 45
	d.MemUsed = 60 * gib
	d.TempC, d.PowerMW, d.SMClockMHz = 54, 512_345, 1980
	d.PCIeTxKBs, d.PCIeRxKBs = 2_000_000, 500_000
	d.ClockReasons = gonvml.ClocksEventReasonSwPowerCap
	d.Procs = []nvmlmock.Proc{{PID: 4123, MemUsed: 59 * gib, SMUtil: 85}, {PID: 77, MemUsed: 512 << 20, SMUtil: 0}}

	srv.Advance(time.Second)
	samples, events := poll(t, s)
	if len(samples) != 8 || len(events) != 0 {
		t.Fatalf("%d samples, %d events", len(samples), len(events))
	}
	for i, smp := range samples {
		if smp.Device != i || smp.TS != srv.Mono() {
			t.Errorf("sample %d: device %d ts %d, want ts %d", i, smp.Device, smp.TS, srv.Mono())
		}
	}
	g := samples[3]
	if g.UUID != d.UUID || g.Name != "NVIDIA H200" {
		t.Errorf("identity %q %q", g.UUID, g.Name)
	}
	if g.GPUUtil != 87 || g.MemUtil != 45 {
		t.Errorf("util %v/%v, want 87/45", g.GPUUtil, g.MemUtil)
	}
	if len(g.Util) != 5 { // 1 s of a 200 ms sample period
		t.Errorf("%d buffered utilization points, want 5", len(g.Util))
	}
	if g.MemUsed != 60*gib || g.MemTotal != 143771<<20 {
		t.Errorf("memory %d / %d", g.MemUsed, g.MemTotal)
	}
	if g.TempC != 54 || g.PowerW != 512.345 || g.PowerLimitW != 700 || g.SMClockMHz != 1980 || g.SMClockMaxMHz != 1980 || g.MemClockMHz != 3201 {
		t.Errorf("temp %v power %v/%v clocks %d/%d", g.TempC, g.PowerW, g.PowerLimitW, g.SMClockMHz, g.MemClockMHz)
	}
	if !slices.Equal(g.ThrottleReasons, []string{"sw_power_cap"}) {
		t.Errorf("throttle reasons %v", g.ThrottleReasons)
	}
	if !math.IsNaN(g.PCIeTxBps) {
		t.Errorf("PCIe rate after one counter reading = %v, want NaN (no interval yet)", g.PCIeTxBps)
	}
	want := []nvml.ProcSample{{PID: 77, MemUsed: 512 << 20, SMUtil: 0}, {PID: 4123, MemUsed: 59 * gib, SMUtil: 85}}
	if !slices.Equal(g.Processes, want) {
		t.Errorf("processes %+v, want %+v", g.Processes, want)
	}
	if idle := samples[0]; idle.GPUUtil != 0 || !slices.Equal(idle.ThrottleReasons, []string{"gpu_idle"}) || len(idle.Processes) != 0 {
		t.Errorf("idle GPU: %+v", idle)
	}

	srv.Advance(100 * time.Millisecond)
	samples, _ = poll(t, s)
	g = samples[3]
	if math.Abs(g.PCIeTxBps-2_000_000*1024) > 1e3 || math.Abs(g.PCIeRxBps-500_000*1024) > 1e3 {
		t.Errorf("PCIe tx %v rx %v B/s, want %v / %v", g.PCIeTxBps, g.PCIeRxBps, 2_000_000*1024, 500_000*1024)
	}
	c := g.Counters()
	for _, k := range []string{"gpu_util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes", "temp_c", "power_w",
		"power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"} {
		if _, ok := c[k]; !ok {
			t.Errorf("counter %s missing: %v", k, c)
		}
	}
	if len(s.Notes()) != 0 {
		t.Errorf("notes on a healthy H200: %q", s.Notes())
	}
}

// The driver's sample buffer is read with lastSeenTimestamp: every entry is
// reported exactly once, and a poll with no new entry carries the last value.
func TestSampleBufferDedupe(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	d := srv.Devices[0]
	d.SamplePeriod = 0 // the test pushes entries itself
	s := newSampler(t, srv, nvml.Options{})

	t0 := srv.WallMicros()
	d.PushUtil(t0-2_000_000, 99, 99) // before the first poll's window (1 s): never reported
	d.PushUtil(t0+10_000, 10, 5)
	d.PushUtil(t0+30_000, 30, 15)
	srv.Advance(50 * time.Millisecond)
	samples, _ := poll(t, s)
	if g := samples[0]; g.GPUUtil != 20 || g.MemUtil != 10 || len(g.Util) != 2 {
		t.Fatalf("first poll: util %v/%v, %d points; want mean 20/10 of 2", g.GPUUtil, g.MemUtil, len(g.Util))
	}

	srv.Advance(100 * time.Millisecond)
	samples, _ = poll(t, s)
	if g := samples[0]; g.GPUUtil != 20 || g.MemUtil != 10 || len(g.Util) != 0 {
		t.Fatalf("no new entry: util %v/%v, %d points; want carried 20/10, no points", g.GPUUtil, g.MemUtil, len(g.Util))
	}

	d.PushUtil(t0+160_000, 90, 40)
	d.PushUtil(t0+170_000, 70, 60)
	srv.Advance(100 * time.Millisecond)
	samples, _ = poll(t, s)
	g := samples[0]
	if g.GPUUtil != 80 || g.MemUtil != 50 || len(g.Util) != 2 {
		t.Fatalf("third poll: util %v/%v, %d points; want 80/50 of 2 (old entries not repeated)", g.GPUUtil, g.MemUtil, len(g.Util))
	}
	if g.Util[0].GPUUtil != 90 || g.Util[1].MemUtil != 60 {
		t.Errorf("points %+v", g.Util)
	}
}

// By default the sample buffers are drained every 500 ms, not at every
// 100 ms poll: between drains the last values carry, and no buffered
// entry is lost.
func TestBufferInterval(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	d := srv.Devices[0]
	d.Procs = []nvmlmock.Proc{{PID: 5, MemUsed: gib, SMUtil: 50}}
	srv.Advance(time.Second) // a second of history in the buffers
	s := newSampler(t, srv, nvml.Options{BufferInterval: -1})
	var points []uint64
	var drains []int
	for i := 0; i < 30; i++ {
		d.Set(func(d *nvmlmock.Device) { d.GPUUtil = uint32(i) })
		srv.Advance(100 * time.Millisecond)
		samples, _ := poll(t, s)
		g := samples[0]
		if len(g.Util) > 0 {
			drains = append(drains, i)
		}
		for _, p := range g.Util {
			points = append(points, p.TS)
		}
		if math.IsNaN(g.GPUUtil) || g.Processes[0].SMUtil != 50 {
			t.Errorf("poll %d: util %v, processes %+v", i, g.GPUUtil, g.Processes)
		}
	}
	if !slices.Equal(drains, []int{0, 5, 10, 15, 20, 25}) {
		t.Errorf("drained at polls %v, want every 5th", drains)
	}
	// from 1 s before New to the last drain 2.6 s after it, one entry each
	// 200 ms: 18 entries, each once, in order
	if len(points) != 18 || !slices.IsSorted(points) {
		t.Errorf("%d points: %v", len(points), points)
	}
}

// Per-process SM utilization comes from the driver's process sample buffer
// the same way: each sample once, the last value carried while samples are
// due, 0 once a process has had none for 2 s.
func TestProcessUtilization(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	d := srv.Devices[0]
	d.SamplePeriod = 0
	d.Procs = []nvmlmock.Proc{{PID: 5, MemUsed: 8 * gib}, {PID: 6, MemUsed: gib}}
	s := newSampler(t, srv, nvml.Options{})
	t0 := srv.WallMicros()
	d.PushProcUtil(t0+10_000, 5, 60, 0)
	d.PushProcUtil(t0+40_000, 5, 80, 0)
	d.PushProcUtil(t0+40_000, 9, 20, 0) // a process NVML does not list (graphics context)
	srv.Advance(50 * time.Millisecond)
	samples, _ := poll(t, s)
	want := []nvml.ProcSample{{PID: 5, MemUsed: 8 * gib, SMUtil: 70}, {PID: 6, MemUsed: gib, SMUtil: 0}, {PID: 9, SMUtil: 20}}
	if got := samples[0].Processes; !slices.Equal(got, want) {
		t.Fatalf("poll 1: %+v, want %+v", got, want)
	}
	srv.Advance(100 * time.Millisecond)
	samples, _ = poll(t, s)
	want = []nvml.ProcSample{{PID: 5, MemUsed: 8 * gib, SMUtil: 70}, {PID: 6, MemUsed: gib, SMUtil: 0}}
	if got := samples[0].Processes; !slices.Equal(got, want) {
		t.Fatalf("poll 2 (no new sample: carried; 9 is gone): %+v, want %+v", got, want)
	}
	srv.Advance(3 * time.Second)
	samples, _ = poll(t, s)
	if got := samples[0].Processes; got[0].SMUtil != 0 {
		t.Fatalf("no sample for 3 s: %+v", got)
	}
}

// NVML µs wall timestamps become CLOCK_MONOTONIC ns with the measured offset.
func TestClockConversion(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	d := srv.Devices[0]
	d.SamplePeriod = 0
	s := newSampler(t, srv, nvml.Options{})
	off, bound := s.ClockOffset()
	if off != srv.WallOffset || bound != 500 {
		t.Fatalf("offset %d ± %d, want %d ± 500 (a frozen fake clock brackets exactly; 0.5 µs NVML resolution)", off, bound, srv.WallOffset)
	}
	us := srv.WallMicros() + 12_345
	d.PushUtil(us, 50, 25)
	srv.Advance(20 * time.Millisecond)
	samples, _ := poll(t, s)
	p := samples[0].Util
	wantTS := uint64(int64(us)*1000 + 500 - srv.WallOffset) // monotonic ns of that µs
	if len(p) != 1 || p[0].TS != wantTS {
		t.Fatalf("points %+v, want ts %d", p, wantTS)
	}
	if mono := srv.Mono(); p[0].TS > mono || mono-p[0].TS != uint64(20*time.Millisecond-12_345*time.Microsecond-500) {
		t.Errorf("point at %d, poll at %d", p[0].TS, mono)
	}

	// A wall clock step (NTP, settimeofday) re-aligns the offset.
	srv.WallOffset += int64(5 * time.Second)
	poll(t, s)
	if off, _ := s.ClockOffset(); off != srv.WallOffset {
		t.Errorf("after a 5 s step: offset %d, want %d", off, srv.WallOffset)
	}
	if n := s.Notes(); len(n) != 1 || !strings.Contains(n[0], "wall clock stepped by 5s") {
		t.Errorf("notes %q", n)
	}
}

// The offset keeps the tightest bracket of wall reads between monotonic reads.
func TestClockOffsetBracket(t *testing.T) {
	srv := nvmlmock.NewH200(1)
	var mu sync.Mutex
	var mono uint64 = 1_000_000_000
	calls := 0
	const wallOff = 1_700_000_000_000_000_000
	clock := func() (uint64, int64) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		step := uint64(300) // a slow read now and then
		if calls%7 == 0 {
			step = 40_000
		}
		mono += step
		return mono, int64(mono) + wallOff
	}
	s := newSampler(t, srv, nvml.Options{Clock: clock})
	off, bound := s.ClockOffset()
	// the wall read is taken 300 ns after m1 and 300 ns before m2: exact
	if off != wallOff || bound != 300+500 {
		t.Errorf("offset %d ± %d, want %d ± 800", off, bound, int64(wallOff))
	}

	// The system clocks: wall - mono, within the bound reported. A bracket
	// of our own, taken after, holds the true offset: the two intervals
	// meet, give or take what the kernel may slew the wall clock meanwhile
	// (at most 500 ppm of the time between).
	start := int64(monoNow())
	real, err := nvml.New(nvml.Options{Lib: nvmlmock.NewH200(1)})
	if err != nil {
		t.Fatal(err)
	}
	defer real.Close()
	off, bound = real.ClockOffset()
	m1 := int64(monoNow())
	var w unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &w)
	m2 := int64(monoNow())
	wall := w.Nano()
	slew := (m2 - start) / 2000
	if bound <= 0 { // unmeasured: MaxInt64 wrapped
		t.Fatalf("system clock: bound %d ns", bound)
	}
	if lo, hi := wall-m2, wall-m1; off+bound+slew < lo || off-bound-slew > hi {
		t.Errorf("system clock offset %d ± %d ns, outside [%d, %d] measured after it (slew %d ns)", off, bound, lo, hi, slew)
	}
}

func TestNotSupported(t *testing.T) {
	srv := nvmlmock.NewH200(2)
	d := srv.Devices[1]
	d.GPUUtil, d.MemUtil = 33, 11
	d.Procs = []nvmlmock.Proc{{PID: 9, MemUsed: gib, SMUtil: 40}}
	for _, m := range []string{"GetSamples", "GetPowerUsage", "GetTemperature", "GetFieldValues", "GetPcieThroughput", "GetProcessUtilization", "GetEnforcedPowerLimit"} {
		d.Fail(m, gonvml.ERROR_NOT_SUPPORTED)
	}
	d.Fail("GetCurrentClocksEventReasons", gonvml.ERROR_FUNCTION_NOT_FOUND) // driver before 535
	d.Fail("GetMemoryInfo_v2", gonvml.ERROR_FUNCTION_NOT_FOUND)
	d.MemUsed = 3 * gib
	d.ClockReasons = gonvml.ClocksThrottleReasonHwThermalSlowdown
	s := newSampler(t, srv, nvml.Options{})
	for i := 0; i < 3; i++ {
		srv.Advance(time.Second)
		samples, _ := poll(t, s)
		g := samples[1]
		if g.GPUUtil != 33 || g.MemUtil != 11 || g.Util != nil {
			t.Errorf("poll %d: no sample buffer: util %v/%v points %v, want GetUtilizationRates 33/11", i, g.GPUUtil, g.MemUtil, g.Util)
		}
		if !math.IsNaN(g.PowerW) || !math.IsNaN(g.TempC) || !math.IsNaN(g.PCIeRxBps) || !math.IsNaN(g.PCIeTxBps) {
			t.Errorf("poll %d: unsupported fields not NaN: %+v", i, g)
		}
		if g.PowerLimitW != 700 { // GetPowerManagementLimit still answers
			t.Errorf("power limit %v", g.PowerLimitW)
		}
		if g.MemUsed != 3*gib || g.MemTotal != 143771<<20 {
			t.Errorf("memory v1 fallback %d/%d", g.MemUsed, g.MemTotal)
		}
		if !slices.Equal(g.ThrottleReasons, []string{"hw_thermal_slowdown"}) {
			t.Errorf("throttle fallback %v", g.ThrottleReasons)
		}
		if len(g.Processes) != 1 || !math.IsNaN(g.Processes[0].SMUtil) || g.Processes[0].MemUsed != gib {
			t.Errorf("processes %+v", g.Processes)
		}
		c := g.Counters()
		for _, k := range []string{"power_w", "temp_c", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"} {
			if _, ok := c[k]; ok {
				t.Errorf("counter %s of an unsupported field: %v", k, c)
			}
		}
		if len(c) != 7 {
			t.Errorf("counters %v", c)
		}
		if h := samples[0]; math.IsNaN(h.PowerW) || math.IsNaN(h.TempC) {
			t.Errorf("GPU 0 lost fields: %+v", h)
		}
	}
	notes := s.Notes()
	want := []string{
		"GPU 1: enforced power limit: ERROR_NOT_SUPPORTED",
		"GPU 1: GPU utilization samples: ERROR_NOT_SUPPORTED",
		"GPU 1: memory utilization samples: ERROR_NOT_SUPPORTED",
		"GPU 1: temperature: ERROR_NOT_SUPPORTED",
		"GPU 1: power draw: ERROR_NOT_SUPPORTED",
		"GPU 1: process utilization: ERROR_NOT_SUPPORTED",
		"GPU 1: PCIe throughput: ERROR_NOT_SUPPORTED",
	}
	for _, w := range want {
		if n := countOf(notes, w); n != 1 {
			t.Errorf("note %q seen %d times in %q", w, n, notes)
		}
	}
	if len(notes) != len(want) {
		t.Errorf("notes %q", notes)
	}

	// Unsupported fields are not asked again.
	d.Fail("GetPowerUsage", gonvml.SUCCESS)
	srv.Advance(time.Second)
	samples, _ := poll(t, s)
	if !math.IsNaN(samples[1].PowerW) {
		t.Errorf("an unsupported field was read again")
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func TestNoNVML(t *testing.T) {
	srv := nvmlmock.NewH200(8)
	srv.InitReturn = gonvml.ERROR_LIBRARY_NOT_FOUND
	_, err := nvml.New(nvml.Options{Lib: srv})
	if !errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Fatalf("err %v does not wrap ErrNVMLUnavailable", err)
	}
	const want = "NVML not available: no NVIDIA driver found (libnvidia-ml.so.1); cudatap works without it, GPU counters are omitted"
	if err.Error() != want {
		t.Errorf("message\n %q\nwant\n %q", err, want)
	}

	for ret, part := range map[gonvml.Return]string{
		gonvml.ERROR_DRIVER_NOT_LOADED:       "kernel driver is not loaded",
		gonvml.ERROR_NO_PERMISSION:           "no permission to open /dev/nvidia*",
		gonvml.ERROR_LIB_RM_VERSION_MISMATCH: "does not match the loaded kernel driver",
		gonvml.ERROR_UNKNOWN:                 "nvmlInit failed: ERROR_UNKNOWN",
	} {
		srv.InitReturn = ret
		_, err := nvml.New(nvml.Options{Lib: srv})
		if !errors.Is(err, nvml.ErrNVMLUnavailable) || !strings.Contains(err.Error(), part) {
			t.Errorf("%v: %v", ret, err)
		}
	}

	// A driver with no GPU (a container without the device).
	empty := nvmlmock.NewH200(0)
	if _, err := nvml.New(nvml.Options{Lib: empty}); !errors.Is(err, nvml.ErrNVMLUnavailable) || !strings.Contains(err.Error(), "no NVIDIA GPU visible") {
		t.Errorf("no GPU: %v", err)
	}
	if empty.Shutdowns() != 1 {
		t.Errorf("NVML initialized but not shut down")
	}

	// The real library: absent on the CI machines, present on the GPU machine.
	s, err := nvml.New(nvml.Options{})
	if err == nil {
		t.Logf("real NVML present: %d GPU(s), driver %s", len(s.Devices()), s.Driver())
		s.Close()
		return
	}
	if !errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Fatalf("real NVML: %v", err)
	}
	t.Logf("real NVML: %v", err)
}

func TestEvents(t *testing.T) {
	srv := nvmlmock.NewH200(8)
	s := newSampler(t, srv, nvml.Options{})
	srv.InjectXid(2, 79) // GPU has fallen off the bus
	srv.InjectECC(5)
	srv.Advance(100 * time.Millisecond)
	_, events := poll(t, s)
	want := []nvml.Event{
		{TS: srv.Mono(), Device: 2, Kind: "xid", Data: 79},
		{TS: srv.Mono(), Device: 5, Kind: "ecc_double_bit"},
	}
	if !slices.Equal(events, want) {
		t.Errorf("events %+v, want %+v", events, want)
	}
	if _, events = poll(t, s); len(events) != 0 {
		t.Errorf("events seen twice: %+v", events)
	}
}

func TestEventsUnsupported(t *testing.T) {
	srv := nvmlmock.NewH200(2)
	for _, d := range srv.Devices {
		d.Fail("RegisterEvents", gonvml.ERROR_NO_PERMISSION)
	}
	s := newSampler(t, srv, nvml.Options{})
	srv.InjectXid(0, 13)
	if _, events := poll(t, s); len(events) != 0 {
		t.Errorf("events %v", events)
	}
	if n := s.Notes(); len(n) != 2 || !strings.Contains(n[0], "Xid/ECC events: ERROR_NO_PERMISSION") {
		t.Errorf("notes %q", n)
	}
}

// Without PCIe byte counters the sampler reads GetPcieThroughput, which
// blocks ~20 ms in the driver: one device per poll, each at most once a second.
func TestPCIeThroughputFallback(t *testing.T) {
	srv := nvmlmock.NewH200(2)
	for i, d := range srv.Devices {
		d.Fail("FI_DEV_PCIE_COUNT", gonvml.ERROR_NOT_SUPPORTED)
		d.PCIeTxKBs, d.PCIeRxKBs = uint32(1000*(i+1)), uint32(10*(i+1))
	}
	s := newSampler(t, srv, nvml.Options{})
	step := func() []nvml.Sample {
		srv.Advance(100 * time.Millisecond)
		samples, _ := poll(t, s)
		return samples
	}
	smp := step()
	if !math.IsNaN(smp[0].PCIeTxBps) || !math.IsNaN(smp[1].PCIeTxBps) {
		t.Fatalf("poll 1: %v %v", smp[0].PCIeTxBps, smp[1].PCIeTxBps)
	}
	smp = step()
	if smp[0].PCIeTxBps != 1000*1024 || smp[0].PCIeRxBps != 10*1024 || !math.IsNaN(smp[1].PCIeTxBps) {
		t.Fatalf("poll 2 reads GPU 0 only: %v %v", smp[0].PCIeTxBps, smp[1].PCIeTxBps)
	}
	srv.Devices[0].PCIeTxKBs = 7
	smp = step()
	if smp[0].PCIeTxBps != 1000*1024 || smp[1].PCIeTxBps != 2000*1024 {
		t.Fatalf("poll 3 reads GPU 1, carries GPU 0: %v %v", smp[0].PCIeTxBps, smp[1].PCIeTxBps)
	}
	for i := 0; i < 8; i++ { // polls 4..11, up to 900 ms after poll 2
		smp = step()
	}
	if smp[0].PCIeTxBps != 1000*1024 {
		t.Fatalf("GPU 0 re-read before a second passed: %v", smp[0].PCIeTxBps)
	}
	smp = step() // poll 12: 1 s after poll 2
	if smp[0].PCIeTxBps != 7*1024 {
		t.Fatalf("GPU 0 not re-read after a second: %v", smp[0].PCIeTxBps)
	}
}

func TestPIDFilterAndLostGPU(t *testing.T) {
	srv := nvmlmock.NewH200(2)
	srv.Devices[0].Procs = []nvmlmock.Proc{{PID: 1, MemUsed: gib, SMUtil: 10}, {PID: 2, MemUsed: 2 * gib, SMUtil: 20}}
	s := newSampler(t, srv, nvml.Options{PID: func(pid uint32) bool { return pid == 2 }})
	srv.Advance(time.Second)
	samples, _ := poll(t, s)
	if p := samples[0].Processes; len(p) != 1 || p[0].PID != 2 || p[0].SMUtil != 20 {
		t.Errorf("filtered processes %+v", p)
	}

	srv.Devices[1].Fail("GetPowerUsage", gonvml.ERROR_GPU_IS_LOST)
	samples, events := poll(t, s)
	if len(samples) != 1 || len(events) != 1 || events[0].Kind != "gpu_lost" || events[0].Device != 1 {
		t.Fatalf("lost GPU: %d samples, events %+v", len(samples), events)
	}
	samples, events = poll(t, s)
	if len(samples) != 1 || len(events) != 0 {
		t.Fatalf("after loss: %d samples, events %+v", len(samples), events)
	}
}

func TestRunAndClose(t *testing.T) {
	srv := nvmlmock.NewH200(2)
	var mu sync.Mutex
	var got []nvml.Sample
	var events []nvml.Event
	s := newSampler(t, srv, nvml.Options{Interval: 5 * time.Millisecond, OnEvent: func(e nvml.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}})
	srv.InjectXid(1, 48)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		s.Run(ctx, func(smp nvml.Sample) {
			mu.Lock()
			got = append(got, smp)
			n := len(got)
			mu.Unlock()
			srv.Advance(5 * time.Millisecond)
			if n >= 10 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop")
	}
	mu.Lock()
	if len(got) < 10 || len(events) != 1 || events[0].Data != 48 {
		t.Errorf("%d samples, events %+v", len(got), events)
	}
	mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Poll(); err == nil {
		t.Error("Poll after Close succeeded")
	}
	if srv.Shutdowns() != 1 {
		t.Errorf("%d shutdowns", srv.Shutdowns())
	}
	s.Run(context.Background(), func(nvml.Sample) { t.Error("Run after Close sampled") }) // returns at once
}

// BenchmarkPoll is the sampler's cost per poll (every field, processes,
// events) against the mock: NVML's own time per call is not included. The
// "real" case polls the machine's GPUs (skipped without NVML).
func BenchmarkPoll(b *testing.B) {
	// real/light: the polls between buffer drains; real/drain: a poll that
	// also drains the three sample buffers of every GPU.
	for name, every := range map[string]time.Duration{"real/light": time.Hour, "real/drain": time.Nanosecond} {
		b.Run(name, func(b *testing.B) {
			s := realSampler(b, nvml.Options{Interval: time.Nanosecond, BufferInterval: every})
			s.Poll() // the first poll always drains
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := s.Poll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("%dxH200", n), func(b *testing.B) {
			srv := nvmlmock.NewH200(n)
			for i, d := range srv.Devices {
				d.GPUUtil, d.MemUtil, d.PCIeTxKBs, d.PCIeRxKBs = 90, 40, 1000, 2000
				d.Procs = []nvmlmock.Proc{{PID: uint32(4000 + i), MemUsed: 60 * gib, SMUtil: 88}}
			}
			s := newSampler(b, srv, nvml.Options{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				srv.Advance(100 * time.Millisecond) // ~1 new buffer entry per device and buffer
				b.StartTimer()
				if _, _, err := s.Poll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
