// Package nvml samples every visible NVIDIA GPU through NVML (go-nvml) while
// cudatap records: utilization from the driver's sample buffers, memory,
// temperature, power, clocks, PCIe throughput, clock event (throttle)
// reasons, per-process memory and SM utilization, and Xid/ECC events. All
// timestamps are CLOCK_MONOTONIC ns, the tracer's clock.
//
// It is the only package that imports go-nvml (which dlopens
// libnvidia-ml.so.1 through cgo). Without NVML, New fails with an error that
// wraps ErrNVMLUnavailable and says, in one line, what is missing; everything
// else in cudatap works without it.
//
// gpusample.Summarize is a pure function over a series of samples: numbers per device
// and per process. Judging them (verdicts) and wording them is the report's
// job (export/report).
package nvml

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/tracer/gpusample"
)

// The value types are gpusample's (no cgo there: their readers build
// without it).
type (
	Sample     = gpusample.Sample
	UtilPoint  = gpusample.UtilPoint
	ProcSample = gpusample.ProcSample
	Event      = gpusample.Event
	Device     = gpusample.Device
)

// Options configure a Sampler.
type Options struct {
	// Interval between polls in Run (default 100 ms). The first poll also
	// reports the driver's samples from the Interval (at least one second)
	// before New, so a single Poll has a utilization to show.
	Interval time.Duration
	// BufferInterval is how often the driver's sample buffers (GPU and
	// memory utilization, per-process utilization) are drained (default
	// 500 ms, at least Interval). Each drain costs ~1.4 ms of CPU per buffer
	// and GPU on an H200 host, while the driver appends only every ~200 ms
	// and keeps ~14 s (71 entries): draining less often loses nothing. Polls in
	// between carry the last utilization and have no Util points.
	BufferInterval time.Duration
	// Lib is the NVML library; nil loads the real one (libnvidia-ml.so.1).
	Lib gonvml.Interface
	// Clock reads CLOCK_MONOTONIC ns and the wall clock (Unix ns); nil reads
	// the system clocks.
	Clock func() (mono uint64, wallUnixNs int64)
	// PID keeps only the processes it accepts in Sample.Processes; nil keeps all.
	PID func(pid uint32) bool
	// OnEvent receives the events Run sees (Poll returns them instead).
	OnEvent func(Event)
	// Logger gets one line per field a GPU does not support and per new
	// kind of failure; nil discards.
	Logger *slog.Logger
}

// DefaultInterval is the poll interval when Options.Interval is zero.
const DefaultInterval = 100 * time.Millisecond

// DefaultBufferInterval is the drain interval of the driver's sample
// buffers when Options.BufferInterval is zero.
const DefaultBufferInterval = 500 * time.Millisecond

// ErrNVMLUnavailable is wrapped by New's error when NVML cannot be used
// (no driver, no GPU, a container without the device, no permission).
var ErrNVMLUnavailable = errors.New("NVML not available")

type unavailableError struct {
	reason string
	ret    gonvml.Return
}

func (e *unavailableError) Error() string {
	return ErrNVMLUnavailable.Error() + ": " + e.reason + "; cudatap works without it, GPU counters are omitted"
}

func (e *unavailableError) Unwrap() error { return ErrNVMLUnavailable }

func unavailable(ret gonvml.Return) error {
	var reason string
	switch ret {
	case gonvml.ERROR_LIBRARY_NOT_FOUND:
		reason = "no NVIDIA driver found (libnvidia-ml.so.1)"
	case gonvml.ERROR_DRIVER_NOT_LOADED:
		reason = "the NVIDIA kernel driver is not loaded (check `nvidia-smi`; in a container, run it with --gpus or the NVIDIA device plugin)"
	case gonvml.ERROR_NO_PERMISSION:
		reason = "no permission to open /dev/nvidia* (run as root or as a member of the group owning them)"
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		reason = "libnvidia-ml.so.1 does not match the loaded kernel driver (the driver was upgraded without a reboot or module reload)"
	case gonvml.ERROR_GPU_NOT_FOUND:
		reason = "no NVIDIA GPU visible (in a container, run it with --gpus or the NVIDIA device plugin)"
	default:
		reason = "nvmlInit failed: " + retString(ret)
	}
	return &unavailableError{reason: reason, ret: ret}
}

func retString(r gonvml.Return) string {
	defer func() { _ = recover() }() // ErrorString of a half-loaded library must not take cudatap down
	return r.Error()
}

// Sampler polls NVML. Its methods are safe for concurrent use.
type Sampler struct {
	mu       sync.Mutex
	lib      gonvml.Interface
	interval time.Duration
	drainInt time.Duration
	clock    func() (uint64, int64)
	pidOK    func(uint32) bool
	onEvent  func(Event)
	log      *slog.Logger
	driver   string

	devs     []*devState
	events   gonvml.EventSet
	pcieNext int // round robin for the slow GetPcieThroughput fallback

	offset      int64      // wall ns - mono ns
	offsetBound int64      // ns, the half width of the tightest bracket
	noteMu      sync.Mutex // Notes may be called while a poll runs
	notes       []string
	noted       map[string]bool
	closed      bool
}

type pcieMode int

const (
	pcieCounters   pcieMode = iota // FI_DEV_PCIE_COUNT_{TX,RX}_BYTES field values: rate over the whole poll interval
	pcieThroughput                 // GetPcieThroughput: a 20 ms window per call, so rate-limited
	pcieNone
)

type devState struct {
	info Device
	h    gonvml.Device
	lost bool

	skip map[string]bool // fields the device does not support

	lastGPU, lastMem, lastProc uint64 // µs wall, lastSeenTimestamp per buffer
	drained                    uint64 // mono ns of the last drain (0: never)
	procSM                     map[uint32]procUtil
	gpuUtil, memUtil           float64

	pcie                 pcieMode
	pcieTx, pcieRx       uint64 // counters at the previous poll
	pcieTS               int64  // µs wall of those counters (0: none yet)
	pcieRead             uint64 // mono ns of the last GetPcieThroughput read
	pcieTxBps, pcieRxBps float64
}

// pcieThroughputEvery bounds the GetPcieThroughput fallback: each call blocks
// ~20 ms in the driver, so a device is read at most this often and one
// device per poll.
const pcieThroughputEvery = time.Second

// New loads NVML, finds every visible GPU, registers for Xid/ECC events and
// measures the wall-to-monotonic clock offset.
func New(opts Options) (s *Sampler, err error) {
	lib := opts.Lib
	if lib == nil {
		lib = gonvml.New()
	}
	defer func() {
		// A broken or foreign libnvidia-ml.so must not crash cudatap.
		if r := recover(); r != nil {
			s, err = nil, &unavailableError{reason: fmt.Sprintf("NVML failed: %v", r)}
		}
	}()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		return nil, unavailable(ret)
	}
	s = &Sampler{
		lib:      lib,
		interval: opts.Interval,
		clock:    opts.Clock,
		pidOK:    opts.PID,
		onEvent:  opts.OnEvent,
		log:      opts.Logger,
		noted:    map[string]bool{},
	}
	if s.interval <= 0 {
		s.interval = DefaultInterval
	}
	s.drainInt = opts.BufferInterval
	if s.drainInt <= 0 {
		s.drainInt = DefaultBufferInterval
	}
	s.drainInt = max(s.drainInt, s.interval)
	if s.clock == nil {
		s.clock = systemClock
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS || n == 0 {
		lib.Shutdown()
		if ret == gonvml.SUCCESS {
			ret = gonvml.ERROR_GPU_NOT_FOUND
		}
		return nil, unavailable(ret)
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == gonvml.SUCCESS {
		s.driver = v
	}
	s.offset, s.offsetBound = measureOffset(s.clock, 32)
	_, wall := s.clock()
	start := uint64(wall/1000) - uint64(max(s.interval, time.Second)/time.Microsecond)

	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			s.note(fmt.Sprintf("GPU %d: skipped: %s", i, retString(ret)))
			continue
		}
		d := &devState{h: h, skip: map[string]bool{}, lastGPU: start, lastMem: start, lastProc: start, procSM: map[uint32]procUtil{},
			gpuUtil: math.NaN(), memUtil: math.NaN(), pcieTxBps: math.NaN(), pcieRxBps: math.NaN()}
		d.info.Index = i
		if v, ret := h.GetUUID(); ret == gonvml.SUCCESS {
			d.info.UUID = v
		}
		if v, ret := h.GetName(); ret == gonvml.SUCCESS {
			d.info.Name = v
		}
		d.info.MemTotal, _ = s.memory(d)
		d.info.PowerLimitW = s.powerLimit(d)
		if v, ret := h.GetMaxClockInfo(gonvml.CLOCK_SM); ret == gonvml.SUCCESS {
			d.info.MaxSMClock = v
		}
		s.devs = append(s.devs, d)
	}
	if len(s.devs) == 0 {
		lib.Shutdown()
		return nil, unavailable(gonvml.ERROR_GPU_NOT_FOUND)
	}
	s.registerEvents()
	return s, nil
}

func systemClock() (uint64, int64) {
	var m, w unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	unix.ClockGettime(unix.CLOCK_REALTIME, &w)
	return uint64(m.Nano()), w.Nano()
}

// measureOffset brackets a wall-clock read between two monotonic reads,
// reps times, and keeps the tightest bracket: offset = wall - midpoint,
// bound = half the bracket.
func measureOffset(clock func() (uint64, int64), reps int) (offset, bound int64) {
	bound = math.MaxInt64
	for i := 0; i < reps; i++ {
		m1, _ := clock()
		_, w := clock()
		m2, _ := clock()
		if m2 < m1 {
			continue
		}
		half := int64(m2-m1) / 2
		if half < bound {
			bound = half
			offset = w - int64(m1+(m2-m1)/2)
		}
	}
	return offset, bound
}

// nvmlResolutionNs is the error of an NVML µs timestamp once centred in its
// microsecond (NVML truncates to µs).
const nvmlResolutionNs = 500

// ClockOffset says how NVML's wall-clock µs map to CLOCK_MONOTONIC:
// mono_ns = wall_us*1000 + 500 - offsetNs. errorBoundNs bounds the error of
// that conversion: half the tightest bracket of the offset measurement plus
// the 0.5 µs of NVML's timestamp resolution. Write both into the output's
// metadata. Every poll re-measures: a tighter bracket replaces the offset,
// and so does a wall clock step (NTP, settimeofday).
func (s *Sampler) ClockOffset() (offsetNs int64, errorBoundNs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offset, s.offsetBound + nvmlResolutionNs
}

// Driver is the NVIDIA driver version ("" when NVML does not say).
func (s *Sampler) Driver() string { return s.driver }

// Interval is the poll interval Run uses.
func (s *Sampler) Interval() time.Duration { return s.interval }

// Devices lists the sampled GPUs, by NVML index.
func (s *Sampler) Devices() []Device {
	out := make([]Device, len(s.devs))
	for i, d := range s.devs {
		out[i] = d.info
	}
	return out
}

// Notes lists, once each, the fields some GPU does not support and the
// failures seen so far ("GPU 0: PCIe throughput: Not Supported").
func (s *Sampler) Notes() []string {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	return append([]string(nil), s.notes...)
}

func (s *Sampler) note(msg string) {
	s.noteMu.Lock()
	defer s.noteMu.Unlock()
	if s.noted[msg] {
		return
	}
	s.noted[msg] = true
	s.notes = append(s.notes, msg)
	s.log.Info("nvml: " + msg)
}

// wallToMono converts an NVML timestamp (µs since the Unix epoch).
func (s *Sampler) wallToMono(us uint64) uint64 {
	return uint64(int64(us)*1000 + nvmlResolutionNs - s.offset)
}

// ok reports whether ret is SUCCESS; otherwise it notes the failure once
// and, when the device will never answer (not supported, no permission,
// missing symbol), stops asking.
func (s *Sampler) ok(d *devState, field string, ret gonvml.Return) bool {
	switch ret {
	case gonvml.SUCCESS:
		return true
	case gonvml.ERROR_NOT_SUPPORTED, gonvml.ERROR_FUNCTION_NOT_FOUND, gonvml.ERROR_NO_PERMISSION:
		d.skip[field] = true
		s.note(fmt.Sprintf("GPU %d: %s: %s", d.info.Index, field, retString(ret)))
	case gonvml.ERROR_GPU_IS_LOST:
		d.lost = true
		s.note(fmt.Sprintf("GPU %d: lost (fell off the bus); no more samples from it", d.info.Index))
	default:
		s.note(fmt.Sprintf("GPU %d: %s: %s", d.info.Index, field, retString(ret)))
	}
	return false
}

const (
	fGPUSamples = "GPU utilization samples"
	fMemSamples = "memory utilization samples"
	fUtilRates  = "utilization rates"
	fMemInfoV2  = "memory info v2"
	fMemInfo    = "memory info"
	fTemp       = "temperature"
	fPower      = "power draw"
	fLimit      = "enforced power limit"
	fLimitMgmt  = "power management limit"
	fSMClock    = "SM clock"
	fMemClock   = "memory clock"
	fReasons    = "clock event reasons"
	fThrottle   = "clock throttle reasons"
	fProcs      = "compute processes"
	fProcUtil   = "process utilization"
	fPCIe       = "PCIe throughput"
	fEvents     = "Xid/ECC events"
)

func (s *Sampler) memory(d *devState) (total, used uint64) {
	if !d.skip[fMemInfoV2] {
		m, ret := d.h.GetMemoryInfo_v2()
		if ret == gonvml.SUCCESS {
			return m.Total, m.Used
		}
		if ret != gonvml.ERROR_NOT_SUPPORTED && ret != gonvml.ERROR_FUNCTION_NOT_FOUND && ret != gonvml.ERROR_ARGUMENT_VERSION_MISMATCH {
			s.ok(d, fMemInfoV2, ret)
			return 0, 0
		}
		d.skip[fMemInfoV2] = true // older driver: fall back quietly
	}
	if d.skip[fMemInfo] {
		return 0, 0
	}
	m, ret := d.h.GetMemoryInfo()
	if !s.ok(d, fMemInfo, ret) {
		return 0, 0
	}
	return m.Total, m.Used
}

func (s *Sampler) powerLimit(d *devState) float64 {
	if !d.skip[fLimit] {
		v, ret := d.h.GetEnforcedPowerLimit()
		if s.ok(d, fLimit, ret) {
			return float64(v) / 1000
		}
	}
	if !d.skip[fLimitMgmt] {
		v, ret := d.h.GetPowerManagementLimit()
		if s.ok(d, fLimitMgmt, ret) {
			return float64(v) / 1000
		}
	}
	return math.NaN()
}

var eventKinds = []struct {
	mask uint64
	kind string
}{
	{gonvml.EventTypeXidCriticalError, "xid"},
	{gonvml.EventTypeDoubleBitEccError, "ecc_double_bit"},
	{gonvml.EventTypeSingleBitEccError, "ecc_single_bit"},
}

func (s *Sampler) registerEvents() {
	set, ret := s.lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		s.note(fmt.Sprintf("%s: %s", fEvents, retString(ret)))
		return
	}
	registered := 0
	for _, d := range s.devs {
		supported, ret := d.h.GetSupportedEventTypes()
		if !s.ok(d, fEvents, ret) {
			continue
		}
		var want uint64
		for _, k := range eventKinds {
			want |= k.mask
		}
		want &= supported
		if want == 0 {
			s.ok(d, fEvents, gonvml.ERROR_NOT_SUPPORTED)
			continue
		}
		if s.ok(d, fEvents, d.h.RegisterEvents(want, set)) {
			registered++
		}
	}
	if registered == 0 {
		set.Free()
		return
	}
	s.events = set
}

// Poll reads every GPU once and drains pending events without blocking.
// Samples come in device order. The error is non-nil only after Close.
func (s *Sampler) Poll() ([]Sample, []Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, nil, errors.New("nvml: sampler closed")
	}
	s.remeasure()
	now, wall := s.clock()
	nowUs := uint64(wall / 1000)
	samples := make([]Sample, 0, len(s.devs))
	var events []Event
	pcieTurn := -1
	for k := range s.devs {
		i := (s.pcieNext + k) % len(s.devs)
		d := s.devs[i]
		if !d.lost && d.pcie == pcieThroughput && (d.pcieRead == 0 || now-d.pcieRead >= uint64(pcieThroughputEvery)) {
			pcieTurn = i
			break
		}
	}
	if pcieTurn >= 0 {
		s.pcieNext = pcieTurn + 1
	}
	// One device after the other. On two H200s with every buffer drained,
	// one goroutine per GPU took 11.6 ms of wall time but 20 ms of CPU per
	// poll; one after the other, 14.4 ms of wall time: NVML serializes
	// much of its work, and the CPU matters more than the latency.
	for i, d := range s.devs {
		if d.lost {
			continue
		}
		smp := s.pollDevice(d, now, nowUs, i == pcieTurn)
		if d.lost {
			events = append(events, Event{TS: now, Device: d.info.Index, Kind: "gpu_lost"})
			continue
		}
		samples = append(samples, smp)
	}
	events = append(events, s.drainEvents(now)...)
	return samples, events, nil
}

// remeasure refines the clock offset (a few brackets, ~100 ns each): a
// tighter bracket that agrees wins; a disagreement beyond both bounds plus a
// millisecond is a wall clock step and wins too.
func (s *Sampler) remeasure() {
	off, bound := measureOffset(s.clock, 4)
	if bound == math.MaxInt64 {
		return
	}
	diff := off - s.offset
	if diff < 0 {
		diff = -diff
	}
	switch {
	case diff > bound+s.offsetBound+int64(time.Millisecond):
		s.note(fmt.Sprintf("wall clock stepped by %v; NVML timestamps re-aligned", time.Duration(off-s.offset)))
		s.offset, s.offsetBound = off, bound
	case bound < s.offsetBound:
		s.offset, s.offsetBound = off, bound
	}
}

func (s *Sampler) pollDevice(d *devState, now, nowUs uint64, pcieTurn bool) Sample {
	h := d.h
	smp := Sample{TS: now, Device: d.info.Index, UUID: d.info.UUID, Name: d.info.Name, SMClockMaxMHz: d.info.MaxSMClock,
		TempC: math.NaN(), PowerW: math.NaN(), PowerLimitW: math.NaN()}

	// Drain the sample buffers when due; half an interval of slack absorbs
	// ticker jitter.
	drain := d.drained == 0 || now+uint64(s.interval/2) >= d.drained+uint64(s.drainInt)
	if drain {
		d.drained = now
	}
	s.utilization(d, &smp, drain)
	smp.MemTotal, smp.MemUsed = s.memory(d)
	if smp.MemTotal == 0 {
		smp.MemTotal = d.info.MemTotal
	}
	if !d.skip[fTemp] {
		if v, ret := h.GetTemperature(gonvml.TEMPERATURE_GPU); s.ok(d, fTemp, ret) {
			smp.TempC = float64(v)
		}
	}
	if !d.skip[fPower] {
		if v, ret := h.GetPowerUsage(); s.ok(d, fPower, ret) {
			smp.PowerW = float64(v) / 1000
		}
	}
	smp.PowerLimitW = s.powerLimit(d)
	if !d.skip[fSMClock] {
		if v, ret := h.GetClockInfo(gonvml.CLOCK_SM); s.ok(d, fSMClock, ret) {
			smp.SMClockMHz = v
		}
	}
	if !d.skip[fMemClock] {
		if v, ret := h.GetClockInfo(gonvml.CLOCK_MEM); s.ok(d, fMemClock, ret) {
			smp.MemClockMHz = v
		}
	}
	s.throttle(d, &smp)
	s.pcie(d, &smp, now, nowUs, pcieTurn)
	s.processes(d, &smp, nowUs, drain)
	return smp
}

// utilization drains the driver's sample buffers since lastSeen; without
// them (NOT_SUPPORTED) it falls back to one nvmlDeviceGetUtilizationRates
// reading per poll.
func (s *Sampler) utilization(d *devState, smp *Sample, drain bool) {
	type entry struct {
		ts       uint64
		gpu, mem float64
	}
	var points []entry
	add := func(ts uint64, v float64, gpu bool) {
		for i := range points {
			if points[i].ts == ts {
				if gpu {
					points[i].gpu = v
				} else {
					points[i].mem = v
				}
				return
			}
		}
		e := entry{ts: ts, gpu: math.NaN(), mem: math.NaN()}
		if gpu {
			e.gpu = v
		} else {
			e.mem = v
		}
		points = append(points, e)
	}
	read := func(field string, typ gonvml.SamplingType, last *uint64, cur *float64, gpu bool) bool {
		if d.skip[field] {
			return false
		}
		if !drain {
			return true // not due: the last value carries
		}
		vt, buf, ret := d.h.GetSamples(typ, *last)
		if ret == gonvml.ERROR_NOT_FOUND { // nothing new since lastSeen
			return true
		}
		if !s.ok(d, field, ret) {
			return !d.skip[field]
		}
		sum, n := 0.0, 0
		for _, b := range buf {
			if b.TimeStamp <= *last { // the driver filters; be sure
				continue
			}
			v := sampleValue(vt, b.SampleValue)
			add(b.TimeStamp, v, gpu)
			sum += v
			n++
		}
		for _, b := range buf {
			if b.TimeStamp > *last {
				*last = b.TimeStamp
			}
		}
		if n > 0 {
			*cur = sum / float64(n)
		}
		return true
	}
	okGPU := read(fGPUSamples, gonvml.GPU_UTILIZATION_SAMPLES, &d.lastGPU, &d.gpuUtil, true)
	okMem := read(fMemSamples, gonvml.MEMORY_UTILIZATION_SAMPLES, &d.lastMem, &d.memUtil, false)
	if (!okGPU || !okMem) && !d.skip[fUtilRates] {
		if u, ret := d.h.GetUtilizationRates(); s.ok(d, fUtilRates, ret) {
			if !okGPU {
				d.gpuUtil = float64(u.Gpu)
			}
			if !okMem {
				d.memUtil = float64(u.Memory)
			}
		}
	}
	smp.GPUUtil, smp.MemUtil = d.gpuUtil, d.memUtil
	if len(points) > 0 {
		sort.Slice(points, func(i, j int) bool { return points[i].ts < points[j].ts })
		smp.Util = make([]UtilPoint, len(points))
		for i, p := range points {
			smp.Util[i] = UtilPoint{TS: s.wallToMono(p.ts), GPUUtil: p.gpu, MemUtil: p.mem}
		}
	}
}

// sampleValue decodes an nvmlValue_t of the given type.
func sampleValue(vt gonvml.ValueType, b [8]byte) float64 {
	switch vt {
	case gonvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b[:]))
	case gonvml.VALUE_TYPE_UNSIGNED_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(b[:]))
	case gonvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(b[:])))
	case gonvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(b[:])))
	case gonvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(b[:]))
	}
	return math.NaN()
}

var throttleNames = []struct {
	mask uint64
	name string
}{
	{gonvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{gonvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks"},
	{gonvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{gonvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{gonvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{gonvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{gonvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{gonvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{gonvml.ClocksEventReasonDisplayClockSetting, "display_clocks"},
}

// ThrottleReasonNames names the bits of an NVML clock event reason mask.
func ThrottleReasonNames(mask uint64) []string {
	var out []string
	for _, t := range throttleNames {
		if mask&t.mask != 0 {
			out = append(out, t.name)
		}
	}
	return out
}

func (s *Sampler) throttle(d *devState, smp *Sample) {
	if !d.skip[fReasons] {
		v, ret := d.h.GetCurrentClocksEventReasons()
		if ret == gonvml.SUCCESS {
			smp.ThrottleReasons = ThrottleReasonNames(v)
			return
		}
		if ret != gonvml.ERROR_FUNCTION_NOT_FOUND && ret != gonvml.ERROR_NOT_SUPPORTED {
			s.ok(d, fReasons, ret)
			return
		}
		d.skip[fReasons] = true // driver before 535: the older name
	}
	if !d.skip[fThrottle] {
		if v, ret := d.h.GetCurrentClocksThrottleReasons(); s.ok(d, fThrottle, ret) {
			smp.ThrottleReasons = ThrottleReasonNames(v)
		}
	}
}

// pcieKB is NVML's "KB" in GetPcieThroughput.
const pcieKB = 1024

func (s *Sampler) pcie(d *devState, smp *Sample, now, nowUs uint64, turn bool) {
	switch d.pcie {
	case pcieCounters:
		vals := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES}, {FieldId: gonvml.FI_DEV_PCIE_COUNT_RX_BYTES}}
		ret := d.h.GetFieldValues(vals)
		if ret == gonvml.SUCCESS && vals[0].NvmlReturn != uint32(gonvml.SUCCESS) {
			ret = gonvml.Return(vals[0].NvmlReturn)
		}
		if ret == gonvml.SUCCESS && vals[1].NvmlReturn != uint32(gonvml.SUCCESS) {
			ret = gonvml.Return(vals[1].NvmlReturn)
		}
		if ret != gonvml.SUCCESS {
			if ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_FUNCTION_NOT_FOUND || ret == gonvml.ERROR_INVALID_ARGUMENT {
				d.pcie = pcieThroughput // older GPU or driver: the sampled 20 ms window
				s.log.Debug("nvml: PCIe byte counters unsupported, using GetPcieThroughput", "gpu", d.info.Index)
			} else {
				s.ok(d, fPCIe, ret)
			}
			break
		}
		tx := uint64(sampleValue(gonvml.ValueType(vals[0].ValueType), vals[0].Value))
		rx := uint64(sampleValue(gonvml.ValueType(vals[1].ValueType), vals[1].Value))
		ts := vals[0].Timestamp
		if ts == 0 {
			ts = int64(nowUs)
		}
		if d.pcieTS != 0 && ts > d.pcieTS && tx >= d.pcieTx && rx >= d.pcieRx {
			dt := float64(ts-d.pcieTS) / 1e6
			d.pcieTxBps = float64(tx-d.pcieTx) / dt
			d.pcieRxBps = float64(rx-d.pcieRx) / dt
		}
		d.pcieTx, d.pcieRx, d.pcieTS = tx, rx, ts
	case pcieThroughput:
		if d.skip[fPCIe] {
			d.pcie = pcieNone
			break
		}
		if !turn {
			break
		}
		d.pcieRead = now
		tx, ret := d.h.GetPcieThroughput(gonvml.PCIE_UTIL_TX_BYTES)
		if !s.ok(d, fPCIe, ret) {
			break
		}
		rx, ret := d.h.GetPcieThroughput(gonvml.PCIE_UTIL_RX_BYTES)
		if !s.ok(d, fPCIe, ret) {
			break
		}
		d.pcieTxBps, d.pcieRxBps = float64(tx)*pcieKB, float64(rx)*pcieKB
	}
	smp.PCIeTxBps, smp.PCIeRxBps = d.pcieTxBps, d.pcieRxBps
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE in an unsigned long long field
// (per-process memory inside some containers and under WDDM).
const notAvailable = ^uint64(0)

// procUtil is a process's latest SM utilization on a device.
type procUtil struct {
	sm float64
	n  int
	ts uint64 // µs wall of its latest sample
}

// procCarryUs is how long a process's SM utilization carries without a new
// driver sample before it counts as 0.
const procCarryUs = 2_000_000

func (s *Sampler) processes(d *devState, smp *Sample, nowUs uint64, drain bool) {
	var procs []ProcSample
	index := map[uint32]int{}
	get := func(pid uint32) *ProcSample {
		if i, ok := index[pid]; ok {
			return &procs[i]
		}
		index[pid] = len(procs)
		procs = append(procs, ProcSample{PID: pid, SMUtil: math.NaN()})
		return &procs[len(procs)-1]
	}
	if !d.skip[fProcs] {
		infos, ret := d.h.GetComputeRunningProcesses()
		if s.ok(d, fProcs, ret) {
			for _, p := range infos {
				if s.pidOK != nil && !s.pidOK(p.Pid) {
					continue
				}
				ps := get(p.Pid)
				if p.UsedGpuMemory == notAvailable {
					s.note(fmt.Sprintf("GPU %d: per-process memory not available to this process", d.info.Index))
					continue
				}
				ps.MemUsed += p.UsedGpuMemory // MIG: one entry per instance
			}
		}
	}
	if !d.skip[fProcUtil] {
		var us []gonvml.ProcessUtilizationSample
		ret := gonvml.ERROR_NOT_FOUND // between drains: as if nothing new
		if drain {
			us, ret = d.h.GetProcessUtilization(d.lastProc)
		}
		// ERROR_NOT_FOUND: no process sample since lastSeen (the driver
		// samples every ~200 ms): the last values carry.
		if ret == gonvml.ERROR_NOT_FOUND || s.ok(d, fProcUtil, ret) {
			sums := map[uint32]procUtil{}
			for _, u := range us {
				if u.TimeStamp <= d.lastProc {
					continue
				}
				a := sums[u.Pid]
				a.sm += float64(u.SmUtil)
				a.n++
				a.ts = max(a.ts, u.TimeStamp)
				sums[u.Pid] = a
			}
			for _, u := range us {
				d.lastProc = max(d.lastProc, u.TimeStamp)
			}
			for pid, a := range sums {
				d.procSM[pid] = procUtil{sm: a.sm / float64(a.n), ts: a.ts}
			}
			for i := range procs {
				procs[i].SMUtil = 0 // listed, no recent sample: no SM activity
			}
			for pid, a := range d.procSM {
				if nowUs > a.ts+5*procCarryUs {
					delete(d.procSM, pid)
					continue
				}
				if s.pidOK != nil && !s.pidOK(pid) {
					continue
				}
				_, listed := index[pid]
				_, fresh := sums[pid]
				if !listed && !fresh {
					continue // exited: not listed, nothing new
				}
				p := get(pid)
				p.SMUtil = 0
				if nowUs <= a.ts+procCarryUs {
					p.SMUtil = a.sm
				}
			}
		}
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
	smp.Processes = procs
}

func (s *Sampler) drainEvents(now uint64) []Event {
	if s.events == nil {
		return nil
	}
	var out []Event
	for i := 0; i < 256; i++ { // bounded: a storm must not stall the poll
		ev, ret := s.events.Wait(0)
		if ret != gonvml.SUCCESS {
			if ret != gonvml.ERROR_TIMEOUT {
				s.note(fmt.Sprintf("%s: %s", fEvents, retString(ret)))
			}
			break
		}
		e := Event{TS: now, Device: -1, Kind: "event", Data: ev.EventData}
		for _, k := range eventKinds {
			if ev.EventType&k.mask != 0 {
				e.Kind = k.kind
				break
			}
		}
		for _, d := range s.devs {
			if d.h == ev.Device {
				e.Device = d.info.Index
				break
			}
		}
		if e.Device < 0 && ev.Device != nil {
			if uuid, ret := ev.Device.GetUUID(); ret == gonvml.SUCCESS {
				for _, d := range s.devs {
					if d.info.UUID == uuid {
						e.Device = d.info.Index
					}
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// Run polls now and then every Interval until ctx is done, handing each
// sample to out and each event to Options.OnEvent.
func (s *Sampler) Run(ctx context.Context, out func(Sample)) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		samples, events, err := s.Poll()
		if err != nil {
			return
		}
		for _, smp := range samples {
			out(smp)
		}
		if s.onEvent != nil {
			for _, e := range events {
				s.onEvent(e)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close frees the event set and shuts NVML down. Poll fails afterwards.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.events != nil {
		s.events.Free()
		s.events = nil
	}
	if ret := s.lib.Shutdown(); ret != gonvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", retString(ret))
	}
	return nil
}
