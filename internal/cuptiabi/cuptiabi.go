// Package cuptiabi holds cupti_abi.h: the part of CUPTI's binary interface
// that cudatap's collector reads (tracer/gputime/collector/build.sh compiles
// against this directory) and the simulated CUPTI writes (internal/sim
// writes Header beside its sources). It sits below both, so the simulated
// libraries the tracer is tested against are built from none of the
// tracer's packages (make check-pure).
package cuptiabi

import _ "embed"

// Header is cupti_abi.h.
//
//go:embed cupti_abi.h
var Header []byte
