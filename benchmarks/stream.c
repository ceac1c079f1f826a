/* STREAM-style Copy and Triad reference (after McCalpin's STREAM), compiled at bench time:
 *     gcc -O3 -march=native -fopenmp stream.c -o stream
 * Usage: stream N_ELEMENTS TRIALS [INNER]
 *   N_ELEMENTS  doubles per array (three arrays a, b, c)
 *   TRIALS      timed repeats of each kernel (Copy and Triad interleaved)
 *   INNER       kernel passes per timed repeat (default 1; raise it for cache-sized arrays)
 * Prints one JSON object: seconds per pass for every trial, and the bytes one pass moves
 * (STREAM counting: Copy 2 x 8 bytes, Triad 3 x 8 bytes per element; write-allocate not counted).
 * Threads: OMP_NUM_THREADS. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_times(const char *name, const double *t, long trials) {
    printf("\"%s_s\": [", name);
    for (long k = 0; k < trials; k++) printf("%s%.9e", k ? ", " : "", t[k]);
    printf("]");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s N_ELEMENTS TRIALS [INNER]\n", argv[0]);
        return 2;
    }
    long n = atol(argv[1]), trials = atol(argv[2]), inner = argc > 3 ? atol(argv[3]) : 1;
    if (n < 1 || trials < 1 || inner < 1) {
        fprintf(stderr, "N_ELEMENTS, TRIALS and INNER must be positive integers\n");
        return 2;
    }
    double *a = aligned_alloc(64, ((size_t)n * sizeof(double) + 63) / 64 * 64);
    double *b = aligned_alloc(64, ((size_t)n * sizeof(double) + 63) / 64 * 64);
    double *c = aligned_alloc(64, ((size_t)n * sizeof(double) + 63) / 64 * 64);
    double *copy_t = malloc((size_t)trials * sizeof(double));
    double *triad_t = malloc((size_t)trials * sizeof(double));
    if (!a || !b || !c || !copy_t || !triad_t) {
        fprintf(stderr, "out of memory for %ld elements\n", n);
        return 3;
    }
    const double scalar = 0.5; /* keeps values bounded (a -> 4) over many passes */
    int threads = 1;
    /* First touch in parallel, so pages land where the threads that use them run. */
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) {
        a[i] = 1.0;
        b[i] = 2.0;
        c[i] = 0.0;
    }
#ifdef _OPENMP
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
#endif
    /* One untimed warm-up pass of each kernel. */
    for (long rep = -1; rep < trials; rep++) {
        double t0 = now_s();
        /* One parallel region per timed repeat and no barrier between passes (a static schedule gives each
         * thread the same indices every pass), so cache-sized arrays measure the caches, not thread sync. */
#pragma omp parallel
        for (long k = 0; k < inner; k++) {
#pragma omp for schedule(static) nowait
            for (long i = 0; i < n; i++) c[i] = a[i];
        }
        double t1 = now_s();
#pragma omp parallel
        for (long k = 0; k < inner; k++) {
#pragma omp for schedule(static) nowait
            for (long i = 0; i < n; i++) a[i] = b[i] + scalar * c[i];
        }
        double t2 = now_s();
        if (rep >= 0) {
            copy_t[rep] = (t1 - t0) / (double)inner;
            triad_t[rep] = (t2 - t1) / (double)inner;
        }
    }
    double check = 0.0;
    for (long i = 0; i < n; i += 1 + n / 1024) check += a[i];
    printf("{\"n_elements\": %ld, \"threads\": %d, \"inner\": %ld, ", n, threads, inner);
    printf("\"copy_bytes\": %.0f, \"triad_bytes\": %.0f, ", 16.0 * (double)n, 24.0 * (double)n);
    print_times("copy", copy_t, trials);
    printf(", ");
    print_times("triad", triad_t, trials);
    printf(", \"checksum\": %.6e}\n", check);
    free(a), free(b), free(c), free(copy_t), free(triad_t);
    return 0;
}
