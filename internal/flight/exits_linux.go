package flight

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Process exits from the kernel's process connector (cn_proc): every
// process that ends on the host, with its wait status and the
// CLOCK_MONOTONIC time of its end (the clock of every event). It needs
// CAP_NET_ADMIN and the host's network namespace (the connector is not
// namespaced: a pod needs hostNetwork), and Linux 6.6 to ask for exits
// only (earlier kernels ignore the request and send nothing).
const (
	cnIdxProc       = 1
	cnValProc       = 1
	procCnListen    = 1
	procCnIgnore    = 2
	procEventExit   = 0x80000000
	nlmsgHdrLen     = 16
	cnMsgLen        = 20
	procEventHdrLen = 16 // what, cpu, timestamp_ns
)

// watchExits calls exited for every process that ends (its thread-group
// leader), until stop is called.
func watchExits(exited func(pid, status uint32, at uint64)) (stop func(), err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, fmt.Errorf("process connector socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("process connector: %w (needs CAP_NET_ADMIN in the host's network namespace)", err)
	}
	// A blocked receive is not woken by closing the socket: it wakes at
	// least twice a second to see whether it should stop.
	tv := unix.NsecToTimeval((500 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("process connector: %w", err)
	}
	if err := subscribe(fd, procCnListen); err != nil {
		unix.Close(fd)
		return nil, err
	}
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		le := binary.LittleEndian
		for {
			// Once asked to stop, what the kernel queued already is
			// still read (an exit just before a session's end), then no
			// more.
			flags := 0
			if stopping.Load() {
				flags = unix.MSG_DONTWAIT
			}
			n, _, err := unix.Recvfrom(fd, buf, flags)
			if err != nil {
				if flags == 0 && (err == unix.EINTR || err == unix.EAGAIN || err == unix.ENOBUFS) {
					continue // ENOBUFS: exits lost to a burst; polling /proc finds those
				}
				return
			}
			for b := buf[:n]; len(b) >= nlmsgHdrLen; {
				l := int(le.Uint32(b))
				if l < nlmsgHdrLen || l > len(b) {
					break
				}
				m := b[nlmsgHdrLen:l]
				// cn_msg, then proc_event: what, cpu, timestamp, then the
				// exit's pid, tgid, exit_code.
				if len(m) >= cnMsgLen+procEventHdrLen+12 && le.Uint32(m) == cnIdxProc {
					ev := m[cnMsgLen:]
					if le.Uint32(ev) == procEventExit {
						pid, tgid := le.Uint32(ev[16:]), le.Uint32(ev[20:])
						if pid == tgid {
							exited(tgid, le.Uint32(ev[24:]), le.Uint64(ev[8:]))
						}
					}
				}
				step := (l + 3) &^ 3
				if step > len(b) {
					break
				}
				b = b[step:]
			}
		}
	}()
	return func() {
		stopping.Store(true)
		<-done
		subscribe(fd, procCnIgnore)
		unix.Close(fd)
	}, nil
}

// subscribe sends op (listen, ignore) for exit events only.
func subscribe(fd int, op uint32) error {
	le := binary.LittleEndian
	msg := make([]byte, nlmsgHdrLen+cnMsgLen+8)
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], unix.NLMSG_DONE)
	le.PutUint32(msg[12:], uint32(os.Getpid()))
	c := msg[nlmsgHdrLen:]
	le.PutUint32(c[0:], cnIdxProc)
	le.PutUint32(c[4:], cnValProc)
	le.PutUint16(c[16:], 8)
	le.PutUint32(c[20:], op)
	le.PutUint32(c[24:], procEventExit)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("process connector subscription: %w", err)
	}
	return nil
}
