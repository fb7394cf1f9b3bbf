// Package killed tests cudatap killed (SIGKILL) at moments that matter:
// while it holds the command it launched at a library load, while its
// guardian has a thread of the target borrowed, while a followed child is
// held at its exec, while it writes a recording. Every target must run to
// its end with the output of an untraced run, and nothing may be left
// behind.
//
// The tests run the cudatap command as a process of their own, and reap
// the processes it leaves (as a subreaper: every child of this test
// process), so they run one at a time, in a test binary of their own: the
// other tests of cmd/cudatap run beside them.
package killed

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }
