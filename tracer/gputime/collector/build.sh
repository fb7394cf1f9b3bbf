#!/bin/sh
# Builds libcudatap_collector.so from csrc/collector.c (CUPTI: GPU times)
# and csrc/nvtx.c (NVTX: the injection library) (make generate), with
# internal/cuptiabi's cupti_abi.h, which the simulated CUPTI shares. The
# library is committed and embedded in cudatap: a target never needs a
# compiler. It links only libc (dlopen, pthreads): CUPTI is the target's
# own, loaded at run time. No debug info and no build paths, so the bytes
# depend on the sources and the compiler only. It must load into processes
# on glibc 2.17 and later, as the release binary starts there: the functions
# glibc 2.34 moved into libc are pinned to their old versions
# (packaging/glibc-2.17.h), and libdl and libpthread, where they live before
# 2.34, are needed by name (-l:, as -ldl and -lpthread are empty now).
set -eu
cd "$(dirname "$0")"
${CC:-cc} -O2 -Wall -Wextra -Werror -Wno-format-truncation -fPIC -shared -fvisibility=hidden \
	-include ../../../packaging/glibc-2.17.h -I ../../../internal/cuptiabi \
	-g0 -ffile-prefix-map="$(pwd)"=. -Wl,--build-id=sha1 -Wl,-soname,libcudatap_collector.so \
	-o libcudatap_collector.so csrc/collector.c csrc/nvtx.c -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0
chmod 0644 libcudatap_collector.so
