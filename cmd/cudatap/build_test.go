package main

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// buildCudatap builds the cudatap binary (once per test binary) for tests
// that must run it as a process of its own.
func buildCudatap(t *testing.T) string { return testutil.Cudatap(t) }
