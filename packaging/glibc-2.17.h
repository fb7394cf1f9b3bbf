/* Pins the glibc functions that later glibcs gave a newer symbol version to
 * the version glibc 2.17 already exports, so that what is built on Debian 12
 * (glibc 2.36) starts on glibc 2.17 and later: RHEL/CentOS 7 and 8, Ubuntu
 * 18.04 and 20.04. Forced into every C file of a release build (CGO_CFLAGS
 * -include, packaging/build.sh) and of the CUPTI collector
 * (tracer/gputime/collector/build.sh).
 *
 * Only functions that moved (from libpthread and libdl into libc in glibc
 * 2.34, pthread_sigmask and pthread_getattr_np in 2.32) belong here: their
 * old and new versions are one function under two names. A function whose
 * behaviour changed between versions must not be pinned.
 *
 * packaging/check-glibc.sh fails the release when a binary needs a newer
 * version: a function the C code starts to call then goes on this list. The
 * Go binary also imports each pin by its versioned name (build.sh reads
 * this list through the C preprocessor), so one CUDATAP_PIN per line. */
#ifndef __ASSEMBLER__ /* runtime/cgo's .S files are compiled with CGO_CFLAGS too */

#if defined(__x86_64__)
#define CUDATAP_GLIBC_BASE "GLIBC_2.2.5" /* x86-64's first glibc symbol version */
#define CUDATAP_GLIBC_DLINFO "GLIBC_2.3.3"
#elif defined(__aarch64__)
#define CUDATAP_GLIBC_BASE "GLIBC_2.17" /* arm64's first glibc */
#define CUDATAP_GLIBC_DLINFO "GLIBC_2.17"
#else
#error "packaging/glibc-2.17.h knows the symbol versions of x86-64 and arm64 only"
#endif

#define CUDATAP_PIN(sym, version) __asm__(".symver " #sym "," #sym "@" version)

CUDATAP_PIN(pthread_create, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_key_create, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_setspecific, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_attr_getstack, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_attr_getstacksize, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_getattr_np, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(pthread_sigmask, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dlopen, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dlsym, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dlclose, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dlerror, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dladdr, CUDATAP_GLIBC_BASE);
CUDATAP_PIN(dlinfo, CUDATAP_GLIBC_DLINFO);

#endif
