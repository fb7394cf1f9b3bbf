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
