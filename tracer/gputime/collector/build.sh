#!/bin/sh
# Builds libcudatap_collector.so from csrc/collector.c (make generate). The
# library is committed and embedded in cudatap: a target never needs a
# compiler. It links only libc (dlopen, pthreads): CUPTI is the target's
# own, loaded at run time. No debug info and no build paths, so the bytes
# depend on the sources and the compiler only.
set -eu
cd "$(dirname "$0")"
${CC:-cc} -O2 -Wall -Wextra -Werror -Wno-format-truncation -fPIC -shared -fvisibility=hidden \
	-g0 -ffile-prefix-map="$(pwd)"=. -Wl,--build-id=sha1 -Wl,-soname,libcudatap_collector.so \
	-o libcudatap_collector.so csrc/collector.c -ldl -lpthread
chmod 0644 libcudatap_collector.so
