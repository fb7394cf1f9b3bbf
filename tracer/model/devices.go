package model

import "github.com/cudatap/cudatap/tracer/event"

// currentDevice is thread tid's current device: the last it set, else
// CUDA's default, device 0 — unknown in a process that ran before cudatap
// attached (it may have set one then).
func (ps *procState) currentDevice(tid uint32) int8 {
	if d, ok := ps.devices[tid]; ok {
		return d
	}
	if ps.p.AttachedLate {
		return DeviceUnknown
	}
	return 0
}

// setDevice follows cudaSetDevice: once it succeeded, the thread's work
// on the default streams goes to that device.
func (m *Model) setDevice(ps *procState, _ *event.Spec, _ *event.Event) {
	call := &m.call
	if d := call.Args.Device; call.HasRet && call.Ret == 0 && d >= 0 && d < maxDevices {
		ps.devices[call.TID] = int8(d)
	}
}
