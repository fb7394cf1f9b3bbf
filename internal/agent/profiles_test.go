package agent

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLastWindowDoesNotWaitForever: at shutdown the last window waits for
// the window still being pushed, but not for as long as that push would
// take: a push that only ends when cancelled (a store that never answers,
// hundreds of processes each retried) is cancelled after pushFlushTimeout.
// Before, the agent's shutdown waited for it (8 minutes in a make test).
func TestLastWindowDoesNotWaitForever(t *testing.T) {
	t.Parallel()
	s, err := newProfileStores("", 0, "http://127.0.0.1:1", false, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.busy.Lock() // a window being pushed, until its pushes are cancelled
	go func() {
		<-s.ctx.Done()
		s.busy.Unlock()
	}()
	s.lockLast()
	if s.ctx.Err() == nil {
		t.Error("the pushes in flight were not cancelled")
	}
	s.busy.Unlock()
}
