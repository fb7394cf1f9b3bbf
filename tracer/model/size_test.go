package model

import (
	"testing"
	"unsafe"
)

// The model keeps up to maxWindow pending GPU ops per busy process: at 136
// bytes that was 8.5 MiB; measured GPU times (the enqueue call's return, to
// join CUPTI's records, and when the op was proven complete, to hold it for
// them) made it 152 bytes, 9.5 MiB. Grow GPUOp only with a measurement.
func TestOpSize(t *testing.T) {
	if got := unsafe.Sizeof(GPUOp{}); got > 152 {
		t.Errorf("GPUOp is %d bytes, want at most 152", got)
	}
}
