package event

import (
	"encoding/binary"
	"testing"
)

// regs builds Args from rdi, rsi, rdx, rcx, r8, r9, [rsp+8], [rsp+16], [rsp+24].
func regs(v ...uint64) (a [NArgs]uint64) {
	copy(a[:], v)
	return a
}

// xy packs a dim3's x and y into one register, as the ABI passes it.
func xy(x, y uint32) uint64 { return uint64(x) | uint64(y)<<32 }

// launchConfig lays out cudaLaunchConfig_t {dim3 grid; dim3 block; size_t
// smem; cudaStream_t stream; attrs*; unsigned n} as the 48 bytes the BPF side
// copies from behind argument 0.
func launchConfig(grid, block Dim3, smem, stream, attrs uint64) (x [NExt]uint64) {
	var b [8 * NExt]byte
	le := binary.LittleEndian
	for i, v := range []uint32{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		le.PutUint32(b[4*i:], v)
	}
	le.PutUint64(b[24:], smem)
	le.PutUint64(b[32:], stream)
	le.PutUint64(b[40:], attrs)
	for i := range x {
		x[i] = le.Uint64(b[8*i:])
	}
	return x
}

// nvtxAttributes lays out an nvtxEventAttributes_t (nvToolsExt.h, struct
// nvtxEventAttributes_v2, 48 bytes) as the BPF side copies it into Ext:
// version 3, size 48, a color and a payload, messageType at offset 32 (the
// 4 bytes after it are padding, garbage here), message at offset 40.
func nvtxAttributes(messageType uint32, message uint64) (x [NExt]uint64) {
	x[0] = 3 | 48<<16 | 7<<32 // version, size, category
	x[1] = 1 | 0xff00ff<<32   // colorType ARGB, color
	x[2], x[3] = 1, 12345     // payloadType, the payload
	x[4] = uint64(messageType) | 0xbad<<32
	x[5] = message
	return x
}

type argsCase struct {
	api  API
	sym  int
	args [NArgs]uint64
	ext  [NExt]uint64
	out  uint64
	want Args
}

// argsCases has one or more hand-built calls for every API in the table,
// arguments placed where CUDA_API.md says the x86-64 ABI puts them
// (abi_test.go passes the same calls as arm64 does).
var argsCases = []argsCase{
	// cudaStreamCreate(cudaStream_t *pStream): the handle comes from *pStream at return.
	{api: CudaStreamCreate, args: regs(0x7ffd0000), out: 0x5500aa,
		want: Args{Ptr: 0x7ffd0000, Stream: 0x5500aa, HasStream: true}},
	{api: CudaStreamCreateWithFlags, args: regs(0x7ffd0008, 1), out: 0x5500bb,
		want: Args{Ptr: 0x7ffd0008, Stream: 0x5500bb, HasStream: true, Flags: 1}},
	// priority is an int: -1 arrives sign-extended or as a 32-bit value in rdx.
	{api: CudaStreamCreateWithPriority, args: regs(0x7ffd0010, 1, 0xffffffff), out: 0x5500cc,
		want: Args{Ptr: 0x7ffd0010, Stream: 0x5500cc, HasStream: true, Flags: 1, Priority: -1}},
	{api: CudaStreamCreateWithPriority, args: regs(0x7ffd0010, 0, 0xffff_ffff_ffff_fffe), out: 0x5500dd,
		want: Args{Ptr: 0x7ffd0010, Stream: 0x5500dd, HasStream: true, Priority: -2}},
	{api: CudaStreamDestroy, args: regs(0x5500aa),
		want: Args{Stream: 0x5500aa, HasStream: true}},
	// cudaLaunchKernel(func, dim3 grid, dim3 block, void **args, size_t smem, stream):
	// func=rdi, grid=rsi(x|y)+rdx(z), block=rcx(x|y)+r8(z), args=r9, smem=[rsp+8], stream=[rsp+16].
	{api: CudaLaunchKernel, args: regs(0x401000, xy(1024, 2), 3, xy(256, 4), 1, 0x7ffe0000, 4096, 0x5500aa),
		want: Args{Func: 0x401000, Grid: Dim3{1024, 2, 3}, Block: Dim3{256, 4, 1}, SharedMem: 4096,
			Stream: 0x5500aa, HasStream: true}},
	// The upper half of the z register is garbage the callee ignores.
	{api: CudaLaunchKernel, sym: 1, args: regs(0x401000, xy(0xffffffff, 65535), 0xdead_0000_0000_0040, xy(32, 32), 0xbeef_0000_0000_0001, 0, 0, 0),
		want: Args{Func: 0x401000, Grid: Dim3{0xffffffff, 65535, 64}, Block: Dim3{32, 32, 1},
			HasStream: true}},
	{api: CudaLaunchCooperativeKernel, args: regs(0x402000, xy(80, 1), 1, xy(1024, 1), 1, 0x7ffe0000, 65536, 0x77),
		want: Args{Func: 0x402000, Grid: Dim3{80, 1, 1}, Block: Dim3{1024, 1, 1}, SharedMem: 65536,
			Stream: 0x77, HasStream: true}},
	// cudaLaunchKernelExC(config, func, args): the config struct is in Ext.
	{api: CudaLaunchKernelExC, args: regs(0x7ffd1000, 0x403000, 0x7ffe1000),
		ext: launchConfig(Dim3{7, 8, 9}, Dim3{128, 2, 3}, 1024, 0x5500ee, 0x7ffd2000),
		want: Args{Func: 0x403000, Grid: Dim3{7, 8, 9}, Block: Dim3{128, 2, 3}, SharedMem: 1024,
			Stream: 0x5500ee, HasStream: true}},
	// cudaMemcpy(dst, src, count, kind)
	{api: CudaMemcpy, args: regs(0x7f0000001000, 0x600000, 1<<20, 2),
		want: Args{Dst: 0x7f0000001000, Src: 0x600000, Bytes: 1 << 20, Kind: DeviceToHost}},
	{api: CudaMemcpy, sym: 1, args: regs(0xa, 0xb, 3, 4),
		want: Args{Dst: 0xa, Src: 0xb, Bytes: 3, Kind: DefaultKind}},
	// cudaMemcpyAsync(dst, src, count, kind, stream)
	{api: CudaMemcpyAsync, args: regs(0x600000, 0x7f0000001000, 4096, 1, 0x5500aa),
		want: Args{Dst: 0x600000, Src: 0x7f0000001000, Bytes: 4096, Kind: HostToDevice, Stream: 0x5500aa, HasStream: true}},
	// cudaMemcpy2D(dst, dpitch, src, spitch, width, height, kind=[rsp+8])
	{api: CudaMemcpy2D, args: regs(0x600000, 512, 0x700000, 640, 500, 30, 3),
		want: Args{Dst: 0x600000, Src: 0x700000, Bytes: 15000, Kind: DeviceToDevice}},
	// cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind=[rsp+8], stream=[rsp+16])
	{api: CudaMemcpy2DAsync, args: regs(0x600000, 1024, 0x7f0000000000, 1000, 1000, 7, 1, 0x5500aa),
		want: Args{Dst: 0x600000, Src: 0x7f0000000000, Bytes: 7000, Kind: HostToDevice, Stream: 0x5500aa, HasStream: true}},
	// cudaMemset(devPtr, value, count)
	{api: CudaMemset, args: regs(0x600000, 0xff, 1<<30),
		want: Args{Dst: 0x600000, Bytes: 1 << 30}},
	// cudaMemsetAsync(devPtr, value, count, stream)
	{api: CudaMemsetAsync, args: regs(0x600000, 0, 256, 0x5500aa),
		want: Args{Dst: 0x600000, Bytes: 256, Stream: 0x5500aa, HasStream: true}},
	// cudaEventCreate(cudaEvent_t *): the handle comes from *event at return.
	{api: CudaEventCreate, args: regs(0x7ffd3000), out: 0xe1,
		want: Args{Ptr: 0x7ffd3000, Event: 0xe1}},
	{api: CudaEventCreateWithFlags, args: regs(0x7ffd3008, 2), out: 0xe2,
		want: Args{Ptr: 0x7ffd3008, Event: 0xe2, Flags: 2}},
	{api: CudaEventDestroy, args: regs(0xe1),
		want: Args{Event: 0xe1}},
	// cudaEventRecord(event, stream)
	{api: CudaEventRecord, args: regs(0xe1, 0x5500aa),
		want: Args{Event: 0xe1, Stream: 0x5500aa, HasStream: true}},
	{api: CudaEventRecordWithFlags, sym: 1, args: regs(0xe2, 0, 1),
		want: Args{Event: 0xe2, HasStream: true, Flags: 1}},
	// cudaStreamWaitEvent(stream, event, flags)
	{api: CudaStreamWaitEvent, args: regs(0x5500bb, 0xe1, 0),
		want: Args{Stream: 0x5500bb, HasStream: true, Event: 0xe1}},
	{api: CudaEventSynchronize, args: regs(0xe1),
		want: Args{Event: 0xe1}},
	{api: CudaEventQuery, args: regs(0xe2),
		want: Args{Event: 0xe2}},
	{api: CudaStreamSynchronize, args: regs(0x5500aa),
		want: Args{Stream: 0x5500aa, HasStream: true}},
	{api: CudaStreamQuery, args: regs(2),
		want: Args{Stream: 2, HasStream: true}},
	{api: CudaDeviceSynchronize, args: regs(0x1234, 0x5678), // registers hold garbage
		want: Args{}},
	// cudaMalloc(void **p, size): the allocation comes from *p at return.
	{api: CudaMalloc, args: regs(0x7ffd4000, 1<<24), out: 0x7f1200000000,
		want: Args{Ptr: 0x7f1200000000, Size: 1 << 24}},
	{api: CudaFree, args: regs(0x7f1200000000),
		want: Args{Ptr: 0x7f1200000000}},
	// cudaMallocAsync(void **p, size, stream)
	{api: CudaMallocAsync, args: regs(0x7ffd4008, 4096, 0x5500aa), out: 0x7f1300000000,
		want: Args{Ptr: 0x7f1300000000, Size: 4096, Stream: 0x5500aa, HasStream: true}},
	// cudaFreeAsync(ptr, stream)
	{api: CudaFreeAsync, args: regs(0x7f1300000000, 0x5500aa),
		want: Args{Ptr: 0x7f1300000000, Stream: 0x5500aa, HasStream: true}},
	// cudaHostAlloc(void **p, size, flags)
	{api: CudaHostAlloc, args: regs(0x7ffd5000, 1<<21, 1), out: 0x7f4400000000,
		want: Args{Ptr: 0x7f4400000000, Size: 1 << 21, Flags: 1}},
	// cudaMallocHost(void **p, size)
	{api: CudaMallocHost, args: regs(0x7ffd5008, 8192), out: 0x7f4500000000,
		want: Args{Ptr: 0x7f4500000000, Size: 8192}},
	{api: CudaFreeHost, args: regs(0x7f4500000000),
		want: Args{Ptr: 0x7f4500000000}},
	// cudaHostRegister(ptr, size, flags): the range is the argument itself.
	{api: CudaHostRegister, args: regs(0x55aa00000000, 1<<16, 3),
		want: Args{Ptr: 0x55aa00000000, Size: 1 << 16, Flags: 3}},
	{api: CudaHostUnregister, args: regs(0x55aa00000000),
		want: Args{Ptr: 0x55aa00000000}},
	// cudaGraphLaunch(exec, stream)
	{api: CudaGraphLaunch, args: regs(0x9900, 0x5500aa),
		want: Args{Ptr: 0x9900, Stream: 0x5500aa, HasStream: true}},
	// cudaLaunchHostFunc(stream, fn, userData)
	{api: CudaLaunchHostFunc, args: regs(0x5500aa, 0x404000, 0x7ffd6000),
		want: Args{Stream: 0x5500aa, HasStream: true, Func: 0x404000}},

	// Driver API. cuLaunchKernel(f, gx, gy, gz, bx, by, bz=[rsp+8], shmem=[rsp+16],
	// hStream=[rsp+24], params, extra): each dimension is its own unsigned.
	{api: CuLaunchKernel, args: regs(0x55f000, 120, 2, 3, 256, 4, 0xdead_0000_0002, 0xbeef_0000_c000, 0x5500aa),
		want: Args{Func: 0x55f000, Grid: Dim3{120, 2, 3}, Block: Dim3{256, 4, 2}, SharedMem: 0xc000,
			Stream: 0x5500aa, HasStream: true}},
	{api: CuLaunchKernel, sym: 1, args: regs(0x55f000, 1, 1, 1, 32, 1, 1, 0, 0),
		want: Args{Func: 0x55f000, Grid: Dim3{1, 1, 1}, Block: Dim3{32, 1, 1}, HasStream: true}},
	{api: CuLaunchCooperativeKernel, args: regs(0x55f100, 132, 1, 1, 1024, 1, 1, 98304, 0x77),
		want: Args{Func: 0x55f100, Grid: Dim3{132, 1, 1}, Block: Dim3{1024, 1, 1}, SharedMem: 98304,
			Stream: 0x77, HasStream: true}},
	// cuLaunchKernelEx(config, f, params, extra): CUlaunchConfig {gridDimX, Y, Z,
	// blockDimX, Y, Z, sharedMemBytes, (pad), hStream at 32, attrs, numAttrs}.
	{api: CuLaunchKernelEx, args: regs(0x7ffd7000, 0x55f200, 0x7ffe2000),
		ext: launchConfig(Dim3{4, 5, 6}, Dim3{64, 2, 1}, 0xffff_ffff_0000_2000 /* smem | padding */, 0x5500ee, 0),
		want: Args{Func: 0x55f200, Grid: Dim3{4, 5, 6}, Block: Dim3{64, 2, 1}, SharedMem: 0x2000,
			Stream: 0x5500ee, HasStream: true}},
	// cuMemcpy*Async_v2(dst, src, bytes, stream): the direction is in the name.
	{api: CuMemcpyHtoDAsync, args: regs(0x7f1200000000, 0x5555000000, 4096, 0x5500aa),
		want: Args{Dst: 0x7f1200000000, Src: 0x5555000000, Bytes: 4096, Kind: HostToDevice, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemcpyDtoHAsync, sym: 1, args: regs(0x5555000000, 0x7f1200000000, 8, 0),
		want: Args{Dst: 0x5555000000, Src: 0x7f1200000000, Bytes: 8, Kind: DeviceToHost, HasStream: true}},
	{api: CuMemcpyDtoDAsync, args: regs(0x7f1200001000, 0x7f1200000000, 1<<20, 0x5500aa),
		want: Args{Dst: 0x7f1200001000, Src: 0x7f1200000000, Bytes: 1 << 20, Kind: DeviceToDevice, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemcpyAsync, args: regs(0xa, 0xb, 99, 0x5500aa),
		want: Args{Dst: 0xa, Src: 0xb, Bytes: 99, Kind: DefaultKind, Stream: 0x5500aa, HasStream: true}},
	// cuMemcpyHtoD_v2(dst, src, bytes), cuMemcpyDtoH_v2(dst, src, bytes)
	{api: CuMemcpyHtoD, args: regs(0x7f1200000000, 0x5555000000, 64),
		want: Args{Dst: 0x7f1200000000, Src: 0x5555000000, Bytes: 64, Kind: HostToDevice}},
	{api: CuMemcpyDtoH, args: regs(0x5555000000, 0x7f1200000000, 65),
		want: Args{Dst: 0x5555000000, Src: 0x7f1200000000, Bytes: 65, Kind: DeviceToHost}},
	// cuMemsetD8Async(dst, uc, N, stream), cuMemsetD32Async(dst, ui, N, stream): N elements.
	{api: CuMemsetD8Async, args: regs(0x7f1200000000, 0xff, 1000, 0x5500aa),
		want: Args{Dst: 0x7f1200000000, Bytes: 1000, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemsetD32Async, sym: 1, args: regs(0x7f1200000000, 0xffffffff, 1000, 0),
		want: Args{Dst: 0x7f1200000000, Bytes: 4000, HasStream: true}},
	{api: CuEventRecord, args: regs(0xe1, 0x5500aa),
		want: Args{Event: 0xe1, Stream: 0x5500aa, HasStream: true}},
	{api: CuEventRecordWithFlags, args: regs(0xe1, 0x1, 1),
		want: Args{Event: 0xe1, Stream: 0x1, HasStream: true, Flags: 1}},
	{api: CuStreamWaitEvent, args: regs(0x5500bb, 0xe1, 0),
		want: Args{Stream: 0x5500bb, HasStream: true, Event: 0xe1}},
	{api: CuEventSynchronize, args: regs(0xe1),
		want: Args{Event: 0xe1}},
	{api: CuEventQuery, args: regs(0xe2),
		want: Args{Event: 0xe2}},
	// cuStreamCreate(CUstream *, flags), cuStreamCreateWithPriority(CUstream *, flags, prio)
	{api: CuStreamCreate, args: regs(0x7ffd0000, 1), out: 0x5500ff,
		want: Args{Ptr: 0x7ffd0000, Stream: 0x5500ff, HasStream: true, Flags: 1}},
	{api: CuStreamCreateWithPriority, args: regs(0x7ffd0000, 0, 0xfffffffc), out: 0x550100,
		want: Args{Ptr: 0x7ffd0000, Stream: 0x550100, HasStream: true, Priority: -4}},
	{api: CuStreamDestroy, args: regs(0x5500ff),
		want: Args{Stream: 0x5500ff, HasStream: true}},
	{api: CuStreamSynchronize, args: regs(0x5500ff),
		want: Args{Stream: 0x5500ff, HasStream: true}},
	{api: CuStreamQuery, sym: 1, args: regs(0),
		want: Args{HasStream: true}},
	{api: CuCtxSynchronize, want: Args{}},
	// cuMemAlloc_v2(CUdeviceptr *, size): the allocation comes from Out.
	{api: CuMemAlloc, args: regs(0x7ffd4000, 1<<30), out: 0x7f3000000000,
		want: Args{Ptr: 0x7f3000000000, Size: 1 << 30}},
	{api: CuMemFree, args: regs(0x7f3000000000),
		want: Args{Ptr: 0x7f3000000000}},
	{api: CuMemAllocAsync, args: regs(0x7ffd4000, 512, 0x5500aa), out: 0x7f3100000000,
		want: Args{Ptr: 0x7f3100000000, Size: 512, Stream: 0x5500aa, HasStream: true}},
	// The other device allocations: managed (ptr *, size, flags), pitched
	// (ptr *, pitch *, width, height[, element size]: width × height asked),
	// from a pool (ptr *, size, pool, stream), and physical memory by handle.
	{api: CudaMallocManaged, args: regs(0x7ffd4000, 1<<20, 1), out: 0x7f3200000000,
		want: Args{Ptr: 0x7f3200000000, Size: 1 << 20, Flags: 1}},
	{api: CuMemAllocManaged, args: regs(0x7ffd4000, 1<<20, 2), out: 0x7f3300000000,
		want: Args{Ptr: 0x7f3300000000, Size: 1 << 20, Flags: 2}},
	{api: CudaMallocPitch, args: regs(0x7ffd4000, 0x7ffd4008, 1000, 3), out: 0x7f3400000000,
		want: Args{Ptr: 0x7f3400000000, Size: 3000}},
	{api: CuMemAllocPitch, args: regs(0x7ffd4000, 0x7ffd4008, 1000, 3, 4), out: 0x7f3500000000,
		want: Args{Ptr: 0x7f3500000000, Size: 3000}},
	{api: CudaMallocFromPoolAsync, sym: 1, args: regs(0x7ffd4000, 4096, 0x5600aa, 0x5500aa), out: 0x7f3600000000,
		want: Args{Ptr: 0x7f3600000000, Size: 4096, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemAllocFromPoolAsync, args: regs(0x7ffd4000, 4096, 0x5600aa, 0x5500aa), out: 0x7f3700000000,
		want: Args{Ptr: 0x7f3700000000, Size: 4096, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemCreate, args: regs(0x7ffd4000, 2<<20, 0x7ffd4100, 0), out: 0x55aa0010,
		want: Args{Ptr: 0x55aa0010, Size: 2 << 20}},
	{api: CuMemRelease, args: regs(0x55aa0010),
		want: Args{Ptr: 0x55aa0010}},
	// NVTX: the message is copied as a string (Ptr keys it, 0 when none
	// was copied, as here); the domain is the injection library's
	// (FlagInjected: TestNVTXMessage), 0 for a hooked library's calls.
	{api: NvtxRangePushA, args: regs(0x7f0010), ext: [NExt]uint64{0xd0}, want: Args{}},
	{api: NvtxRangePop, want: Args{}},
	{api: NvtxRangeStartA, args: regs(0x7f0010), want: Args{}},
	{api: NvtxRangeEnd, args: regs(42), want: Args{Event: 42}},
	{api: NvtxMarkA, args: regs(0x7f0010), want: Args{}},
	// Their other forms (symbols 1..3): W, Ex (the attributes copied into
	// Ext), a domain's (the handle first; NULL while no NVTX tool is
	// loaded), nvtxDomainRangeEnd(domain, id).
	{api: NvtxRangePushA, sym: 1, args: regs(0x7f0010), want: Args{}},
	{api: NvtxRangePushA, sym: 2, args: regs(0x7ffd10), ext: nvtxAttributes(1, 0x7f0020), want: Args{}},
	{api: NvtxRangePushA, sym: 3, args: regs(0x5d00, 0x7ffd10), ext: nvtxAttributes(2, 0x7f0020), want: Args{Comm: 0x5d00}},
	{api: NvtxRangePushA, sym: 3, args: regs(0, 0x7ffd10), ext: nvtxAttributes(3, 0x5e00), want: Args{Comm: NVTXUnnamedDomain}},
	{api: NvtxRangePop, sym: 1, args: regs(0x5d00), want: Args{Comm: 0x5d00}},
	{api: NvtxRangeStartA, sym: 1, args: regs(0x7f0010), want: Args{}},
	{api: NvtxRangeStartA, sym: 2, args: regs(0x7ffd10), ext: nvtxAttributes(2, 0x7f0020), want: Args{}},
	{api: NvtxRangeStartA, sym: 3, args: regs(0x5d00, 0x7ffd10), ext: nvtxAttributes(1, 0x7f0020), want: Args{Comm: 0x5d00}},
	{api: NvtxRangeEnd, sym: 1, args: regs(0x5d00, 42), want: Args{Event: 42, Comm: 0x5d00}},
	{api: NvtxRangeEnd, sym: 1, args: regs(0, 42), want: Args{Event: 42, Comm: NVTXUnnamedDomain}},
	{api: NvtxMarkA, sym: 1, args: regs(0x7f0010), want: Args{}},
	{api: NvtxMarkA, sym: 2, args: regs(0x7ffd10), ext: nvtxAttributes(1, 0x7f0020), want: Args{}},
	{api: NvtxMarkA, sym: 3, args: regs(0x5d00, 0x7ffd10), ext: nvtxAttributes(1, 0x7f0020), want: Args{Comm: 0x5d00}},
	{api: CuMemFreeAsync, args: regs(0x7f3100000000, 0x5500aa),
		want: Args{Ptr: 0x7f3100000000, Stream: 0x5500aa, HasStream: true}},
	{api: CuMemHostAlloc, args: regs(0x7ffd5000, 1<<22, 2), out: 0x7f4600000000,
		want: Args{Ptr: 0x7f4600000000, Size: 1 << 22, Flags: 2}},
	{api: CuMemAllocHost, args: regs(0x7ffd5000, 4096), out: 0x7f4700000000,
		want: Args{Ptr: 0x7f4700000000, Size: 4096}},
	{api: CuMemFreeHost, args: regs(0x7f4700000000),
		want: Args{Ptr: 0x7f4700000000}},
	{api: CuMemHostRegister, args: regs(0x55bb00000000, 1<<20, 1),
		want: Args{Ptr: 0x55bb00000000, Size: 1 << 20, Flags: 1}},
	{api: CuMemHostUnregister, args: regs(0x55bb00000000),
		want: Args{Ptr: 0x55bb00000000}},
	{api: CuGraphLaunch, sym: 1, args: regs(0x9901, 0x5500aa),
		want: Args{Ptr: 0x9901, Stream: 0x5500aa, HasStream: true}},
	// Load-time calls: the handle they create comes from Out, the name from the record's string.
	{api: CuModuleGetFunction, args: regs(0x7ffd8000, 0x6000, 0x7ffd9000), out: 0x55f000,
		want: Args{Ptr: 0x55f000}},
	{api: CuLibraryGetKernel, args: regs(0x7ffd8000, 0x6100, 0x7ffd9000), out: 0x55f300,
		want: Args{Ptr: 0x55f300}},
	// cuKernelGetFunction(CUfunction *, CUkernel)
	{api: CuKernelGetFunction, args: regs(0x7ffd8000, 0x55f300), out: 0x55f400,
		want: Args{Ptr: 0x55f400, Func: 0x55f300}},

	// Graph capture: cudaStreamBeginCapture(stream, mode), cudaStreamEndCapture(stream, cudaGraph_t *),
	// cudaGraphInstantiate(cudaGraphExec_t *, graph, flags); the new handles come from Out.
	{api: CudaStreamBeginCapture, sym: 1, args: regs(0x5500aa, 1),
		want: Args{Stream: 0x5500aa, HasStream: true, Flags: 1}},
	{api: CudaStreamEndCapture, args: regs(0x5500aa, 0x7ffd8000), out: 0x6600,
		want: Args{Stream: 0x5500aa, HasStream: true, Graph: 0x6600}},
	{api: CudaGraphInstantiate, args: regs(0x7ffd8000, 0x6600, 0), out: 0x7700,
		want: Args{Ptr: 0x7700, Graph: 0x6600}},
	{api: CudaGraphInstantiateWithFlags, args: regs(0x7ffd8000, 0x6600, 1), out: 0x7700,
		want: Args{Ptr: 0x7700, Graph: 0x6600}},
	{api: CuStreamBeginCapture, args: regs(0x5500aa, 2),
		want: Args{Stream: 0x5500aa, HasStream: true, Flags: 2}},
	{api: CuStreamEndCapture, sym: 1, args: regs(0x5500aa, 0x7ffd8000), out: 0x6600,
		want: Args{Stream: 0x5500aa, HasStream: true, Graph: 0x6600}},
	{api: CuGraphInstantiate, args: regs(0x7ffd8000, 0x6600, 0), out: 0x7700,
		want: Args{Ptr: 0x7700, Graph: 0x6600}},

	// Graphs built by hand: the new graph and node come from Out; a kernel
	// node's parameters {func; grid; block; sharedMemBytes} are copied
	// from behind the parameters pointer into Ext.
	{api: CudaGraphCreate, args: regs(0x7ffd8000, 0), out: 0x6600,
		want: Args{Graph: 0x6600}},
	{api: CuGraphCreate, args: regs(0x7ffd8000, 0), out: 0x6601,
		want: Args{Graph: 0x6601}},
	{api: CudaGraphAddKernelNode, args: regs(0x7ffd8000, 0x6600, 0x7ffd9000, 1, 0x7ffda000), out: 0x8800,
		ext:  [NExt]uint64{0x401000, xy(7, 3), xy(2, 128), xy(2, 1), 4096},
		want: Args{Node: 0x8800, Graph: 0x6600, Func: 0x401000, Grid: Dim3{7, 3, 2}, Block: Dim3{128, 2, 1}, SharedMem: 4096}},
	{api: CuGraphAddKernelNode, args: regs(0x7ffd8000, 0x6600, 0, 0, 0x7ffda000), out: 0x8800,
		ext:  [NExt]uint64{0x55f400, xy(20, 1), xy(1, 256), xy(1, 1), 0},
		want: Args{Node: 0x8800, Graph: 0x6600, Func: 0x55f400, Grid: Dim3{20, 1, 1}, Block: Dim3{256, 1, 1}}},
	{api: CudaGraphExecKernelNodeSetParams, args: regs(0x7700, 0x8800, 0x7ffda000),
		ext:  [NExt]uint64{0x402000, xy(6, 1), xy(1, 128), xy(1, 1), 0},
		want: Args{Ptr: 0x7700, Node: 0x8800, Func: 0x402000, Grid: Dim3{6, 1, 1}, Block: Dim3{128, 1, 1}}},
	{api: CuGraphExecKernelNodeSetParams, sym: 1, args: regs(0x7700, 0x8800, 0x7ffda000),
		ext:  [NExt]uint64{0x55f300, xy(9, 1), xy(1, 128), xy(1, 1), 16},
		want: Args{Ptr: 0x7700, Node: 0x8800, Func: 0x55f300, Grid: Dim3{9, 1, 1}, Block: Dim3{128, 1, 1}, SharedMem: 16}},
	{api: CudaGraphExecUpdate, args: regs(0x7700, 0x6601, 0x7ffd8000),
		want: Args{Ptr: 0x7700, Graph: 0x6601}},
	{api: CuGraphExecUpdate, args: regs(0x7700, 0x6601, 0x7ffd8000),
		want: Args{Ptr: 0x7700, Graph: 0x6601}},
	{api: CudaGraphDestroy, args: regs(0x6600), want: Args{Graph: 0x6600}},
	{api: CuGraphDestroy, args: regs(0x6600), want: Args{Graph: 0x6600}},
	{api: CudaGraphExecDestroy, args: regs(0x7700), want: Args{Ptr: 0x7700}},
	{api: CuGraphExecDestroy, args: regs(0x7700), want: Args{Ptr: 0x7700}},

	// NCCL. ncclAllReduce(send, recv, count, type, op, comm, stream=[rsp+8])
	{api: NcclAllReduce, args: regs(0x7f1000, 0x7f2000, 1000, 7 /* float32 */, 0 /* sum */, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 1000, DataType: 7, RedOp: 0, Comm: 0xc0, Stream: 0x5500aa,
			HasStream: true, Peer: -1, Bytes: 4000}},
	// ncclBroadcast(send, recv, count, type, root, comm, stream=[rsp+8])
	{api: NcclBroadcast, args: regs(0x7f1000, 0x7f2000, 10, 9 /* bfloat16 */, 3, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 10, DataType: 9, Peer: 3, Comm: 0xc0, Stream: 0x5500aa,
			HasStream: true, Bytes: 20}},
	// ncclReduce(send, recv, count, type, op, root, comm=[rsp+8], stream=[rsp+16])
	{api: NcclReduce, args: regs(0x7f1000, 0x7f2000, 5, 8 /* float64 */, 2 /* max */, 1, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 5, DataType: 8, RedOp: 2, Peer: 1, Comm: 0xc0, Stream: 0x5500aa,
			HasStream: true, Bytes: 40}},
	// ncclAllGather(send, recv, sendcount, type, comm, stream=r9)
	{api: NcclAllGather, args: regs(0x7f1000, 0x7f2000, 64, 6 /* float16 */, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 64, DataType: 6, Comm: 0xc0, Stream: 0x5500aa,
			HasStream: true, Peer: -1, Bytes: 128}},
	// ncclReduceScatter(send, recv, recvcount, type, op, comm, stream=[rsp+8])
	{api: NcclReduceScatter, args: regs(0x7f1000, 0x7f2000, 3, 4 /* int64 */, 1, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 3, DataType: 4, RedOp: 1, Comm: 0xc0, Stream: 0x5500aa,
			HasStream: true, Peer: -1, Bytes: 24}},
	// ncclSend(buf, count, type, peer, comm, stream=r9): buf is read from.
	{api: NcclSend, args: regs(0x7f1000, 100, 11 /* fp8e5m2 */, 5, 0xc0, 0x5500aa),
		want: Args{Src: 0x7f1000, Size: 100, DataType: 11, Peer: 5, Comm: 0xc0, Stream: 0x5500aa, HasStream: true, Bytes: 100}},
	// ncclRecv(buf, count, type, peer, comm, stream=r9): buf is written to.
	{api: NcclRecv, args: regs(0x7f2000, 100, 2 /* int32 */, 0, 0xc0, 0x5500aa),
		want: Args{Dst: 0x7f2000, Size: 100, DataType: 2, Peer: 0, Comm: 0xc0, Stream: 0x5500aa, HasStream: true, Bytes: 400}},
	// An unknown data type: the count is all we know.
	{api: NcclAllReduce, args: regs(0x7f1000, 0x7f2000, 77, 200, 0, 0xc0, 0),
		want: Args{Src: 0x7f1000, Dst: 0x7f2000, Size: 77, DataType: 200, Comm: 0xc0, HasStream: true, Peer: -1, Bytes: 77}},
	{api: CudaSetDevice, args: regs(1), want: Args{Device: 1}},
	// ncclCommInitRank(comm*, nranks, ncclUniqueId by value (stack), rank=rdx): the comm at return.
	{api: NcclCommInitRank, args: [9]uint64{0x7ffd00, 8, 5, 0, 0, 0, 0x5eed}, out: 0xc0, want: Args{Comm: 0xc0, Size: 8, Peer: 5, CommID: 0x5eed}},
	{api: NcclGroupStart, args: regs(1, 2, 3), want: Args{}},
	{api: NcclGroupEnd, want: Args{}},
}

func TestArgsDecode(t *testing.T) {
	covered := map[API]bool{}
	for _, tc := range argsCases {
		covered[tc.api] = true
		spec := Lookup(tc.api)
		e := Event{Cookie: spec.cookie(SysV, tc.sym), Args: tc.args, Ext: tc.ext, Out: tc.out}
		a := Args{Stream: 0xbad, Func: 0xbad, Kind: 9} // Decode must reset what it does not set
		e.Decode(&a)
		if a != tc.want {
			t.Errorf("%s: decoded\n  %+v\nwant\n  %+v", spec.Symbol(tc.sym), a, tc.want)
		}
	}
	for api := API(1); api < numAPIs; api++ {
		if !covered[api] {
			t.Errorf("no argument decoding case for %v", api)
		}
	}
}

func TestArgsDecodeUnknownAPI(t *testing.T) {
	e := Event{Cookie: 0x7777, Args: regs(1, 2, 3, 4, 5, 6, 7, 8, 9), Out: 10}
	a := Args{Stream: 5, HasStream: true}
	e.Decode(&a)
	if a != (Args{}) {
		t.Errorf("unknown API decoded to %+v, want zero", a)
	}
}

func TestEventString(t *testing.T) {
	for _, tc := range []struct {
		copy []byte
		want string
	}{
		{nil, ""},
		{[]byte{}, ""},
		{[]byte("_Z6kernelPf\x00"), "_Z6kernelPf"},
		{[]byte("name\x00garbage after the terminator"), "name"},
		{[]byte("no terminator"), "no terminator"},
		{[]byte("\x00"), ""},
	} {
		e := Event{Copy: tc.copy}
		if got := e.String(); got != tc.want {
			t.Errorf("String() of %q = %q, want %q", tc.copy, got, tc.want)
		}
	}
	// A load-time call's record: the name the BPF side copied survives the
	// raw layout.
	e := Event{Cookie: Lookup(CuModuleGetFunction).Cookie(0), HasStack: true, Copy: []byte("_Z3addPfS_i\x00")}
	var got Event
	if err := Decode(Encode(nil, &e), &got); err != nil || got.String() != "_Z3addPfS_i" {
		t.Errorf("decoded name %q (%v)", got.String(), err)
	}
}

func TestNCCLTypeNames(t *testing.T) {
	if len(NCCLTypeName) != len(ncclTypeSize) {
		t.Fatalf("%d type names, %d sizes", len(NCCLTypeName), len(ncclTypeSize))
	}
	want := map[string]uint64{"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
		"float16": 2, "float32": 4, "float64": 8, "bfloat16": 2, "fp8e4m3": 1, "fp8e5m2": 1}
	for i, name := range NCCLTypeName {
		if want[name] != ncclTypeSize[i] {
			t.Errorf("ncclDataType %d (%s): size %d, want %d", i, name, ncclTypeSize[i], want[name])
		}
	}
}

func TestMemcpyKindString(t *testing.T) {
	want := map[MemcpyKind]string{HostToHost: "HtoH", HostToDevice: "HtoD", DeviceToHost: "DtoH",
		DeviceToDevice: "DtoD", DefaultKind: "Default", 5: "unknown", 255: "unknown"}
	for k, w := range want {
		if k.String() != w {
			t.Errorf("MemcpyKind(%d) = %q, want %q", k, k.String(), w)
		}
	}
	// cudaMemcpyKind values are the ABI's.
	if HostToHost != 0 || HostToDevice != 1 || DeviceToHost != 2 || DeviceToDevice != 3 || DefaultKind != 4 {
		t.Error("MemcpyKind values differ from cudaMemcpyKind")
	}
}

// TestNVTXMessage: an NVTX call's message is keyed by its bytes up to the
// first NUL (the BPF side copies the NUL, the injection library may not),
// never 0 but for an empty one; a started range's id is its return value.
func TestNVTXMessage(t *testing.T) {
	step := MessageKey([]byte("step 3\x00garbage"))
	if step == 0 || step != MessageKey([]byte("step 3")) || step == MessageKey([]byte("step 4")) {
		t.Errorf("MessageKey: step 3 = %#x, without its NUL %#x, step 4 %#x", step, MessageKey([]byte("step 3")), MessageKey([]byte("step 4")))
	}
	if MessageKey(nil) != 0 || MessageKey([]byte{0, 'x'}) != 0 {
		t.Error("an empty message has a key")
	}
	for _, api := range []API{NvtxRangePushA, NvtxRangeStartA, NvtxMarkA} {
		e := Event{Cookie: Lookup(api).Cookie(0), Copy: []byte("step 3\x00"), Ret: 7, Flags: FlagHasRet | FlagInjected, Ext: [NExt]uint64{0xd0}}
		var a Args
		e.Decode(&a)
		if a.Ptr != step || e.String() != "step 3" || a.Comm != 0xd0 {
			t.Errorf("%v: Ptr %#x, want %#x; String %q; domain %#x, want 0xd0", api, a.Ptr, step, e.String(), a.Comm)
		}
		if want := map[bool]uint64{true: 7}[api == NvtxRangeStartA]; a.Event != want {
			t.Errorf("%v: Event %d, want %d", api, a.Event, want)
		}
	}
}
