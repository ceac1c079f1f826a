/* FP32 fused multiply-add peak of the cores, compiled at bench time:
 *     gcc -O3 -march=native -fopenmp fma_peak.c -o fma_peak
 * Usage: fma_peak ITERATIONS TRIALS
 * Each thread runs ITERATIONS steps of ACC independent vector FMAs (enough accumulators to hide the FMA
 * latency on two FMA pipes), all in registers: no memory traffic. Prints one JSON object with the
 * FLOP one trial performs (2 per lane per FMA, all threads) and seconds per trial. Threads: OMP_NUM_THREADS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#define VEC_BYTES 64
#elif defined(__AVX__)
#define VEC_BYTES 32
#else
#define VEC_BYTES 16
#endif
#define LANES (VEC_BYTES / 4)
#define ACC 10

typedef float vec __attribute__((vector_size(VEC_BYTES)));

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float run(long iterations, float seed) {
    vec acc[ACC], mul, add;
    for (int j = 0; j < LANES; j++) {
        mul[j] = 0.999999f;
        add[j] = 1e-7f * seed;
    }
    for (int k = 0; k < ACC; k++)
        for (int j = 0; j < LANES; j++) acc[k][j] = seed + (float)(k + j);
    for (long i = 0; i < iterations; i++) {
#pragma GCC unroll 10
        for (int k = 0; k < ACC; k++) acc[k] = acc[k] * mul + add;
    }
    float sum = 0.0f;
    for (int k = 0; k < ACC; k++)
        for (int j = 0; j < LANES; j++) sum += acc[k][j];
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s ITERATIONS TRIALS\n", argv[0]);
        return 2;
    }
    long iterations = atol(argv[1]), trials = atol(argv[2]);
    if (iterations < 1 || trials < 1) {
        fprintf(stderr, "ITERATIONS and TRIALS must be positive integers\n");
        return 2;
    }
    int threads = 1;
#ifdef _OPENMP
#pragma omp parallel
#pragma omp single
    threads = omp_get_num_threads();
#endif
    double *t = malloc((size_t)trials * sizeof(double));
    volatile float sink = 0.0f;
    for (long rep = -1; rep < trials; rep++) { /* rep -1: warm-up */
        double t0 = now_s();
        float total = 0.0f;
#pragma omp parallel reduction(+ : total)
        total += run(iterations, 1.0f + (float)rep);
        double t1 = now_s();
        sink += total;
        if (rep >= 0) t[rep] = t1 - t0;
    }
    double flop = 2.0 * LANES * ACC * (double)iterations * threads;
    printf("{\"threads\": %d, \"vector_bytes\": %d, \"accumulators\": %d, \"flop\": %.0f, \"times_s\": [",
           threads, VEC_BYTES, ACC, flop);
    for (long k = 0; k < trials; k++) printf("%s%.9e", k ? ", " : "", t[k]);
    printf("], \"checksum\": %.6e}\n", (double)sink);
    free(t);
    return 0;
}
