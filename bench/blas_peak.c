// The single-precision peak one core reaches through the BLAS libtorch loads
// (libblas.so.3, OpenBLAS when libopenblas0 is installed): the best of
// several 2048^3 sgemm calls on one thread, in GFLOP/s. Used by
// bench_trainer.sh when Python's torch is not installed.
//   cc -O2 -o blas_peak bench/blas_peak.c -ldl && ./blas_peak [reps]
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);
typedef void (*threads_fn)(int);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 5;
  void* lib = dlopen("libblas.so.3", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "blas_peak: %s\n", dlerror());
    return 1;
  }
  sgemm_fn sgemm = (sgemm_fn)dlsym(lib, "sgemm_");
  threads_fn set_threads = (threads_fn)dlsym(lib, "openblas_set_num_threads");
  if (sgemm == NULL) {
    fprintf(stderr, "blas_peak: no sgemm_ in libblas.so.3\n");
    return 1;
  }
  if (set_threads != NULL) set_threads(1);
  const int n = 2048;
  float* a = malloc(sizeof(float) * n * n);
  float* b = malloc(sizeof(float) * n * n);
  float* c = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; ++i) {
    a[i] = (float)(i % 7) * 0.1f;
    b[i] = (float)(i % 5) * 0.2f;
  }
  const float one = 1.0f, zero = 0.0f;
  double best = 0;
  for (int r = 0; r <= reps; ++r) {  // the first call warms up
    const double t0 = now();
    sgemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    const double flops = 2.0 * n * n * n / (now() - t0);
    if (r > 0 && flops > best) best = flops;
  }
  printf("%.4g\n", best);
  return 0;
}
