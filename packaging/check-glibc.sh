#!/bin/sh
# packaging/check-glibc.sh MAX FILE...: fails when an ELF file needs a glibc
# symbol version newer than MAX (e.g. 2.17), any GLIBC_PRIVATE symbol (tied
# to one glibc build), or a shared library beyond glibc's own. Reads what the
# dynamic loader will check: `objdump -T` (the versioned dynamic symbols)
# and `objdump -p` (the needed libraries). Prints what each file needs.
set -eu
[ $# -ge 2 ] || {
	echo "usage: packaging/check-glibc.sh MAX-GLIBC-VERSION ELF-FILE..." >&2
	exit 2
}
max=$1
shift
objdump=${OBJDUMP:-objdump}
fail=0
for f in "$@"; do
	syms=$("$objdump" -T "$f") || {
		echo "$f: objdump -T failed: is it an ELF file for this objdump (Debian's binutils reads x86-64 and arm64)?" >&2
		fail=1
		continue
	}
	# Lines end "... (GLIBC_2.3) name" or "... GLIBC_2.34 name": the version
	# is the next-to-last field, in parentheses when it is not the default.
	vers=$(printf '%s\n' "$syms" | awk 'NF >= 2 {v = $(NF-1); gsub(/[()]/, "", v); if (v ~ /^GLIBC_/) print v, $NF}')
	highest=$(printf '%s\n' "$vers" | awk '$1 ~ /^GLIBC_[0-9]/ {sub(/^GLIBC_/, "", $1); print $1}' | sort -uV | tail -n1)
	newer=$(printf '%s\n' "$vers" | awk -v max="$max" '
		function newer(v, m,   a, b, i, n) {
			n = split(v, a, "."); split(m, b, ".")
			for (i = 1; i <= n || i in b; i++) {
				if (a[i] + 0 != b[i] + 0) return a[i] + 0 > b[i] + 0
			}
			return 0
		}
		$1 == "GLIBC_PRIVATE" {print "  " $2 " (GLIBC_PRIVATE)"; next}
		{v = $1; sub(/^GLIBC_/, "", v); if (newer(v, max)) print "  " $2 " (" $1 ")"}')
	libs=$("$objdump" -p "$f" | awk '$1 == "NEEDED" {print $2}')
	foreign=$(printf '%s\n' "$libs" | grep -Ev '^(libc\.so\.6|libpthread\.so\.0|libdl\.so\.2|libm\.so\.6|librt\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|)$' || true)
	echo "$f: GLIBC_${highest:-none} at most; needs $(echo $libs)"
	if [ -n "$newer" ]; then
		echo "$f needs symbols newer than glibc $max: pin each in packaging/glibc-2.17.h, or stop calling it" >&2
		printf '%s\n' "$newer" >&2
		fail=1
	fi
	if [ -n "$foreign" ]; then
		echo "$f needs libraries that are not glibc's, so not on every machine: $(echo $foreign)" >&2
		fail=1
	fi
done
exit $fail
