package synctest

import (
	"github.com/cudatap/cudatap/tracer/model"
)

// Frames and lines the scenarios share.
const (
	frameDeviceSync  = 0x7f0000001000
	frameStreamSync  = 0x7f0000001100
	frameEventQuery  = 0x7f0000001200
	frameTorchSync   = 0x7f0000002000
	framePySync      = 0x7f0000002100
	frameEval        = 0x7f0000003000
	frameFinished    = 0x7f0000004000
	frameIsCompleted = 0x7f0000004100
	frameWatchdog    = 0x7f0000004200
	frameThread      = 0x7f0000005000
	frameStart       = 0x7f0000005100

	codeTorchSync     = 0x7f00aa000000
	codeStreamSync    = 0x7f00aa100000
	codeTrainStep     = 0x7f00bb000000
	codeTrainStep2    = 0x7f00bb100000
	codeBarrier       = 0x7f00bb200000
	codeModule        = 0x7f00bb300000
	codeDDPStep       = 0x7f00cc000000
	codeDDPModule     = 0x7f00cc100000
	codeDataNext      = 0x7f00dd000000
	codeStallStep     = 0x7f00dd100000
	codeStallItem     = 0x7f00dd200000
	streamCompute     = 0x55aa00
	streamNCCL        = 0x55cc00
	kernelTiny        = 0x401000
	kernelMatmul      = 0x402000
	kernelElementwise = 0x403000
)

// Lines the tests look for.
const (
	TorchSynchronize  = "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:1162 synchronize"
	TrainStep         = "/home/u/train.py:57 train_step"
	TrainBarrier      = "/home/u/utils.py:12 barrier"
	DDPStep           = "/home/u/ddp_train.py:40 train_step"
	StreamSynchronize = "/usr/local/lib/python3.12/dist-packages/torch/cuda/streams.py:105 synchronize"
	Finished          = "c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const (libtorch_cuda.so)"
	StallItem         = "/home/u/train.py:70 train_step"
)

// nativeSync names the native frames of a sync that Python called.
func (r *Recording) nativeSync() {
	r.Frame(frameDeviceSync, "cudaDeviceSynchronize (libcudart.so.13)")
	r.Frame(frameStreamSync, "cudaStreamSynchronize (libcudart.so.13)")
	r.Frame(frameTorchSync, "torch::cuda::synchronize(long) (libtorch_cuda.so)")
	r.Frame(framePySync, "THCPModule_cudaSynchronize(_object*, _object*) (libtorch_python.so)")
	r.Frame(frameEval, "_PyEval_EvalFrameDefault (python3.12)")
}

// TorchSync is a user's loop, train.py, that calls torch.cuda.synchronize()
// at line 57 every step (10 steps, 30 ms blocked each), and through its own
// helper utils.py:12 barrier() twice more (15 ms each): torch's
// __init__.py:1162 is where the CUDA call came from, the user's lines are
// where it was asked for.
func TorchSync() *Recording {
	const pid, tid = 4123, 4123
	r := New(pid, "python3")
	r.Thread(tid, "python3")
	r.nativeSync()
	torch := r.Py(codeTorchSync, TorchSynchronize)
	step := r.Py(codeTrainStep, TrainStep)
	barrier := r.Py(codeBarrier, TrainBarrier)
	caller := r.Py(codeTrainStep2, "/home/u/train.py:63 train_step")
	module := r.Py(codeModule, "/home/u/train.py:90 <module>")

	r.StreamCreate(tid, Base, streamCompute)
	t := Base + MS
	for i := range 10 {
		for k := range 5 {
			r.Launch(tid, t+uint64(k)*10*US, streamCompute, kernelMatmul)
		}
		e := r.DeviceSync(tid, t+100*US, 30*MS)
		Stack(e, frameDeviceSync, frameTorchSync, framePySync, frameEval)
		PyStack(e, torch, step, module)
		t += 31 * MS
		if i%5 == 4 {
			e := r.DeviceSync(tid, t, 15*MS)
			Stack(e, frameDeviceSync, frameTorchSync, framePySync, frameEval)
			PyStack(e, torch, barrier, caller, module)
			t += 16 * MS
		}
	}
	return r
}

// Watchdog is the tid of DDP's NCCL watchdog thread.
const Watchdog = 4123 + 77

// DDP is one rank of a 2-rank DDP job traced for 8.9 s: the main thread
// runs 100 steps of 89 ms (60 launches, an all-reduce on the NCCL stream
// and the end event PyTorch records after it, then
// torch.cuda.current_stream().synchronize() at ddp_train.py:40 blocking
// 20 ms: 2 s in all). NCCL's watchdog thread, pt_nccl_watchdg, polls every
// outstanding work's end event with cudaEventQuery every 100 ms; each
// answers "not ready" until 160 ms after it was recorded (the comm stream
// lags, waiting for the other rank), so its poll loops overlap: they add up
// to 11.8 s, more than the 8.9 s it ran.
func DDP() *Recording {
	const pid, main = 4123, 4123
	r := New(pid, "python3")
	r.Thread(main, "python3")
	r.Thread(Watchdog, "pt_nccl_watchdg")
	r.nativeSync()
	r.Frame(frameEventQuery, "cudaEventQuery (libcudart.so.13)")
	r.Frame(frameFinished, Finished)
	r.Frame(frameIsCompleted, "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted() (libtorch_cuda.so)")
	r.Frame(frameWatchdog, "c10d::ProcessGroupNCCL::watchdogHandler() (libtorch_cuda.so)")
	r.Frame(frameThread, "execute_native_thread_routine (libstdc++.so.6)")
	r.Frame(frameStart, "start_thread (libc.so.6)")
	sync := r.Py(codeStreamSync, StreamSynchronize)
	step := r.Py(codeDDPStep, DDPStep)
	module := r.Py(codeDDPModule, "/home/u/ddp_train.py:77 <module>")

	r.StreamCreate(main, Base, streamCompute)
	r.StreamCreate(main, Base+10*US, streamNCCL)
	const steps, period, lag = 100, 89 * MS, 160 * MS
	recorded := make([]uint64, steps)
	for i := range steps {
		t0 := Base + MS + uint64(i)*period
		for k := range 60 {
			r.Launch(main, t0+uint64(k)*MS, streamCompute, kernelMatmul)
		}
		r.AllReduce(main, t0+61*MS, streamNCCL, 1<<20)
		recorded[i] = t0 + 61*MS + 10*US
		r.EventRecord(main, recorded[i], 0xe000+uint64(i), streamNCCL)
		e := r.StreamSync(main, t0+62*MS, 20*MS, streamCompute)
		Stack(e, frameStreamSync, framePySync, frameEval)
		PyStack(e, sync, step, module)
	}
	end := Base + MS + steps*period
	ready := 0 // events before it answered ready
	for tick := Base + 50*MS; tick < end; tick += 100 * MS {
		t := tick
		for j := ready; j < steps && recorded[j] < tick; j++ {
			ok := tick >= recorded[j]+lag
			e := r.EventQuery(Watchdog, t, 2*US, 0xe000+uint64(j), ok)
			Stack(e, frameEventQuery, frameFinished, frameIsCompleted, frameWatchdog, frameThread, frameStart)
			t += 3 * US
			if ok && j == ready {
				ready++
			}
		}
	}
	return r
}

// LaunchLoop is a launch-bound loop: 20,000 tiny kernels, one every 10 µs
// on one stream, no synchronization; NVML saw the GPU busy util% of the
// time on average.
func LaunchLoop(util float64) *Recording {
	const pid, tid = 5000, 5000
	r := New(pid, "python3")
	r.Thread(tid, "python3")
	r.StreamCreate(tid, Base, streamCompute)
	t := Base + MS
	for range 20_000 {
		r.Launch(tid, t, streamCompute, kernelTiny)
		t += 10 * US
	}
	r.GPU = nvml(pid, util, Base, t)
	return r
}

// InputStall is a loop that waits for its input: 20 steps in which the
// host spends 80 ms outside CUDA (the next batch), then copies it (100 µs),
// launches 30 kernels 50 µs apart and reads the loss back with
// .item() at train.py:70 (a 5 ms stream sync that drains the stream):
// the GPU has nothing queued while the host waits. NVML saw it busy 6%.
func InputStall() *Recording {
	const pid, tid = 6000, 6000
	r := New(pid, "python3")
	r.Thread(tid, "python3")
	r.nativeSync()
	item := r.Py(codeStallItem, StallItem)
	module := r.Py(codeStallStep, "/home/u/train.py:95 <module>")
	r.StreamCreate(tid, Base, streamCompute)
	t := Base + MS
	for range 20 {
		t += 80 * MS // waiting for the DataLoader: no CUDA call
		r.CopyHtoD(tid, t, 100*US, streamCompute, 8<<20)
		t += 100 * US
		for range 30 {
			t += 50 * US
			r.Launch(tid, t, streamCompute, kernelElementwise)
		}
		t += 50 * US
		e := r.StreamSync(tid, t, 5*MS, streamCompute)
		Stack(e, frameStreamSync, frameEval)
		PyStack(e, item, module)
		t += 5 * MS
	}
	r.GPU = nvml(pid, 6, Base, t)
	return r
}

// nvml is what the sampler would have reported for one H200 that process
// pid used, busy util% of the time from start to end.
func nvml(pid uint32, util float64, start, end uint64) model.GPUReport {
	n := int((end-start)/(100*MS)) + 1
	return model.GPUReport{ClockErrorNs: 1500, GPUs: []model.GPUStats{{
		Index: 0, Name: "NVIDIA H200", Samples: n, StartNs: start, EndNs: end,
		UtilMean: model.Reading(util), UtilPeak: model.Reading(min(100, util*2)), MemUtilMean: 5,
		MemPeak: 20 << 30, MemTotal: 143771 << 20,
		PowerMeanW: 200, PowerPeakW: 250, PowerLimitW: 700, TempPeakC: 40,
		SMClockMeanMHz: 1980, SMClockMinMHz: 1980, SMClockMaxMHz: 1980,
		Processes: []model.GPUProcess{{PID: pid, MemPeak: 19 << 30, Polls: n, SMUtilMean: model.Reading(util)}},
	}}, Traced: []model.TracedHost{{PID: pid, CUDACalls: 1, HostBusy: model.Reading(0.9)}}}
}

// Pipelined is InputStall's loop with the GPU kept busy: each step
// enqueues its kernels first, then the host is away 80 ms while they run,
// and the .item() at the end finds them nearly done (0.2 ms). NVML saw the
// GPU busy 93%.
func Pipelined() *Recording {
	const pid, tid = 6001, 6001
	r := New(pid, "python3")
	r.Thread(tid, "python3")
	r.nativeSync()
	item := r.Py(codeStallItem, StallItem)
	module := r.Py(codeStallStep, "/home/u/train.py:95 <module>")
	r.StreamCreate(tid, Base, streamCompute)
	t := Base + MS
	for range 20 {
		r.CopyHtoD(tid, t, 100*US, streamCompute, 8<<20)
		t += 100 * US
		for range 30 {
			t += 50 * US
			r.Launch(tid, t, streamCompute, kernelMatmul)
		}
		t += 80 * MS // preparing the next batch while the GPU works
		e := r.StreamSync(tid, t, 200*US, streamCompute)
		Stack(e, frameStreamSync, frameEval)
		PyStack(e, item, module)
		t += 200 * US
	}
	r.GPU = nvml(pid, 93, Base, t)
	return r
}
