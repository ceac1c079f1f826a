/* The decode step h <- h + W_i h, layer after layer, with fp32, int8 or int4 weights.
 *
 * A batch-1 decode step is a chain of GEMVs: every weight is read once and used once, so a good kernel is
 * limited by memory bandwidth, and fewer bytes per weight should make it proportionally faster. This kernel
 * is written for exactly that case, short enough to read, with the same loop at every precision:
 *
 *   fp32  rows of W as floats.
 *   int8  rows of W as int8 with one fp32 scale per row (symmetric, -127..127).
 *   int4  rows of W in blocks of 32 weights with one fp32 scale per block; 64 weights of a row take 32 bytes,
 *         byte j holding weight j (low nibble) and weight j + 32 (high nibble), each stored as w + 8 (0..15).
 *   For int8 and int4 the rows come in groups of 4, interleaved 32 bytes at a time (32 bytes of row 0, of
 *   row 1, of row 2, of row 3, then the next 32 of row 0 ...), and so do the int4 block scales: a group is
 *   read as one sequential stream.
 *
 * For int8 and int4 the layer input h is quantized once per layer to int8 (one scale for the vector), and
 * the dot products run on 8-bit integers. x86's byte dot-product instructions all multiply an unsigned byte
 * by a signed one, so one side must be made unsigned; which instructions do the work is the kernel's path,
 * fixed at build time by the compiler flags (lowbit_gemv.py picks them from the CPU's SIMD features):
 *
 *   avx512-vnni  AVX-512 VNNI: one vpdpbusd multiplies 64 byte pairs and adds each 4 products into one of 16
 *                int32 sums, with no narrower intermediate. The unsigned side is the weight + 128 (an xor),
 *                taken back once per row as 128 * sum(x).
 *   avx-vnni     AVX-VNNI: the same vpdpbusd on 32 bytes (256-bit registers).
 *   avx2         AVX2 only: vpmaddubsw multiplies 32 byte pairs and adds pairs into int16, which saturates at
 *                32767, then vpmaddwd widens to int32 and vpaddd accumulates: three instructions where VNNI
 *                has one. The unsigned side is |x| <= 127 with x's sign moved onto the weight (vpsignb), so
 *                a pair sums to at most 2 * 127 * 127 = 32258 and never saturates.
 *   portable     plain C loops doing the same arithmetic (no x86 SIMD, or another architecture).
 *
 * In every vector path each step of a loop works on 4 rows, so one load of h serves all four.
 *
 * Threads: `threads` workers each take a contiguous range of rows of every layer and meet at a barrier
 * between layers. They are created per call and have exited when the call returns, so no idle thread is
 * left spinning to slow whatever the program runs next.
 *
 * Built by hwopt/experiments/lowbit_gemv.py with the system C compiler, e.g. for the avx2 path:
 *   cc -O3 -shared -fPIC -pthread -mavx2 -mfma lowbit_gemv.c -lm
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_THREADS 64

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX2__) && defined(__FMA__)
#define KERNEL_PATH "avx512-vnni"
#elif defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__)
#define KERNEL_PATH "avx-vnni"
#elif defined(__AVX2__) && defined(__FMA__)
#define KERNEL_PATH "avx2"
#else
#define KERNEL_PATH "portable"
#endif

/* The path this library was built with (see the header). */
const char *lowbit_kernel_path(void) { return KERNEL_PATH; }

typedef struct {
    atomic_int arrived;
    atomic_int phase;
    int n;
} barrier_t;

static void barrier_wait(barrier_t *b) {
    int phase = atomic_load(&b->phase);
    if (atomic_fetch_add(&b->arrived, 1) == b->n - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->phase, 1);
    } else {
        while (atomic_load(&b->phase) == phase) sched_yield();
    }
}

typedef struct {
    int bits, n_layers;
    long d;
    const void *const *weights;
    const float *const *scales;
    const float *h0;
    float *out, *work;
    int8_t *xq;     /* the layer input quantized to int8 */
    uint8_t *xabs;  /* |xq| */
    float *xsum;    /* sum of xq over each block of 32 */
    int32_t xsum_all; /* sum of xq over the whole vector */
    float x_scale;  /* h ~= x_scale * xq */
    int threads;
    atomic_int go; /* 0 wait, 1 run, -1 give up (a thread could not start) */
    barrier_t barrier;
} step_t;

typedef struct {
    step_t *step;
    int index;
} worker_t;

/* ---- one row range of one layer: y[r] = h[r] + dot(W[r, :], h) ---------------------------------------- */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline float sum_f32x8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline int32_t sum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

static inline __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* acc + 32 byte products u * s (u unsigned, s signed), each 4 neighbours summed into one of 8 int32 lanes */
static inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u, s); /* one instruction */
#else /* vpmaddubsw (pairs into int16, saturating), vpmaddwd (to int32), vpaddd */
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Each kernel works on ROWS rows at once (thread ranges are whole groups of 4): every load of x serves
 * all of them. */
#define ROWS 4

static void rows_fp32(const step_t *s, const float *w, const float *h, float *y, long r0, long r1) {
    for (long r = r0; r < r1; r += ROWS) {
        __m256 acc[ROWS];
        for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();
        for (long i = 0; i < s->d; i += 8) {
            __m256 x = _mm256_loadu_ps(h + i);
            for (int k = 0; k < ROWS; k++)
                acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + (r + k) * s->d + i), x, acc[k]);
        }
        for (int k = 0; k < ROWS; k++) y[r + k] = h[r + k] + sum_f32x8(acc[k]);
    }
}

/* int8 and int4 weights come in groups of 4 rows, interleaved 32 bytes at a time (see the header): a group
 * is one sequential stream of 128 bytes per step, fetched ahead of use. (A plain row of int8 weights is one
 * 4 KiB page, and the hardware prefetcher starts over at every page.) */
#define FETCH_AHEAD 1024 /* bytes */

static inline void fetch_ahead(const void *p) {
    _mm_prefetch((const char *)p + FETCH_AHEAD, _MM_HINT_T0);
    _mm_prefetch((const char *)p + FETCH_AHEAD + 64, _MM_HINT_T0);
}

#if !(defined(__AVX512F__) && defined(__AVX512VNNI__)) /* avx2 and avx-vnni: 256-bit registers */

static void rows_int8(const step_t *s, const int8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    for (long r = r0; r < r1; r += ROWS) {
        const int8_t *group = w + r * s->d;
        __m256i acc[ROWS];
        for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_si256();
        for (long i = 0; i < s->d; i += 32) {
            const int8_t *step = group + i * ROWS;
            fetch_ahead(step);
            /* w * x = |x| * (w with the sign of x): the unsigned side is |x| <= 127, so no pair overflows */
            __m256i x = load32(s->xq + i), xabs = load32(s->xabs + i);
            for (int k = 0; k < ROWS; k++)
                acc[k] = dot_u8s8(acc[k], xabs, _mm256_sign_epi8(load32(step + 32 * k), x));
        }
        for (int k = 0; k < ROWS; k++)
            y[r + k] = h[r + k] + scale[r + k] * s->x_scale * (float)sum_i32x8(acc[k]);
    }
}

static void rows_int4(const step_t *s, const uint8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    const long blocks = s->d / 32;
    const __m256i low = _mm256_set1_epi8(15), zero = _mm256_setzero_si256();
    for (long r = r0; r < r1; r += ROWS) {
        const uint8_t *group = w + r * (s->d / 2);
        const float *sc = scale + r * blocks; /* sc[b * 4 + k]: block b of row r + k */
        __m256 acc[ROWS];
        __m128 offset = _mm_setzero_ps();
        for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();
        for (long b = 0; b < blocks; b += 2) {
            const uint8_t *step = group + b * 16 * ROWS;
            fetch_ahead(step);
            /* the nibbles n = w + 8 (0..15) are the unsigned side; the + 8 is taken back below via xsum */
            __m256i x0 = load32(s->xq + b * 32), x1 = load32(s->xq + b * 32 + 32);
            for (int k = 0; k < ROWS; k++) {
                __m256i packed = load32(step + 32 * k);
                __m256 d0 = _mm256_cvtepi32_ps(dot_u8s8(zero, _mm256_and_si256(packed, low), x0));
                __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
                __m256 d1 = _mm256_cvtepi32_ps(dot_u8s8(zero, high, x1));
                acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + b * 4 + k), d0, acc[k]);
                acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(sc + b * 4 + 4 + k), d1, acc[k]);
            }
            offset = _mm_fmadd_ps(_mm_loadu_ps(sc + b * 4), _mm_set1_ps(s->xsum[b]), offset);
            offset = _mm_fmadd_ps(_mm_loadu_ps(sc + b * 4 + 4), _mm_set1_ps(s->xsum[b + 1]), offset);
        }
        float off[ROWS];
        _mm_storeu_ps(off, offset);
        for (int k = 0; k < ROWS; k++)
            y[r + k] = h[r + k] + s->x_scale * (sum_f32x8(acc[k]) - 8.0f * off[k]);
    }
}

#else /* avx512-vnni: each 512-bit load holds the same 32 bytes of two rows, against x broadcast to both halves */

static inline __m512i load64(const void *p) { return _mm512_loadu_si512(p); }

static inline __m512i broadcast32(const void *p) { return _mm512_broadcast_i64x4(load32(p)); }

static inline __m256i low_half(__m512i v) { return _mm512_castsi512_si256(v); }

static inline __m256i high_half(__m512i v) { return _mm512_extracti64x4_epi64(v, 1); }

static inline __m256 low_half_ps(__m512 v) { return _mm512_castps512_ps256(v); }

static inline __m256 high_half_ps(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

static void rows_int8(const step_t *s, const int8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    const __m512i flip = _mm512_set1_epi8((char)0x80); /* w ^ 0x80 = w + 128 as an unsigned byte (1..255) */
    for (long r = r0; r < r1; r += ROWS) {
        const int8_t *group = w + r * s->d;
        /* acc[0]: rows 0|1, acc[1]: rows 2|3 (one row per half); acc[2], acc[3] the same for odd pieces */
        __m512i acc[4];
        for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_si512();
        for (long i = 0; i < s->d; i += 64) { /* two 32-byte pieces of x, 256 bytes of the group */
            const int8_t *step = group + i * ROWS;
            fetch_ahead(step);
            fetch_ahead(step + 128);
            __m512i x0 = broadcast32(s->xq + i), x1 = broadcast32(s->xq + i + 32);
            acc[0] = _mm512_dpbusd_epi32(acc[0], _mm512_xor_si512(load64(step), flip), x0);
            acc[1] = _mm512_dpbusd_epi32(acc[1], _mm512_xor_si512(load64(step + 64), flip), x0);
            acc[2] = _mm512_dpbusd_epi32(acc[2], _mm512_xor_si512(load64(step + 128), flip), x1);
            acc[3] = _mm512_dpbusd_epi32(acc[3], _mm512_xor_si512(load64(step + 192), flip), x1);
        }
        __m512i rows01 = _mm512_add_epi32(acc[0], acc[2]), rows23 = _mm512_add_epi32(acc[1], acc[3]);
        int32_t dot[ROWS] = {sum_i32x8(low_half(rows01)), sum_i32x8(high_half(rows01)),
                             sum_i32x8(low_half(rows23)), sum_i32x8(high_half(rows23))};
        for (int k = 0; k < ROWS; k++) /* sum (w + 128) x = sum w x + 128 sum x */
            y[r + k] = h[r + k] + scale[r + k] * s->x_scale * (float)(dot[k] - 128 * s->xsum_all);
    }
}

static void rows_int4(const step_t *s, const uint8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    const long blocks = s->d / 32;
    const __m512i low = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
    /* lane -> which of a block's 4 row scales it takes: rows 0|1 and rows 2|3, 8 lanes each */
    const __m512i pick01 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i pick23 = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2);
    for (long r = r0; r < r1; r += ROWS) {
        const uint8_t *group = w + r * (s->d / 2);
        const float *sc = scale + r * blocks; /* sc[b * 4 + k]: block b of row r + k */
        __m512 acc[4]; /* low nibbles rows 0|1, rows 2|3; high nibbles rows 0|1, rows 2|3 */
        __m128 offset = _mm_setzero_ps();
        for (int k = 0; k < 4; k++) acc[k] = _mm512_setzero_ps();
        for (long b = 0; b < blocks; b += 2) {
            const uint8_t *step = group + b * 16 * ROWS;
            fetch_ahead(step);
            /* the nibbles n = w + 8 (0..15) are the unsigned side; the + 8 is taken back below via xsum */
            __m512i x0 = broadcast32(s->xq + b * 32), x1 = broadcast32(s->xq + b * 32 + 32);
            __m512 sc0 = _mm512_castps128_ps512(_mm_loadu_ps(sc + b * 4));
            __m512 sc1 = _mm512_castps128_ps512(_mm_loadu_ps(sc + b * 4 + 4));
            __m512i p01 = load64(step), p23 = load64(step + 64);
            __m512i h01 = _mm512_and_si512(_mm512_srli_epi32(p01, 4), low);
            __m512i h23 = _mm512_and_si512(_mm512_srli_epi32(p23, 4), low);
            __m512 d;
            d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_and_si512(p01, low), x0));
            acc[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick01, sc0), d, acc[0]);
            d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, _mm512_and_si512(p23, low), x0));
            acc[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick23, sc0), d, acc[1]);
            d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, h01, x1));
            acc[2] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick01, sc1), d, acc[2]);
            d = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(zero, h23, x1));
            acc[3] = _mm512_fmadd_ps(_mm512_permutexvar_ps(pick23, sc1), d, acc[3]);
            offset = _mm_fmadd_ps(_mm_loadu_ps(sc + b * 4), _mm_set1_ps(s->xsum[b]), offset);
            offset = _mm_fmadd_ps(_mm_loadu_ps(sc + b * 4 + 4), _mm_set1_ps(s->xsum[b + 1]), offset);
        }
        __m512 rows01 = _mm512_add_ps(acc[0], acc[2]), rows23 = _mm512_add_ps(acc[1], acc[3]);
        float sum[ROWS] = {sum_f32x8(low_half_ps(rows01)), sum_f32x8(high_half_ps(rows01)),
                           sum_f32x8(low_half_ps(rows23)), sum_f32x8(high_half_ps(rows23))};
        float off[ROWS];
        _mm_storeu_ps(off, offset);
        for (int k = 0; k < ROWS; k++) y[r + k] = h[r + k] + s->x_scale * (sum[k] - 8.0f * off[k]);
    }
}
#endif

#else /* portable C: the same arithmetic, one element at a time (compilers vectorize some of it) */

static void rows_fp32(const step_t *s, const float *w, const float *h, float *y, long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        const float *row = w + r * s->d;
        float acc = 0;
        for (long i = 0; i < s->d; i++) acc += row[i] * h[i];
        y[r] = h[r] + acc;
    }
}

/* weight i of row r in the interleaved layout: group of 4 rows, then 32-byte piece, then row in the group */
static long interleaved(long d_bytes, long r, long byte) {
    return (r / 4) * 4 * d_bytes + (byte / 32) * 128 + (r % 4) * 32 + byte % 32;
}

static void rows_int8(const step_t *s, const int8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        int32_t acc = 0;
        for (long i = 0; i < s->d; i++) acc += (int32_t)w[interleaved(s->d, r, i)] * (int32_t)s->xq[i];
        y[r] = h[r] + scale[r] * s->x_scale * (float)acc;
    }
}

static void rows_int4(const step_t *s, const uint8_t *w, const float *scale, const float *h, float *y,
                      long r0, long r1) {
    const long blocks = s->d / 32;
    for (long r = r0; r < r1; r++) {
        float acc = 0;
        for (long b = 0; b < blocks; b += 2) {
            int32_t d0 = 0, d1 = 0;
            for (int i = 0; i < 32; i++) {
                uint8_t byte = w[interleaved(s->d / 2, r, b * 16 + i)];
                d0 += ((int32_t)(byte & 15) - 8) * (int32_t)s->xq[b * 32 + i];
                d1 += ((int32_t)(byte >> 4) - 8) * (int32_t)s->xq[b * 32 + 32 + i];
            }
            const float *sc = scale + (r / 4) * 4 * blocks + r % 4;
            acc += sc[b * 4] * (float)d0 + sc[b * 4 + 4] * (float)d1;
        }
        y[r] = h[r] + s->x_scale * acc;
    }
}
#endif

/* ---- the step --------------------------------------------------------------------------------------- */

/* Symmetric int8 of the layer input (one scale), |xq|, and sums of xq per block of 32 and in all. */
static void quantize_input(step_t *s, const float *h) {
    float amax = 0;
    for (long i = 0; i < s->d; i++) amax = fmaxf(amax, fabsf(h[i]));
    s->x_scale = amax > 0 ? amax / 127.0f : 1.0f;
    const float inv = 1.0f / s->x_scale;
    for (long i = 0; i < s->d; i++) {
        long v = lrintf(h[i] * inv);
        s->xq[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
        s->xabs[i] = (uint8_t)(v < 0 ? -v : v);
    }
    s->xsum_all = 0;
    for (long b = 0; b < s->d / 32; b++) {
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) sum += s->xq[b * 32 + i];
        s->xsum[b] = (float)sum;
        s->xsum_all += sum;
    }
}

static void *run_worker(void *arg) {
    worker_t *me = arg;
    step_t *s = me->step;
    int go;
    while ((go = atomic_load(&s->go)) == 0) sched_yield();
    if (go < 0) return NULL;
    const long groups = s->d / 4; /* int8/int4 rows come in groups of 4: split whole groups */
    const long r0 = 4 * (groups * me->index / s->threads);
    const long r1 = 4 * (groups * (me->index + 1) / s->threads);
    const float *h = s->h0;
    for (int layer = 0; layer < s->n_layers; layer++) {
        float *y = (s->n_layers - layer) % 2 ? s->out : s->work; /* the last layer writes into out */
        if (s->bits != 32) {
            if (me->index == 0) quantize_input(s, h);
            barrier_wait(&s->barrier);
        }
        if (s->bits == 32)
            rows_fp32(s, s->weights[layer], h, y, r0, r1);
        else if (s->bits == 8)
            rows_int8(s, s->weights[layer], s->scales[layer], h, y, r0, r1);
        else
            rows_int4(s, s->weights[layer], s->scales[layer], h, y, r0, r1);
        barrier_wait(&s->barrier); /* every row of y is written before anyone reads it as the next h */
        h = y;
    }
    return NULL;
}

/* Run the step: h0 (d,) in, out (d,) the result, work (d,) scratch. bits: 32, 8 or 4; d a multiple of 64.
 * Returns 0, or a negative code: -1 bad arguments, -2 out of memory, -3 a thread could not start. */
int lowbit_decode_step(int bits, int n_layers, long d, const void *const *weights, const float *const *scales,
                       const float *h0, float *out, float *work, int threads) {
    if ((bits != 32 && bits != 8 && bits != 4) || n_layers < 1 || d < 64 || d % 64 || threads < 1)
        return -1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    step_t s = {.bits = bits, .n_layers = n_layers, .d = d, .weights = weights, .scales = scales, .h0 = h0,
                .out = out, .work = work, .threads = threads};
    s.barrier.n = threads;
    atomic_init(&s.barrier.arrived, 0);
    atomic_init(&s.barrier.phase, 0);
    atomic_init(&s.go, 0);
    s.xq = malloc((size_t)d);
    s.xabs = malloc((size_t)d);
    s.xsum = malloc((size_t)(d / 32) * sizeof(float));
    int status = 0;
    pthread_t tid[MAX_THREADS];
    worker_t workers[MAX_THREADS];
    if (!s.xq || !s.xabs || !s.xsum) {
        status = -2;
    } else {
        int started = 1;
        for (int t = 0; t < threads; t++) workers[t] = (worker_t){&s, t};
        for (; started < threads; started++)
            if (pthread_create(&tid[started], NULL, run_worker, &workers[started]) != 0) break;
        if (started < threads) {
            status = -3;
            atomic_store(&s.go, -1);
        } else {
            atomic_store(&s.go, 1);
            run_worker(&workers[0]);
        }
        for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
    }
    free(s.xq);
    free(s.xabs);
    free(s.xsum);
    return status;
}
