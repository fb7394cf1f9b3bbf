package python

// Line numbers from the three line-table formats of CPython 3.9–3.13.
// Each function returns the line of one instruction, or -1 when the
// table says the instruction has no line (or the offset is past the
// table). A negative offset (a frame that has not started) gives the
// first line, as PyCode_Addr2Line does.

// line39 reads a 3.9 co_lnotab: pairs of (bytecode offset increment,
// signed line increment). addr is f_lasti, a byte offset. The line of addr
// is that of the last entry starting at or before it.
func line39(lnotab []byte, first, addr int) int {
	line := first
	start := 0
	for i := 0; i+1 < len(lnotab); i += 2 {
		start += int(lnotab[i])
		if start > addr {
			break
		}
		line += int(int8(lnotab[i+1]))
	}
	return line
}

// line310 reads a 3.10 co_linetable: pairs of (byte length of a range,
// signed line increment, -128 meaning "no line"). addr is a byte offset
// (f_lasti*2).
func line310(table []byte, first, addr int) int {
	if addr < 0 {
		return first
	}
	line := first
	end := 0
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int(table[i])
		cur := -1
		if d := int(int8(table[i+1])); d != -128 {
			line += d
			cur = line
		}
		if addr >= start && addr < end {
			return cur
		}
	}
	return -1
}

// Location-table entry kinds (3.11+, Objects/locations.md).
const (
	locOneLine0   = 10 // 10, 11, 12: line increment 0, 1, 2, then two column bytes
	locNoColumns  = 13 // signed varint line increment
	locLong       = 14 // signed varint line increment, then end line and columns
	locNoLocation = 15
)

// line311 reads a 3.11+ co_linetable (the PEP 657 location table). unit is
// the index of the instruction in code units (2 bytes each) from the start
// of the bytecode.
func line311(table []byte, first, unit int) int {
	if unit < 0 {
		return first
	}
	line := first
	addr := 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 { // not an entry start: corrupt table
			return -1
		}
		kind := int(b>>3) & 15
		length := int(b&7) + 1
		j := i + 1
		switch {
		case kind == locNoLocation:
		case kind == locNoColumns || kind == locLong:
			line += svarint(table, j)
		case kind >= locOneLine0:
			line += kind - locOneLine0
		}
		if unit >= addr && unit < addr+length {
			if kind == locNoLocation {
				return -1
			}
			return line
		}
		addr += length
		// The next entry starts at the next byte with the top bit set.
		for i = j; i < len(table) && table[i]&0x80 == 0; i++ {
		}
	}
	return -1
}

// varint reads an unsigned varint of the location table: 6-bit groups,
// least significant first, bit 6 set on all but the last.
func varint(b []byte, i int) uint {
	var v uint
	for shift := uint(0); i < len(b) && shift < 32; shift += 6 {
		c := b[i]
		i++
		v |= uint(c&63) << shift
		if c&64 == 0 {
			break
		}
	}
	return v
}

// svarint reads a signed varint: the unsigned value's low bit is the sign.
func svarint(b []byte, i int) int {
	u := varint(b, i)
	if u&1 != 0 {
		return -int(u >> 1)
	}
	return int(u >> 1)
}
