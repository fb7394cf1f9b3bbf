package recording

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
)

func validPrelude(hdr []byte) []byte {
	b := append([]byte("CUDATAP\n"), 1, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(hdr)))
	return append(b, hdr...)
}

// readPass reads every record of one pass of b.
func readPass(b []byte, p Pass) error {
	r := NewReader(bytes.NewReader(b), p, nil)
	for r.Next() {
	}
	return r.Err()
}

// readBoth reads b as a replay does, names then events, and returns the
// more telling error: bad format over truncation.
func readBoth(b []byte) error {
	nerr, eerr := readPass(b, NamesPass), readPass(b, EventsPass)
	for _, err := range []error{nerr, eerr} {
		if errors.Is(err, ErrFormat) {
			return err
		}
	}
	return errors.Join(nerr, eerr)
}

func TestGarbage(t *testing.T) {
	hdr := []byte(`{"version":1,"tool":"x","apis":[]}`)
	good := validPrelude(hdr)
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrFormat},
		{"text", []byte("hello, this is not a recording at all\n"), ErrFormat},
		{"wrong magic", append([]byte("CUDATAQ\n"), good[8:]...), ErrFormat},
		{"wrong version", append(append([]byte("CUDATAP\n"), 2, 0, 0, 0), good[12:]...), ErrFormat},
		{"version 0", append(append([]byte("CUDATAP\n"), 0, 0, 0, 0), good[12:]...), ErrFormat},
		{"huge header length", append(append([]byte("CUDATAP\n"), 1, 0, 0, 0), 0xff, 0xff, 0xff, 0xff), ErrFormat},
		{"header not JSON", validPrelude([]byte("{not json")), ErrFormat},
		{"header of the wrong JSON type", validPrelude([]byte(`[1,2,3]`)), ErrFormat},
		{"unknown record type", append(bytes.Clone(good), 9, 0), ErrFormat},
		{"huge record length", binary.AppendUvarint(append(bytes.Clone(good), RecEvent), 1<<40), ErrFormat},
		{"record length overflowing a varint", append(append(bytes.Clone(good), RecEvent), bytes.Repeat([]byte{0xff}, 11)...), ErrFormat},
		{"short name record", append(append(bytes.Clone(good), RecThread, 4), 1, 2, 3, 4), ErrFormat},
		{"short Python frame record", append(append(bytes.Clone(good), RecPyFrame, 12), make([]byte, 12)...), ErrFormat},
		{"drops not JSON", append(append(bytes.Clone(good), RecDrops, 3), "{{{"...), ErrFormat},
		{"counter not JSON", append(append(bytes.Clone(good), RecCounter, 2), "[]"...), ErrFormat},
		{"short note record", append(append(bytes.Clone(good), RecNote, 3), 1, 2, 3), ErrFormat},
		{"no end record", bytes.Clone(good), ErrTruncated},
		{"record length past the end", binary.AppendUvarint(append(bytes.Clone(good), RecEvent), 1000), ErrTruncated},
		{"varint cut", append(append(bytes.Clone(good), RecEvent), 0x80), ErrTruncated},
	}
	for _, tc := range tests {
		err := readBoth(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		b := make([]byte, rng.IntN(4096))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if err := readBoth(b); !errors.Is(err, ErrFormat) {
			t.Fatalf("random bytes %d: err = %v, want ErrFormat", i, err)
		}
		// Random records after a valid header: never a panic, always one of the two errors.
		g := append(bytes.Clone(good), b...)
		if err := readBoth(g); err != nil &&
			!errors.Is(err, ErrFormat) && !errors.Is(err, ErrTruncated) {
			t.Fatalf("random records %d: err = %v", i, err)
		}
	}
}

// TestNoHugeAllocation: lengths that the data does not back cost no more
// memory than the data.
func TestNoHugeAllocation(t *testing.T) {
	hdr := []byte(`{"version":1}`)
	good := validPrelude(hdr)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"header claims the maximum", append(append([]byte("CUDATAP\n"), 1, 0, 0, 0), binary.LittleEndian.AppendUint32(nil, MaxRecord)...)},
		{"record claims the maximum", binary.AppendUvarint(append(bytes.Clone(good), RecEvent), MaxRecord)},
		{"record claims just over", binary.AppendUvarint(append(bytes.Clone(good), RecEvent), MaxRecord+1)},
	} {
		b := append(tc.b, make([]byte, 100)...)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := readPass(b, EventsPass)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
		}
		// The 1 MiB read buffer and change.
		if n := after.TotalAlloc - before.TotalAlloc; n > 3<<20 {
			t.Errorf("%s: allocated %d bytes for a %d-byte file", tc.name, n, len(b))
		}
	}
}

func TestWriterError(t *testing.T) {
	w, err := NewWriter(failWriter{}, NewHeader("t", 0))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 2<<20) // larger than the buffer: reaches the failing writer
	w.Event(big)
	w.Event([]byte{1})
	if err := w.Close(); err == nil {
		t.Error("Close after a failed write returned nil")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }
