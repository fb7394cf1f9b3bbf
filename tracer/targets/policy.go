package targets

import "github.com/cudatap/cudatap/tracer/event"

// policy says which APIs of one layer are hooked in a process, given the
// layers it maps. The rule keeps every launch at one uprobe hit and every
// call counted once:
//
//   - Launches are counted in the driver: every runtime launch enters
//     cuLaunchKernel, and Triton, cuBLAS/cuDNN internals and torch.compile
//     launch there directly. Kernel names come from the load-time calls
//     (cuModuleGetFunction, cuLibraryGetKernel, cuKernelGetFunction). The
//     runtime's launch symbols get a separate, temporary attachment (see
//     Set.runtimeLaunches) that counts launches until libcuda is hooked
//     and names kernels loaded before cudatap attached.
//   - Every other call is hooked in the runtime when the process has one
//     (the API the program wrote, with its semantics), else in the driver;
//     the driver's calls no runtime call makes (event.Spec.DriverOnly:
//     cuMemCreate) in the driver always.
//   - NCCL is always hooked.
type policy uint8

const (
	policyAll        policy = iota // every API of the layer
	policyNoLaunch                 // runtime with a driver underneath: launches are the driver's
	policyLaunchOnly               // driver under a runtime: launches and kernel naming only
)

// PolicyFor is the policy of layer in a process that maps layers (a bit
// per event.Layer).
func PolicyFor(layer event.Layer, layers uint8) policy {
	hasRuntime := layers&(1<<event.Runtime) != 0
	switch {
	case layer == event.Runtime:
		return policyNoLaunch
	case layer == event.Driver && hasRuntime:
		return policyLaunchOnly
	}
	return policyAll
}

// Want reports whether the policy hooks s.
func (p policy) Want(s *event.Spec) bool {
	switch p {
	case policyNoLaunch:
		return s.Class != event.ClassLaunch
	case policyLaunchOnly:
		// And what no runtime call makes (cuMemCreate): nothing covers it.
		return s.Class == event.ClassLaunch || s.Class == event.ClassFuncName || s.DriverOnly
	}
	return true
}
