// Package nvmlmock is an NVML server for tests: NVIDIA H200 GPUs built on
// go-nvml's generated mocks (mock.Interface, mock.Device, mock.EventSet),
// with the telemetry the sampler reads (utilization sample buffers, memory,
// power, clocks, PCIe, clock event reasons, processes, Xid events) and a
// fake clock that drives it.
//
// go-nvml ships a dgxh200 server, but it answers none of the telemetry calls
// (they panic as unset mocks), names the GPU "NVIDIA H200 141GB HBM3e" and
// pulls in github.com/google/uuid; this one is what an H200 SXM answers.
//
// The hot calls are methods of *Device itself (not the moq Func fields) so a
// poll does not grow the mocks' call history; every other nvml.Device method
// falls through to mock.Device and panics when called, which flags a call the
// sampler was not expected to make.
package nvmlmock

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// H200 SXM values as nvidia-smi shows them.
const (
	H200Name         = "NVIDIA H200"
	H200MemoryMiB    = 143771
	H200PowerLimitMW = 700_000
	H200MaxSMClock   = 1980
	H200MaxMemClock  = 3201
)

// DefaultSamplePeriod is how often a device appends to its utilization
// sample buffers: about every 200 ms on an H200 with driver 580 (NVML
// documents 1/6 s to 1 s depending on the product).
const DefaultSamplePeriod = 200 * time.Millisecond

// bufferCap is how many entries each sample buffer keeps: 71 on that H200
// (about 14 s).
const bufferCap = 71

// Server is an NVML library with H200 devices.
type Server struct {
	mock.Interface

	mu         sync.Mutex
	Devices    []*Device
	InitReturn nvml.Return // what Init answers (SUCCESS by default)
	Driver     string

	mono       int64 // fake CLOCK_MONOTONIC, ns
	WallOffset int64 // fake CLOCK_REALTIME - CLOCK_MONOTONIC, ns

	events   []nvml.EventData
	eventSet *EventSet
	shutdown int
}

var (
	_ nvml.Interface = (*Server)(nil)
	_ nvml.Device    = (*Device)(nil)
	_ nvml.EventSet  = (*EventSet)(nil)
)

// NewH200 returns a server with n H200 GPUs, idle, at fake time
// mono = 1000 s, wall = 2026-11-29 12:00:00 UTC.
func NewH200(n int) *Server {
	s := &Server{
		Driver:     "580.95.05",
		mono:       int64(1000 * time.Second),
		WallOffset: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano() - int64(1000*time.Second),
	}
	for i := 0; i < n; i++ {
		d := &Device{
			srv:          s,
			Index:        i,
			UUID:         fmt.Sprintf("GPU-8f1c0d2e-5a3b-4c6d-9e7f-%012x", 0xa0b0c0d00000+i),
			Name:         H200Name,
			MemTotal:     H200MemoryMiB << 20,
			MemUsed:      540 << 20, // driver reservation on an idle H200
			TempC:        31,
			PowerMW:      74_000,
			PowerLimitMW: H200PowerLimitMW,
			SMClockMHz:   345,
			MemClockMHz:  H200MaxMemClock,
			ClockReasons: nvml.ClocksEventReasonGpuIdle,
			SamplePeriod: DefaultSamplePeriod,
			Supported:    nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState | nvml.EventTypeClock,
			fail:         map[string]nvml.Return{},
		}
		d.lastGen = s.mono
		s.Devices = append(s.Devices, d)
	}
	s.setFuncs()
	return s
}

func (s *Server) setFuncs() {
	s.InitFunc = func() nvml.Return { return s.InitReturn }
	s.ShutdownFunc = func() nvml.Return {
		s.mu.Lock()
		s.shutdown++
		s.mu.Unlock()
		return nvml.SUCCESS
	}
	s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return s.Driver, nvml.SUCCESS }
	s.DeviceGetCountFunc = func() (int, nvml.Return) {
		if s.InitReturn != nvml.SUCCESS {
			return 0, nvml.ERROR_UNINITIALIZED
		}
		return len(s.Devices), nvml.SUCCESS
	}
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(s.Devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return s.Devices[i], nvml.SUCCESS
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.eventSet = &EventSet{srv: s}
		return s.eventSet, nvml.SUCCESS
	}
}

// Shutdowns counts Shutdown calls.
func (s *Server) Shutdowns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shutdown
}

// Clock is the fake clock, in the shape nvml.Options.Clock takes.
func (s *Server) Clock() func() (uint64, int64) {
	return func() (uint64, int64) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return uint64(s.mono), s.mono + s.WallOffset
	}
}

// Mono is the fake CLOCK_MONOTONIC now, ns.
func (s *Server) Mono() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(s.mono)
}

// WallMicros is the fake wall clock now, µs since the Unix epoch (NVML's
// timestamp unit).
func (s *Server) WallMicros() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64((s.mono + s.WallOffset) / 1000)
}

// Advance moves fake time forward. Every device appends one utilization
// sample (its current GPUUtil/MemUtil, and each process's SMUtil) per
// SamplePeriod elapsed, and its PCIe byte counters grow at the configured
// throughput.
func (s *Server) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mono += int64(d)
	for _, dev := range s.Devices {
		dev.generate(s.mono, s.WallOffset, d)
	}
}

// InjectXid queues an Xid critical error event on device i (seen by an
// event set that registered EventTypeXidCriticalError on it).
func (s *Server) InjectXid(i int, xid uint64) { s.inject(i, nvml.EventTypeXidCriticalError, xid) }

// InjectECC queues a double-bit ECC error event on device i.
func (s *Server) InjectECC(i int) { s.inject(i, nvml.EventTypeDoubleBitEccError, 0) }

func (s *Server) inject(i int, typ, data uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.Devices[i]
	if d.registered&typ == 0 {
		return
	}
	s.events = append(s.events, nvml.EventData{Device: d, EventType: typ, EventData: data})
}

// EventSet hands out injected events; Wait never blocks.
type EventSet struct {
	mock.EventSet
	srv   *Server
	freed bool
}

func (e *EventSet) Wait(timeoutms uint32) (nvml.EventData, nvml.Return) {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	if len(e.srv.events) == 0 {
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	ev := e.srv.events[0]
	e.srv.events = e.srv.events[1:]
	return ev, nvml.SUCCESS
}

func (e *EventSet) Free() nvml.Return {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	e.freed = true
	return nvml.SUCCESS
}

// Proc is a process using a device.
type Proc struct {
	PID     uint32
	MemUsed uint64
	SMUtil  uint32 // %, appended to the process utilization buffer per period
}

// Device is one H200. Set its public fields between polls (under no lock:
// tests drive the sampler from one goroutine, or call Set).
type Device struct {
	mock.Device
	srv *Server

	Index             int
	UUID, Name        string
	MemTotal, MemUsed uint64
	TempC             uint32
	PowerMW           uint32
	PowerLimitMW      uint32
	SMClockMHz        uint32
	MemClockMHz       uint32
	PCIeTxKBs         uint32 // what GetPcieThroughput answers, KB/s
	PCIeRxKBs         uint32
	PCIeTxBytes       uint64 // cumulative counters behind FI_DEV_PCIE_COUNT_*_BYTES
	PCIeRxBytes       uint64
	ClockReasons      uint64 // clock event (throttle) reason mask
	GPUUtil, MemUtil  uint32 // %, appended to the sample buffers per period
	Procs             []Proc
	SamplePeriod      time.Duration
	Supported         uint64 // event types GetSupportedEventTypes answers

	lastGen    int64
	gpuBuf     []nvml.Sample
	memBuf     []nvml.Sample
	procBuf    []nvml.ProcessUtilizationSample
	registered uint64
	fail       map[string]nvml.Return
}

// Set changes a device's state under the server lock (for use while the
// sampler runs in another goroutine).
func (d *Device) Set(f func(d *Device)) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	f(d)
}

// Fail makes the named method (e.g. "GetPowerUsage", "GetSamples",
// "GetFieldValues") answer ret from now on; nvml.SUCCESS restores it.
func (d *Device) Fail(method string, ret nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if ret == nvml.SUCCESS {
		delete(d.fail, method)
		return
	}
	d.fail[method] = ret
}

// PushUtil appends one entry to the utilization sample buffers at wall time
// tsMicros, as the driver does.
func (d *Device) PushUtil(tsMicros uint64, gpu, mem uint32) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	d.gpuBuf = appendRing(d.gpuBuf, nvml.Sample{TimeStamp: tsMicros, SampleValue: u32(gpu)})
	d.memBuf = appendRing(d.memBuf, nvml.Sample{TimeStamp: tsMicros, SampleValue: u32(mem)})
}

// PushProcUtil appends one process utilization sample at wall time tsMicros.
func (d *Device) PushProcUtil(tsMicros uint64, pid, sm, mem uint32) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	d.procBuf = appendRing(d.procBuf, nvml.ProcessUtilizationSample{Pid: pid, TimeStamp: tsMicros, SmUtil: sm, MemUtil: mem})
}

func u32(v uint32) [8]byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return b
}

func appendRing[T any](buf []T, v T) []T {
	if len(buf) >= bufferCap {
		copy(buf, buf[1:])
		buf = buf[:len(buf)-1]
	}
	return append(buf, v)
}

// generate runs under the server lock.
func (d *Device) generate(mono, wallOffset int64, dt time.Duration) {
	secs := dt.Seconds()
	d.PCIeTxBytes += uint64(float64(d.PCIeTxKBs) * 1024 * secs)
	d.PCIeRxBytes += uint64(float64(d.PCIeRxKBs) * 1024 * secs)
	if d.SamplePeriod <= 0 {
		d.lastGen = mono
		return
	}
	for t := d.lastGen + int64(d.SamplePeriod); t <= mono; t += int64(d.SamplePeriod) {
		us := uint64((t + wallOffset) / 1000)
		d.gpuBuf = appendRing(d.gpuBuf, nvml.Sample{TimeStamp: us, SampleValue: u32(d.GPUUtil)})
		d.memBuf = appendRing(d.memBuf, nvml.Sample{TimeStamp: us, SampleValue: u32(d.MemUtil)})
		for _, p := range d.Procs {
			d.procBuf = appendRing(d.procBuf, nvml.ProcessUtilizationSample{Pid: p.PID, TimeStamp: us, SmUtil: p.SMUtil, MemUtil: d.MemUtil})
		}
		d.lastGen = t
	}
}

func (d *Device) failed(method string) (nvml.Return, bool) {
	r, ok := d.fail[method]
	return r, ok
}

func (d *Device) GetIndex() (int, nvml.Return) { return d.Index, nvml.SUCCESS }

func (d *Device) GetUUID() (string, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetUUID"); ok {
		return "", r
	}
	return d.UUID, nvml.SUCCESS
}

func (d *Device) GetName() (string, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetName"); ok {
		return "", r
	}
	return d.Name, nvml.SUCCESS
}

func (d *Device) GetSamples(typ nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetSamples"); ok {
		return 0, nil, r
	}
	var buf []nvml.Sample
	switch typ {
	case nvml.GPU_UTILIZATION_SAMPLES:
		buf = d.gpuBuf
	case nvml.MEMORY_UTILIZATION_SAMPLES:
		buf = d.memBuf
	default:
		return 0, nil, nvml.ERROR_NOT_SUPPORTED
	}
	var out []nvml.Sample
	for _, s := range buf {
		if s.TimeStamp > lastSeen {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
	}
	return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
}

func (d *Device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetUtilizationRates"); ok {
		return nvml.Utilization{}, r
	}
	return nvml.Utilization{Gpu: d.GPUUtil, Memory: d.MemUtil}, nvml.SUCCESS
}

func (d *Device) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetMemoryInfo_v2"); ok {
		return nvml.Memory_v2{}, r
	}
	return nvml.Memory_v2{Total: d.MemTotal, Used: d.MemUsed, Free: d.MemTotal - d.MemUsed}, nvml.SUCCESS
}

func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetMemoryInfo"); ok {
		return nvml.Memory{}, r
	}
	return nvml.Memory{Total: d.MemTotal, Used: d.MemUsed, Free: d.MemTotal - d.MemUsed}, nvml.SUCCESS
}

func (d *Device) GetTemperature(nvml.TemperatureSensors) (uint32, nvml.Return) {
	return d.u32("GetTemperature", &d.TempC)
}
func (d *Device) GetPowerUsage() (uint32, nvml.Return) { return d.u32("GetPowerUsage", &d.PowerMW) }
func (d *Device) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	return d.u32("GetEnforcedPowerLimit", &d.PowerLimitMW)
}
func (d *Device) GetPowerManagementLimit() (uint32, nvml.Return) {
	return d.u32("GetPowerManagementLimit", &d.PowerLimitMW)
}

func (d *Device) GetClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	switch t {
	case nvml.CLOCK_SM:
		return d.u32("GetClockInfo", &d.SMClockMHz)
	case nvml.CLOCK_MEM:
		return d.u32("GetClockInfo", &d.MemClockMHz)
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

func (d *Device) GetMaxClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	var v uint32
	switch t {
	case nvml.CLOCK_SM:
		v = H200MaxSMClock
	case nvml.CLOCK_MEM:
		v = H200MaxMemClock
	default:
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return d.u32("GetMaxClockInfo", &v)
}

func (d *Device) GetPcieThroughput(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
	switch c {
	case nvml.PCIE_UTIL_TX_BYTES:
		return d.u32("GetPcieThroughput", &d.PCIeTxKBs)
	case nvml.PCIE_UTIL_RX_BYTES:
		return d.u32("GetPcieThroughput", &d.PCIeRxKBs)
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *Device) u32(method string, v *uint32) (uint32, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed(method); ok {
		return 0, r
	}
	return *v, nvml.SUCCESS
}

func (d *Device) GetFieldValues(values []nvml.FieldValue) nvml.Return {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetFieldValues"); ok {
		return r
	}
	now := (d.srv.mono + d.srv.WallOffset) / 1000
	for i := range values {
		v := &values[i]
		v.Timestamp = now
		var x uint64
		switch v.FieldId {
		case nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
			x = d.PCIeTxBytes
		case nvml.FI_DEV_PCIE_COUNT_RX_BYTES:
			x = d.PCIeRxBytes
		default:
			v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		if r, ok := d.failed("FI_DEV_PCIE_COUNT"); ok {
			v.NvmlReturn = uint32(r)
			continue
		}
		v.NvmlReturn = uint32(nvml.SUCCESS)
		v.ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
		binary.LittleEndian.PutUint64(v.Value[:], x)
	}
	return nvml.SUCCESS
}

func (d *Device) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetCurrentClocksEventReasons"); ok {
		return 0, r
	}
	return d.ClockReasons, nvml.SUCCESS
}

func (d *Device) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetCurrentClocksThrottleReasons"); ok {
		return 0, r
	}
	return d.ClockReasons, nvml.SUCCESS
}

func (d *Device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetComputeRunningProcesses"); ok {
		return nil, r
	}
	out := make([]nvml.ProcessInfo, 0, len(d.Procs))
	for _, p := range d.Procs {
		out = append(out, nvml.ProcessInfo{Pid: p.PID, UsedGpuMemory: p.MemUsed, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
	}
	return out, nvml.SUCCESS
}

func (d *Device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetProcessUtilization"); ok {
		return nil, r
	}
	var out []nvml.ProcessUtilizationSample
	for _, s := range d.procBuf {
		if s.TimeStamp > lastSeen {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("GetSupportedEventTypes"); ok {
		return 0, r
	}
	return d.Supported, nvml.SUCCESS
}

func (d *Device) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	d.srv.mu.Lock()
	defer d.srv.mu.Unlock()
	if r, ok := d.failed("RegisterEvents"); ok {
		return r
	}
	if types&^d.Supported != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	d.registered |= types
	return nvml.SUCCESS
}
