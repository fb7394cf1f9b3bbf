// Package collector holds cudatap's CUPTI collector: a small C library
// (csrc/collector.c) that cudatap loads into a CUDA process to time its GPU work
// with CUPTI's activity API. The CUPTI declarations it shares with the
// simulated CUPTI the tests run against are internal/cuptiabi's. The same
// library is cudatap's NVTX injection library (csrc/nvtx.c): the processes
// cudatap launches load it at their first NVTX call, with or without GPU
// times.
package collector

import _ "embed"

//go:generate ./build.sh

// Library is libcudatap_collector.so, built by build.sh from csrc/collector.c
// and csrc/nvtx.c.
//
//go:embed libcudatap_collector.so
var Library []byte

// LibraryName is the file name the library is written under.
const LibraryName = "libcudatap_collector.so"
