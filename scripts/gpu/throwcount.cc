// LD_PRELOAD library that counts the C++ exceptions a process throws, by
// type, and prints the counts to standard error at exit: a cheap way to
// see whether a slow path is made of caught exceptions (GPU machine).
//
//   g++ -O2 -shared -fPIC -o throwcount.so throwcount.cc -ldl
//   LD_PRELOAD=./throwcount.so python3 ...
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <typeinfo>

namespace {
struct Entry {
  const char *name;
  long n;
};
Entry entries[64];
int used = 0;
long total = 0;
std::mutex mu;

void report() {
  std::fprintf(stderr, "throwcount: %ld C++ exceptions thrown\n", total);
  for (int i = 0; i < used; i++) std::fprintf(stderr, "throwcount: %8ld %s\n", entries[i].n, entries[i].name);
}

using ThrowFn = void (*)(void *, std::type_info *, void (*)(void *));
}  // namespace

extern "C" void __cxa_throw(void *obj, std::type_info *tinfo, void (*dest)(void *)) {
  static ThrowFn real = (ThrowFn)dlsym(RTLD_NEXT, "__cxa_throw");
  {
    std::lock_guard<std::mutex> g(mu);
    if (total++ == 0) std::atexit(report);
    const char *name = tinfo ? tinfo->name() : "?";
    int i = 0;
    while (i < used && std::strcmp(entries[i].name, name) != 0) i++;
    if (i == used && used < 64) entries[used++] = {name, 0};
    if (i < used) entries[i].n++;
  }
  real(obj, tinfo, dest);
  std::abort();  // not reached: the real __cxa_throw does not return
}
