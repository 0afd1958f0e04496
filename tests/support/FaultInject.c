// An LD_PRELOAD shim that makes writes to chosen files fail or kills the process mid-write, so
// tests can inject a full disk, an I/O error or a crash at an exact point of a real process
// (the engine writing a checkpoint, SQLite committing to its WAL), without a mock.
//
//   TS_FAULT_PATH         substring of the path of the files to fault (required; unset: inert)
//   TS_FAULT_SKIP         matching opens to let through untouched first (default 0)
//   TS_FAULT_AFTER_BYTES  bytes the armed files may take before the fault (default 0)
//   TS_FAULT_ACTION       errno (default): that write and every later one to an armed file fail;
//                         kill: the bytes up to the limit are written, then SIGKILL (a torn write)
//   TS_FAULT_ERRNO        the errno of the errno action (default ENOSPC)
//
// open/openat (and their 64 variants) tell which descriptors name a matching file; write,
// pwrite, pwritev, writev and fsync on those are intercepted. fopen goes through glibc's
// internal open and is not seen: the engine writes checkpoints with open(2), SQLite too.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { kMaxFd = 4096 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int configured = 0;
static const char* pattern = NULL;
static long skip = 0, opens = 0;
static long long budget = 0;  // bytes left before the fault
static int actionKill = 0, faultErrno = ENOSPC, tripped = 0;
static unsigned char armed[kMaxFd];

static void configure(void) {
  if (configured) return;
  configured = 1;
  pattern = getenv("TS_FAULT_PATH");
  if (pattern && !*pattern) pattern = NULL;
  const char* s = getenv("TS_FAULT_SKIP");
  skip = s ? atol(s) : 0;
  s = getenv("TS_FAULT_AFTER_BYTES");
  budget = s ? atoll(s) : 0;
  s = getenv("TS_FAULT_ACTION");
  actionKill = s && strcmp(s, "kill") == 0;
  s = getenv("TS_FAULT_ERRNO");
  if (s) faultErrno = atoi(s);
}

static void track(int fd, const char* path) {
  if (fd < 0 || fd >= kMaxFd || !path) return;
  pthread_mutex_lock(&lock);
  configure();
  armed[fd] = 0;
  if (pattern && strstr(path, pattern) && opens++ >= skip) armed[fd] = 1;
  pthread_mutex_unlock(&lock);
}

// How many of n bytes may go to fd now; -1 with errno set when the write must fail.
static ssize_t allowance(int fd, size_t n) {
  if (fd < 0 || fd >= kMaxFd) return (ssize_t)n;
  pthread_mutex_lock(&lock);
  ssize_t ok = (ssize_t)n;
  if (armed[fd]) {
    if (tripped && !actionKill) {
      ok = -1;
    } else if ((long long)n > budget) {
      ok = (ssize_t)budget;
      tripped = 1;
      if (!actionKill && ok == 0) ok = -1;
    }
    if (ok > 0) budget -= ok;
  }
  pthread_mutex_unlock(&lock);
  if (ok < 0) errno = faultErrno;
  return ok;
}

static void afterWrite(int fd, int hitLimit) {
  if (hitLimit && actionKill && fd >= 0 && fd < kMaxFd && armed[fd]) raise(SIGKILL);
}

#define REAL(name)                             \
  static __typeof__(&name) real_##name = NULL; \
  if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

static int openWith(const char* sym, int dirfd, const char* path, int flags, mode_t mode) {
  typedef int (*OpenFn)(const char*, int, ...);
  typedef int (*OpenAtFn)(int, const char*, int, ...);
  int fd;
  if (dirfd == -1000) {
    OpenFn f = (OpenFn)dlsym(RTLD_NEXT, sym);
    fd = f(path, flags, mode);
  } else {
    OpenAtFn f = (OpenAtFn)dlsym(RTLD_NEXT, sym);
    fd = f(dirfd, path, flags, mode);
  }
  const int err = errno;
  track(fd, path);
  errno = err;
  return fd;
}

static mode_t modeArg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = modeArg(flags, ap);
  va_end(ap);
  return openWith("open", -1000, path, flags, m);
}
int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = modeArg(flags, ap);
  va_end(ap);
  return openWith("open64", -1000, path, flags, m);
}
int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = modeArg(flags, ap);
  va_end(ap);
  return openWith("openat", dirfd, path, flags, m);
}
int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t m = modeArg(flags, ap);
  va_end(ap);
  return openWith("openat64", dirfd, path, flags, m);
}

// _FORTIFY_SOURCE builds call these for open without O_CREAT.
int __open_2(const char* path, int flags) {
  return openWith("__open_2", -1000, path, flags, 0);
}
int __open64_2(const char* path, int flags) {
  return openWith("__open64_2", -1000, path, flags, 0);
}

int close(int fd) {
  REAL(close);
  if (fd >= 0 && fd < kMaxFd) {
    pthread_mutex_lock(&lock);
    armed[fd] = 0;
    pthread_mutex_unlock(&lock);
  }
  return real_close(fd);
}

ssize_t write(int fd, const void* buf, size_t n) {
  REAL(write);
  const ssize_t k = allowance(fd, n);
  if (k < 0) return -1;
  const ssize_t r = k > 0 ? real_write(fd, buf, (size_t)k) : 0;
  afterWrite(fd, (size_t)k < n);
  return r;
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  REAL(pwrite);
  const ssize_t k = allowance(fd, n);
  if (k < 0) return -1;
  const ssize_t r = k > 0 ? real_pwrite(fd, buf, (size_t)k, off) : 0;
  afterWrite(fd, (size_t)k < n);
  return r;
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  REAL(pwrite64);
  const ssize_t k = allowance(fd, n);
  if (k < 0) return -1;
  const ssize_t r = k > 0 ? real_pwrite64(fd, buf, (size_t)k, off) : 0;
  afterWrite(fd, (size_t)k < n);
  return r;
}

static size_t total(const struct iovec* iov, int cnt) {
  size_t n = 0;
  for (int i = 0; i < cnt; ++i) n += iov[i].iov_len;
  return n;
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  REAL(writev);
  const size_t n = total(iov, cnt);
  const ssize_t k = allowance(fd, n);
  if (k < 0) return -1;
  if ((size_t)k < n) {  // a fault inside: write the allowed prefix only
    REAL(write);
    size_t left = (size_t)k;
    for (int i = 0; i < cnt && left > 0; ++i) {
      const size_t part = iov[i].iov_len < left ? iov[i].iov_len : left;
      real_write(fd, iov[i].iov_base, part);
      left -= part;
    }
    afterWrite(fd, 1);
    return k;
  }
  return real_writev(fd, iov, cnt);
}

int fsync(int fd) {
  REAL(fsync);
  if (fd >= 0 && fd < kMaxFd) {
    pthread_mutex_lock(&lock);
    const int fail = armed[fd] && tripped && !actionKill;
    pthread_mutex_unlock(&lock);
    if (fail) {
      errno = faultErrno;
      return -1;
    }
  }
  return real_fsync(fd);
}
