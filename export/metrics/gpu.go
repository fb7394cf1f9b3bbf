package metrics

import (
	"math"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cudatap/cudatap/tracer/gpusample"
)

// GPUCollector exports the NVML device series of the node, labelled gpu,
// UUID, model_name and Hostname (per process also comm, pod, namespace,
// container, and pid when asked): gpu, UUID and Hostname as dcgm-exporter
// names them, so that its series and these can be joined (its modelName
// is model_name here: Prometheus' label names are snake_case, and
// promtool check metrics says so). The series and their units are
// cudatap's own (cudatap_gpu_utilization_ratio is 0-1, not
// DCGM_FI_DEV_GPU_UTIL's 0-100): dashboards written for dcgm-exporter do
// not show them. It keeps the latest sample per device; feed it with Add
// from an gpusample.Sampler's Run.
type GPUCollector struct {
	mu    sync.Mutex
	last  map[int]gpusample.Sample
	xids  map[[2]int]uint64 // (device, xid) → count
	up    bool
	host  string
	pid   bool // label processes with their pid
	label Labeler
	// device names the pod, namespace and container a GPU is allocated
	// to (Kubernetes' pod-resources), as dcgm-exporter labels its series.
	device  func(uuid string) ProcLabels
	descs   map[string]*prometheus.Desc
	procMem *prometheus.Desc
	xid     *prometheus.Desc
	upDesc  *prometheus.Desc
}

// gpuSeries are the device gauges: name, help, value.
var gpuSeries = []struct {
	name, help string
	value      func(s *gpusample.Sample) float64
}{
	{"cudatap_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML utilization.gpu).", func(s *gpusample.Sample) float64 { return s.GPUUtil / 100 }},
	{"cudatap_gpu_memory_utilization_ratio", "Share of time device memory was read or written (NVML utilization.memory).", func(s *gpusample.Sample) float64 { return s.MemUtil / 100 }},
	{"cudatap_gpu_memory_used_bytes", "Device memory in use.", func(s *gpusample.Sample) float64 { return float64(s.MemUsed) }},
	{"cudatap_gpu_memory_total_bytes", "Device memory.", func(s *gpusample.Sample) float64 { return float64(s.MemTotal) }},
	{"cudatap_gpu_temperature_celsius", "GPU temperature.", func(s *gpusample.Sample) float64 { return s.TempC }},
	{"cudatap_gpu_power_watts", "Power draw.", func(s *gpusample.Sample) float64 { return s.PowerW }},
	{"cudatap_gpu_power_limit_watts", "Enforced power limit.", func(s *gpusample.Sample) float64 { return s.PowerLimitW }},
	{"cudatap_gpu_sm_clock_hertz", "SM clock.", func(s *gpusample.Sample) float64 { return float64(s.SMClockMHz) * 1e6 }},
	{"cudatap_gpu_memory_clock_hertz", "Memory clock.", func(s *gpusample.Sample) float64 { return float64(s.MemClockMHz) * 1e6 }},
	{"cudatap_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput.", func(s *gpusample.Sample) float64 { return s.PCIeRxBps }},
	{"cudatap_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput.", func(s *gpusample.Sample) float64 { return s.PCIeTxBps }},
}

var gpuLabels = []string{"gpu", "UUID", "model_name", "Hostname"}

// GPUOptions choose a GPUCollector's labels.
type GPUOptions struct {
	// Host is the Hostname label: the node (the host name when empty).
	Host string
	// PID labels each process's device memory with its pid; without it,
	// the processes with the same other labels on a GPU are added up.
	PID bool
}

// NewGPUCollector returns a collector with no samples yet: it reports
// cudatap_agent_nvml_up 0 until SetUp(true).
func NewGPUCollector(o GPUOptions) *GPUCollector {
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	c := &GPUCollector{last: map[int]gpusample.Sample{}, xids: map[[2]int]uint64{}, host: o.Host, pid: o.PID, label: ProcFSLabels, device: func(string) ProcLabels { return ProcLabels{} }, descs: map[string]*prometheus.Desc{}}
	for _, s := range gpuSeries {
		c.descs[s.name] = prometheus.NewDesc(s.name, s.help, append(slices.Clone(gpuLabels), "pod", "namespace", "container"), nil)
	}
	proc := []string{"comm", "pod", "namespace", "container"}
	if o.PID {
		proc = append([]string{"pid"}, proc...)
	}
	c.procMem = prometheus.NewDesc("cudatap_gpu_process_memory_used_bytes", "Device memory a process uses on the GPU (NVML); without the pid label, the processes of a group on the GPU added up.",
		append(slices.Clone(gpuLabels), proc...), nil)
	c.xid = prometheus.NewDesc("cudatap_gpu_xid_errors_total", "Xid errors the driver reported while the agent watched.", append(slices.Clone(gpuLabels), "xid"), nil)
	c.upDesc = prometheus.NewDesc("cudatap_agent_nvml_up", "1 when NVML answers (GPU series are exported), 0 when it is absent or failing.", []string{"Hostname"}, nil)
	return c
}

// SetLabelers replaces how processes and GPUs are named (by default
// processes from /proc alone, GPUs after no pod).
func (c *GPUCollector) SetLabelers(process Labeler, device func(uuid string) ProcLabels) {
	c.mu.Lock()
	c.label, c.device = process, device
	c.mu.Unlock()
}

// SetUp says whether NVML works.
func (c *GPUCollector) SetUp(up bool) {
	c.mu.Lock()
	c.up = up
	c.mu.Unlock()
}

// Add keeps s as its device's latest sample.
func (c *GPUCollector) Add(s gpusample.Sample) {
	c.mu.Lock()
	c.last[s.Device] = s
	c.mu.Unlock()
}

// Event counts Xid errors.
func (c *GPUCollector) Event(e gpusample.Event) {
	if e.Kind != "xid" {
		return
	}
	c.mu.Lock()
	if len(c.xids) < 1024 {
		c.xids[[2]int{e.Device, int(e.Data)}]++
	}
	c.mu.Unlock()
}

func (c *GPUCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.procMem
	ch <- c.xid
	ch <- c.upDesc
}

func (c *GPUCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	up := 0.0
	if c.up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.upDesc, prometheus.GaugeValue, up, c.host)
	for dev, s := range c.last {
		labels := []string{strconv.Itoa(dev), s.UUID, s.Name, c.host}
		owner := c.device(s.UUID)
		for _, series := range gpuSeries {
			// Unsupported fields are NaN (or 0 for clocks and memory
			// totals the GPU does not report): left out, not exported as 0.
			v := series.value(&s)
			if math.IsNaN(v) {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.descs[series.name], prometheus.GaugeValue, v, append(append([]string{}, labels...), owner.Pod, owner.Namespace, owner.Container)...)
		}
		mem := seriesSet{}
		for _, p := range s.Processes {
			l := c.label(p.PID, s.UUID)
			proc := []string{l.Comm, l.Pod, l.Namespace, l.Container}
			if c.pid {
				proc = append([]string{strconv.FormatUint(uint64(p.PID), 10)}, proc...)
			}
			mem.add(sample{desc: c.procMem, kind: prometheus.GaugeValue, merge: mergeSum, v: float64(p.MemUsed), labels: append(slices.Clone(labels), proc...)})
		}
		for _, m := range mem {
			ch <- m.metric()
		}
	}
	for k, n := range c.xids {
		s := c.last[k[0]]
		ch <- prometheus.MustNewConstMetric(c.xid, prometheus.CounterValue, float64(n), strconv.Itoa(k[0]), s.UUID, s.Name, c.host, strconv.Itoa(k[1]))
	}
}
