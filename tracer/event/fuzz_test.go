package event

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func FuzzDecode(f *testing.F) {
	e := sample()
	f.Add(Encode(nil, &e))
	e = withPy(withStack(sample(), 0x401000, 0x402000, 0x403000), [2]uint64{1, 2})
	e.Copy = []byte("0123456789abcdef")
	full := Encode(nil, &e)
	f.Add(full)
	bad := bytes.Clone(full)
	binary.LittleEndian.PutUint32(bad[184:], 0xffffffff)
	binary.LittleEndian.PutUint32(bad[472:], 0xffffffff)
	binary.LittleEndian.PutUint32(bad[476:], 0xffffffff)
	f.Add(bad)
	f.Add(full[:HeaderSize+20])
	f.Add(full[:CopyOffset-1])
	f.Add(full[:HeaderSize-1])
	f.Add([]byte{})
	e = withKernelArgs(sample())
	f.Add(Encode(nil, &e))
	e = withKernelArgs(withStack(sample(), 0x401000))
	f.Add(Encode(nil, &e))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got Event
		err := Decode(b, &got)
		if len(b) < HeaderSize {
			if !errors.Is(err, ErrShortRecord) {
				t.Fatalf("%d bytes: err = %v, want ErrShortRecord", len(b), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
		if got.NStack < 0 || got.NStack > MaxStack || HeaderSize+8*got.NStack > len(b) {
			t.Fatalf("NStack %d for a %d-byte record", got.NStack, len(b))
		}
		body := len(b)
		if CookieHasKernelArgs(got.Cookie) {
			body -= kernelArgsLen(b[HeaderSize:]) // the parameter values end the record
		}
		if len(got.KernelArgs.Bytes) > KernelBytes {
			t.Fatalf("kernel args %d bytes", len(got.KernelArgs.Bytes))
		}
		for i := range KernelParams {
			got.KernelArgs.Value(i) // in bounds, whatever the record says
		}
		if got.HasStack != (body >= CopyOffset) || got.NPy < 0 || got.NPy > MaxPy || len(got.Copy) > StackCopy ||
			(got.HasStack && CopyOffset+len(got.Copy) > body) || (!got.HasStack && (got.NPy != 0 || got.Copy != nil)) {
			t.Fatalf("HasStack %v NPy %d Copy %d bytes for a %d-byte record", got.HasStack, got.NPy, len(got.Copy), len(b))
		}
		// Decode(Encode(e)) == e for a valid event. Frames of a record too
		// short to be a stack record (older recordings) are decoded but not
		// re-encoded: Encode writes the stack part only for stack records.
		valid := got
		if !valid.HasStack {
			valid.NStack = 0
			valid.Stack = [MaxStack]uint64{}
		}
		enc := Encode(nil, &valid)
		var again Event
		if err := Decode(enc, &again); err != nil {
			t.Fatal(err)
		}
		if d := diffEvents(&again, &valid); d != "" {
			t.Fatalf("Decode(Encode(e)) != e:%s", d)
		}
		// The header bytes round-trip except nstack (clamped) and the padding.
		if !bytes.Equal(enc[:184], b[:184]) {
			t.Fatalf("header bytes changed by a round trip")
		}
		// Decoding names the arguments without panicking, whatever the cookie.
		var a Args
		got.Decode(&a)
		if a.HasStream && got.Spec() == nil {
			t.Fatalf("unknown API %d decoded a stream", got.API())
		}
	})
}
