package gputime

// NVTX: the collector library is also cudatap's NVTX injection library
// (collector/csrc/nvtx.c). A process cudatap launched with
// NVTX_INJECTION64_PATH set to it connects, at its first NVTX call, to the
// directory's nvtx.sock, apart from the CUPTI socket: its ranges and marks
// come whether GPU times are measured or not, and a collector whose CUPTI
// failed (or a listener serving no CUPTI) takes nothing from them. Each
// record becomes an event of the NVTX APIs, encoded as a probe's record
// is, so the session handles, records and replays it as one.

import (
	"encoding/binary"
	"net"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
)

// NVTXSink receives what the NVTX side of the collector reports, if the
// Listener's Sink implements it. Calls for one process come from one
// goroutine, in order; calls for different processes may interleave.
type NVTXSink interface {
	// NVTX: one NVTX call of process pid (event.NvtxRangePushA, ...), its
	// thread in cudatap's namespace, its message copied, flagged
	// event.FlagInjected; raw is the call as event.Encode writes it, the
	// sink's to keep.
	NVTX(pid uint32, raw []byte)
	// NVTXDone: the process's NVTX side stopped (or went away); lost
	// counts the records it could not send.
	NVTXDone(pid uint32, lost uint64)
}

const (
	nvtxSocketFile = "nvtx.sock"
	msgNVTX        = 10
	nvtxHeaderSize = 32
	nvtxMaxBytes   = 64 << 10 // CT_NVTX_BYTES
	// The kinds of wire.h's ct_nvtx.
	nvtxPush, nvtxPop, nvtxStart, nvtxEnd, nvtxMark = 1, 2, 3, 4, 5
)

// nvtxAPIs is the API of each record kind.
var nvtxAPIs = [...]event.API{nvtxPush: event.NvtxRangePushA, nvtxPop: event.NvtxRangePop,
	nvtxStart: event.NvtxRangeStartA, nvtxEnd: event.NvtxRangeEnd, nvtxMark: event.NvtxMarkA}

// listenNVTX listens on the directory's NVTX socket: for a Sink that
// takes NVTX records only.
func (l *Listener) listenNVTX() error {
	if _, ok := l.sink.(NVTXSink); !ok {
		return nil
	}
	ln, err := l.staging.listen(nvtxSocketFile, l.cfg.UID, l.cfg.GID)
	if err != nil {
		return err
	}
	l.nvtx = ln
	l.wg.Add(1)
	go l.acceptNVTX()
	return nil
}

func (l *Listener) acceptNVTX() {
	defer l.wg.Done()
	for {
		c, err := l.nvtx.AcceptUnix()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.done {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.nvtxConns[c] = true
		l.wg.Add(1)
		l.mu.Unlock()
		go l.serveNVTX(c)
	}
}

// stopNVTX asks every NVTX side to send what it holds and stop, with
// l.mu held; the serving goroutines end by the deadline.
func (l *Listener) stopNVTX(deadline time.Time) {
	for c := range l.nvtxConns {
		c.SetWriteDeadline(deadline)
		c.Write([]byte("S"))
		c.SetReadDeadline(deadline)
	}
	if l.nvtx != nil {
		l.nvtx.Close()
	}
}

// serveNVTX reads one process's NVTX records until it says bye or goes
// away.
func (l *Listener) serveNVTX(c *net.UnixConn) {
	defer l.wg.Done()
	sink := l.sink.(NVTXSink)
	p := newPeer(peerPID(c), l)
	var lost uint64
	defer func() {
		l.mu.Lock()
		delete(l.nvtxConns, c)
		l.mu.Unlock()
		c.Close()
		sink.NVTXDone(p.pid, lost)
	}()
	buf := make([]byte, headerSize+nvtxMaxBytes)
	var ev event.Event
	for {
		n, _, _, _, err := c.ReadMsgUnix(buf, nil)
		if err != nil || n < headerSize {
			return
		}
		b := buf[:n]
		le := binary.LittleEndian
		if le.Uint32(b) != magic || le.Uint16(b[4:]) != version {
			return // another protocol: the collector of another cudatap
		}
		typ, count := le.Uint16(b[6:]), le.Uint32(b[8:])
		p.nsPID = le.Uint32(b[12:])
		lost = le.Uint64(b[32:])
		switch typ {
		case msgBye:
			return
		case msgNVTX:
			body := b[headerSize:]
			for range count {
				rest, ok := p.nvtxRecord(body, &ev)
				if !ok {
					lost++ // cut short: what is left of the message is lost
					break
				}
				body = rest
				sink.NVTX(p.pid, event.Encode(nil, &ev))
			}
		}
	}
}

// nvtxRecord decodes the record at the start of b into ev (an event of the
// process's NVTX API, its thread in cudatap's namespace) and returns what
// follows it.
func (p *peer) nvtxRecord(b []byte, ev *event.Event) ([]byte, bool) {
	if len(b) < nvtxHeaderSize {
		return nil, false
	}
	le := binary.LittleEndian
	kind, n := b[0], int(le.Uint16(b[2:]))
	size := (nvtxHeaderSize + n + 7) &^ 7
	if int(kind) >= len(nvtxAPIs) || nvtxAPIs[kind] == 0 || len(b) < nvtxHeaderSize+n {
		return nil, false
	}
	id, t := le.Uint64(b[16:]), le.Uint64(b[8:])
	*ev = event.Event{Start: t, Cookie: event.Lookup(nvtxAPIs[kind]).Cookie(0), PID: p.pid, TID: p.hostTID(le.Uint32(b[4:])),
		Flags: event.FlagInjected}
	ev.Ext[0] = le.Uint64(b[24:]) // the domain
	switch kind {
	case nvtxStart:
		ev.End, ev.Ret, ev.Flags = t, int64(id), ev.Flags|event.FlagHasRet // its id, as the call returned it
	case nvtxEnd:
		ev.Args[0] = id
	}
	if n > 0 {
		ev.HasStack = true // the message is a record's copy, after the stack fields
		ev.Copy = append(append(make([]byte, 0, n+1), b[nvtxHeaderSize:nvtxHeaderSize+n]...), 0)
	}
	return b[min(size, len(b)):], true
}
