package model

import (
	"testing"
	"unsafe"
)

// The model keeps up to maxWindow pending GPU ops per busy process: at 136
// bytes that is 8.5 MiB. Grow GPUOp only with a measurement.
func TestOpSize(t *testing.T) {
	if got := unsafe.Sizeof(GPUOp{}); got > 136 {
		t.Errorf("GPUOp is %d bytes, want at most 136", got)
	}
}
