package nvml_test

import (
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestRealCallCost logs what each NVML call the sampler makes costs on this
// machine's GPU 0 (skipped without NVML).
func TestRealCallCost(t *testing.T) {
	lib := gonvml.New()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Skipf("no NVML: %v", ret)
	}
	defer lib.Shutdown()
	d, ret := lib.DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		t.Skipf("no GPU 0: %v", ret)
	}
	now := uint64(time.Now().UnixMicro())
	calls := []struct {
		name string
		f    func() gonvml.Return
	}{
		{"GetSamples(GPU)", func() gonvml.Return { _, _, r := d.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, now-100000); return r }},
		{"GetSamples(MEM)", func() gonvml.Return { _, _, r := d.GetSamples(gonvml.MEMORY_UTILIZATION_SAMPLES, now-100000); return r }},
		{"GetUtilizationRates", func() gonvml.Return { _, r := d.GetUtilizationRates(); return r }},
		{"GetMemoryInfo_v2", func() gonvml.Return { _, r := d.GetMemoryInfo_v2(); return r }},
		{"GetTemperature", func() gonvml.Return { _, r := d.GetTemperature(gonvml.TEMPERATURE_GPU); return r }},
		{"GetPowerUsage", func() gonvml.Return { _, r := d.GetPowerUsage(); return r }},
		{"GetEnforcedPowerLimit", func() gonvml.Return { _, r := d.GetEnforcedPowerLimit(); return r }},
		{"GetClockInfo(SM)", func() gonvml.Return { _, r := d.GetClockInfo(gonvml.CLOCK_SM); return r }},
		{"GetClockInfo(MEM)", func() gonvml.Return { _, r := d.GetClockInfo(gonvml.CLOCK_MEM); return r }},
		{"GetMaxClockInfo(SM)", func() gonvml.Return { _, r := d.GetMaxClockInfo(gonvml.CLOCK_SM); return r }},
		{"GetCurrentClocksEventReasons", func() gonvml.Return { _, r := d.GetCurrentClocksEventReasons(); return r }},
		{"GetFieldValues(PCIe)", func() gonvml.Return {
			v := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES}, {FieldId: gonvml.FI_DEV_PCIE_COUNT_RX_BYTES}}
			return d.GetFieldValues(v)
		}},
		{"GetComputeRunningProcesses", func() gonvml.Return { _, r := d.GetComputeRunningProcesses(); return r }},
		{"GetProcessUtilization", func() gonvml.Return { _, r := d.GetProcessUtilization(now - 100000); return r }},
		{"GetPcieThroughput(TX)", func() gonvml.Return { _, r := d.GetPcieThroughput(gonvml.PCIE_UTIL_TX_BYTES); return r }},
	}
	for _, c := range calls {
		const n = 20
		var r gonvml.Return
		t0 := time.Now()
		for i := 0; i < n; i++ {
			r = c.f()
		}
		t.Logf("%-30s %10v  %v", c.name, time.Since(t0)/n, r)
	}
}

// TestRealTimestamps logs how NVML's sample timestamps relate to the host
// wall clock at the moment of the call (skipped without NVML).
func TestRealTimestamps(t *testing.T) {
	lib := gonvml.New()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Skipf("no NVML: %v", ret)
	}
	defer lib.Shutdown()
	n, _ := lib.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, _ := lib.DeviceGetHandleByIndex(i)
		var maxLead int64 = -1 << 62
		for k := 0; k < 60; k++ {
			w0 := time.Now().UnixMicro()
			_, buf, ret := d.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, 0)
			w1 := time.Now().UnixMicro()
			pbuf, pret := d.GetProcessUtilization(0)
			fv := []gonvml.FieldValue{{FieldId: gonvml.FI_DEV_PCIE_COUNT_TX_BYTES}}
			d.GetFieldValues(fv)
			w2 := time.Now().UnixMicro()
			if ret != gonvml.SUCCESS || len(buf) == 0 {
				t.Logf("GPU %d call %d: %v", i, k, ret)
				continue
			}
			last := buf[len(buf)-1].TimeStamp
			var maxTS uint64
			for _, b := range buf {
				maxTS = max(maxTS, b.TimeStamp)
			}
			var pmax uint64
			for _, p := range pbuf {
				pmax = max(pmax, p.TimeStamp)
			}
			lead := int64(maxTS) - w1
			maxLead = max(maxLead, lead)
			if k%6 == 0 || lead > 0 {
				t.Logf("GPU %d call %2d: %3d entries, first %d last %d (max %d), newest-w0 %+d µs newest-w1 %+d µs, step %d µs; proc %d entries (%v) newest-w1 %+d µs; field ts-w2 %+d µs",
					i, k, len(buf), buf[0].TimeStamp, last, maxTS, int64(maxTS)-w0, lead, int64(last)-int64(buf[max(0, len(buf)-2)].TimeStamp),
					len(pbuf), pret, int64(pmax)-w1, fv[0].Timestamp-w2)
			}
			time.Sleep(23 * time.Millisecond)
		}
		t.Logf("GPU %d: max lead of a sample over the call's return %+d µs", i, maxLead)
	}
}
