package model

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
)

// TestAnnotationMessages: an NVTX call's message is kept by its key, once,
// and the calls go to the sink as calls; past the bound a message is not
// kept, and counted.
func TestAnnotationMessages(t *testing.T) {
	c := NewCollector()
	m := New(c)
	push := func(at uint64, msg string) {
		e := call(event.NvtxRangePushA, 1, at, 0)
		e.HasStack, e.Copy = true, []byte(msg+"\x00")
		m.Handle(&e.Event)
	}
	push(10*us, "step 1")
	m.Handle(&call(event.NvtxRangePop, 1, 20*us, 0).Event)
	push(30*us, "step 1")
	r := m.Finish()
	p := r.Processes[0]
	key := event.MessageKey([]byte("step 1"))
	if len(p.Messages) != 1 || p.Message(key) != "step 1" || r.Drops.Limits.Names != 0 {
		t.Errorf("messages %v, names not kept %d", p.Messages, r.Drops.Limits.Names)
	}
	calls := c.Traces[testPID].Calls
	if len(calls) != 3 || calls[0].Args.Ptr != key || calls[1].API != event.NvtxRangePop || calls[0].GPUOp != -1 {
		t.Errorf("calls %+v", calls)
	}

	m = New(nil)
	for i := range maxMessages + 3 {
		e := call(event.NvtxMarkA, 1, uint64(i+1)*us, 0)
		e.HasStack, e.Copy = true, []byte(fmt.Sprintf("mark %d\x00", i))
		m.Handle(&e.Event)
	}
	if r := m.Finish(); len(r.Processes[0].Messages) != maxMessages || r.Drops.Limits.Names != 3 {
		t.Errorf("%d messages kept, %d not, want %d and 3", len(r.Processes[0].Messages), r.Drops.Limits.Names, maxMessages)
	}
}

// TestAnnotationDomains: a probed nvtxDomain* call's handle becomes the
// domain's number, 1, 2, … in the order the process first used them (the
// NULL handle every domain has without an NVTX tool is one domain); the
// injection library's numbers are kept as they come; the default domain
// stays 0.
func TestAnnotationDomains(t *testing.T) {
	c := NewCollector()
	m := New(c)
	domainPush := func(at, handle uint64) {
		e := call(event.NvtxRangePushA, 1, at, 0, handle)
		e.Cookie = event.Lookup(event.NvtxRangePushA).Cookie(3) // nvtxDomainRangePushEx(domain, attributes)
		m.Handle(&e.Event)
	}
	domainPush(10*us, 0x5d00)
	domainPush(20*us, 0)
	domainPush(30*us, 0x5d00)
	m.Handle(&call(event.NvtxRangePushA, 1, 40*us, 0).Event) // the default domain
	injected := call(event.NvtxRangePushA, 1, 50*us, 0)
	injected.Flags |= event.FlagInjected
	injected.Ext[0] = 7
	m.Handle(&injected.Event)
	m.Finish()
	var got []uint64
	for _, c := range c.Traces[testPID].Calls {
		got = append(got, c.Args.Comm)
	}
	if want := []uint64{1, 2, 1, 0, 7}; !slices.Equal(got, want) {
		t.Errorf("domains %v, want %v", got, want)
	}
}
