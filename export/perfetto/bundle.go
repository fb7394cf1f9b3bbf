package perfetto

import (
	"bytes"
	"io"
	"runtime"

	"github.com/klauspost/compress/zlib"
	"google.golang.org/protobuf/encoding/protowire"
)

// Packets are written in bundles, as Perfetto's own tracing service writes
// them when asked to compress: each bundle is the packets of up to
// bundleSize bytes, deflated (zlib) into one packet's compressed_packets
// field, which trace_processor and the UI unpack as they read. Bundles
// are compressed on other cores while the next ones fill; they are written
// in order, by the caller's goroutine.
const (
	packetCompressed = 50 // TracePacket.compressed_packets
	// bundleSize: under the 512 KB Perfetto allows a compressed packet,
	// whatever the data.
	bundleSize = 256 << 10
)

// bundle is a bundle of packets and its compressed form, reused.
type bundle struct {
	raw   []byte
	z     bytes.Buffer
	zw    *zlib.Writer
	err   error
	ready chan struct{} // its compression is done
}

// bundler collects packets into bundles. At most maxInflight bundles are
// being compressed or waiting to be written: its memory is bounded, and
// compression keeps pace with the caller or holds it back.
type bundler struct {
	out      io.Writer
	raw      []byte // packets of the bundle being filled
	inflight []*bundle
	free     []*bundle
	max      int
	err      error
}

func newBundler(out io.Writer) *bundler {
	return &bundler{out: out, raw: make([]byte, 0, bundleSize), max: runtime.GOMAXPROCS(0) + 1}
}

// add appends a whole packet (its Trace.packet tag and length included).
func (b *bundler) add(packet []byte) {
	if len(b.raw)+len(packet) > bundleSize && len(b.raw) > 0 {
		b.flush()
	}
	b.raw = append(b.raw, packet...)
}

// flush hands the packets collected to a compressor.
func (b *bundler) flush() {
	if len(b.raw) == 0 {
		return
	}
	for len(b.inflight) >= b.max {
		b.writeOldest()
	}
	var x *bundle
	if n := len(b.free); n > 0 {
		x, b.free = b.free[n-1], b.free[:n-1]
	} else {
		x = &bundle{raw: make([]byte, 0, bundleSize), ready: make(chan struct{}, 1)}
	}
	x.raw, b.raw = b.raw, x.raw[:0]
	b.inflight = append(b.inflight, x)
	go x.compress()
}

func (x *bundle) compress() {
	x.z.Reset()
	if x.zw == nil {
		x.zw, x.err = zlib.NewWriterLevel(&x.z, zlib.BestSpeed)
	} else {
		x.zw.Reset(&x.z)
	}
	if x.err == nil {
		_, x.err = x.zw.Write(x.raw)
	}
	if x.err == nil {
		x.err = x.zw.Close()
	}
	x.ready <- struct{}{}
}

// writeOldest waits for the oldest bundle's compression and writes it as
// a packet.
func (b *bundler) writeOldest() {
	x := b.inflight[0]
	b.inflight = b.inflight[1:]
	<-x.ready
	if b.err == nil {
		b.err = x.err
	}
	if b.err == nil {
		// Trace.packet { compressed_packets: z }
		var head [2*binaryMaxVarint + 2]byte
		h := protowire.AppendTag(head[:0], packetCompressed, protowire.BytesType)
		h = protowire.AppendVarint(h, uint64(x.z.Len()))
		outer := protowire.AppendTag(head[len(h):len(h)], fieldTracePacket, protowire.BytesType)
		outer = protowire.AppendVarint(outer, uint64(len(h)+x.z.Len()))
		if _, err := b.out.Write(outer); err != nil {
			b.err = err
		} else if _, err := b.out.Write(h); err != nil {
			b.err = err
		} else if _, err := b.out.Write(x.z.Bytes()); err != nil {
			b.err = err
		}
	}
	b.free = append(b.free, x)
}

const binaryMaxVarint = 10

// close writes every packet added, and returns the first error.
func (b *bundler) close() error {
	b.flush()
	for len(b.inflight) > 0 {
		b.writeOldest()
	}
	return b.err
}
