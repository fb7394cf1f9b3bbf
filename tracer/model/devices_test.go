package model

import (
	"reflect"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

func setDevice(tid uint32, t uint64, d int) *ev {
	return call(event.CudaSetDevice, tid, t, us, uint64(d))
}

// Work goes to the device it runs on: a created stream's (current when it
// was created), else the calling thread's current device; a failed
// cudaSetDevice changes nothing, and each thread has its own.
func TestDevices(t *testing.T) {
	const kern = 0x401000
	p := run1(t,
		setDevice(1, 1000, 1),
		streamCreate(1, 2000, 0xa), // device 1
		setDevice(1, 3000, 0),
		launch(1, 4000, 0xa, kern),     // on 0xa: device 1
		launch(1, 5000, 0, kern),       // legacy, thread 1 on device 0
		setDevice(2, 6000, 1),          // thread 2 only
		launch(2, 7000, 0, kern),       // legacy, device 1
		setDevice(1, 8000, 3).ret(101), // cudaErrorInvalidDevice: still 0
		launch(1, 9000, 0, kern),       // device 0
		launch(3, 10000, 0, kern),      // a thread that never chose: device 0
	)
	var got []int8
	for _, op := range p.GPUOps {
		got = append(got, op.Device)
	}
	if want := []int8{1, 0, 1, 0, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("op devices %v, want %v", got, want)
	}
	if p.Streams[1].Device != 1 || !reflect.DeepEqual(DeviceBits(p.Devices), []int8{0, 1}) ||
		!reflect.DeepEqual(DeviceBits(p.Streams[0].Devices), []int8{0, 1}) {
		t.Errorf("stream device %d, process devices %v, legacy stream devices %v", p.Streams[1].Device, DeviceBits(p.Devices), DeviceBits(p.Streams[0].Devices))
	}
}

// In a process that ran before cudatap attached, a thread's device is
// unknown until it sets one: its default-stream work is not given to
// device 0 by default.
func TestDevicesAttachedLate(t *testing.T) {
	col := NewCollector()
	m := New(col)
	m.AttachedLate(testPID)
	for _, e := range []*ev{launch(1, 1000, 0, 0x401000), setDevice(1, 2000, 2), launch(1, 3000, 0, 0x401000)} {
		m.Handle(&e.Event)
	}
	res := m.Finish()
	ops := col.Traces[testPID].GPUOps
	if len(ops) != 2 || ops[0].Device != DeviceUnknown || ops[1].Device != 2 {
		t.Errorf("ops %+v", ops)
	}
	if !reflect.DeepEqual(DeviceBits(res.Processes[0].Devices), []int8{2, DeviceUnknown}) {
		t.Errorf("devices %v", DeviceBits(res.Processes[0].Devices))
	}
}
