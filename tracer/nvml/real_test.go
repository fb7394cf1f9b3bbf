package nvml_test

import (
	"errors"
	"math"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/nvml"
)

func monoNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// realSampler opens the machine's NVML, or skips (CI machines have none).
func realSampler(t testing.TB, opts nvml.Options) *nvml.Sampler {
	t.Helper()
	s, err := nvml.New(opts)
	if errors.Is(err, nvml.ErrNVMLUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRealNVML runs on a GPU machine only: every H200 field is read, and
// the driver's buffered samples land between New and the poll on the
// monotonic clock (which checks that NVML stamps them in wall-clock µs).
func TestRealNVML(t *testing.T) {
	s := realSampler(t, nvml.Options{})
	off, bound := s.ClockOffset()
	t.Logf("driver %s, devices %+v, clock offset %d ± %d ns", s.Driver(), s.Devices(), off, bound)
	var start uint64
	var dur time.Duration
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	polls := 0
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		samples, events, err := s.Poll()
		dur += time.Since(t0)
		after := monoNow() // a buffered sample can be newer than the poll's start, not than its end
		polls++
		if err != nil {
			t.Fatal(err)
		}
		if start == 0 && len(samples) > 0 {
			start = samples[0].TS
		}
		for _, smp := range samples {
			if i%5 == 0 || i == 19 {
				t.Logf("poll %d GPU %d: util %.1f%% mem %.1f%% (%d points) mem %d/%d temp %.0f power %.1f/%.0f W clocks %d/%d PCIe rx %.3g tx %.3g B/s reasons %v procs %+v",
					i, smp.Device, smp.GPUUtil, smp.MemUtil, len(smp.Util), smp.MemUsed, smp.MemTotal, smp.TempC, smp.PowerW, smp.PowerLimitW,
					smp.SMClockMHz, smp.MemClockMHz, smp.PCIeRxBps, smp.PCIeTxBps, smp.ThrottleReasons, smp.Processes)
			}
			if smp.MemTotal == 0 || math.IsNaN(smp.GPUUtil) || smp.SMClockMHz == 0 {
				t.Errorf("GPU %d: missing basics: %+v", smp.Device, smp)
			}
			for _, p := range smp.Util {
				// the first poll reaches one second back; none may be in the future
				if p.TS > after+uint64(bound) || p.TS+uint64(1100*time.Millisecond) < start {
					t.Errorf("GPU %d: buffered sample at %d outside [%d-1.1s, %d]", smp.Device, p.TS, start, after)
				}
			}
		}
		for _, e := range events {
			t.Logf("event %+v", e)
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()+ru1.Stime.Nano()-ru0.Stime.Nano()) / time.Duration(polls)
	t.Logf("mean poll %v wall, %v CPU (user+sys); notes %q", dur/time.Duration(polls), cpu, s.Notes())
}
