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
 * fp32 rows are plain (row r of W is W[r, :]); each step of the loop reads 64 bytes of 4 neighbouring rows
 * and asks for the same bytes of rows at least 32 KiB further on, ahead of use. The same fp32 loop serves
 * lowbit_gemv_f32, a general y = W x + b for the (out, in) weights of a torch Linear, and lowbit_decoder_step
 * (at the end), a whole single-token step of the tiny decoder with its norms and attention.
 *
 * Threads: the rows of every layer are cut into chunks (a 32nd of the matrix, 64 KiB to 1 MiB), and up to
 * `threads` workers take the next chunk as they finish one; whoever finishes a layer's last chunk prepares
 * the next layer's input.
 * Nobody waits for a worker to start or to take its share (only for a layer's last chunks to be done): on a
 * shared machine, one that loses its core for a while, or has not woken yet, does fewer chunks instead of
 * stalling the rest. The workers are a small pool started on first
 * use and kept: after a call they wait SPIN_S seconds for the next one (decoding calls the kernel many times
 * a token), then sleep on a condition variable, so no idle thread is left spinning to slow whatever the
 * program runs next.
 *
 * Built by hwopt/kernels/lowbit_gemv.py with the system C compiler, e.g. for the avx2 path:
 *   cc -O3 -shared -fPIC -pthread -mavx2 -mfma lowbit_gemv.c -lm
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 64
/* A unit of work is a chunk of rows, about 1/CHUNKS_PER_MATRIX of a matrix's weights, within CHUNK_BYTES and
 * CHUNK_BYTES_MAX: long streams for the prefetchers, and still enough chunks that the cores finish together. */
#ifndef CHUNK_BYTES
#define CHUNK_BYTES 65536
#endif
#ifndef CHUNK_BYTES_MAX
#define CHUNK_BYTES_MAX 1048576
#endif
#ifndef CHUNKS_PER_MATRIX
#define CHUNKS_PER_MATRIX 32
#endif
#ifndef SPIN_S
#define SPIN_S 5e-5 /* how long an idle worker waits for the next call before it sleeps: briefly, since a
                     * spinning worker holds a core the caller's own work between calls may need, and a late
                     * worker only joins late (the caller starts at once) */
#endif

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

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
static inline void relax(void) { _mm_pause(); }
#else
static inline void relax(void) {}
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the worker pool: run job(arg, index) on up to `threads` threads, the caller being index 0 --------- */

/* A job is elastic: it is done by whoever takes part, so the caller does not wait for a worker that has not
 * joined (asleep, or without a core on a busy machine); it only waits for those that took a seat. */
typedef void (*job_t)(void *arg, int index);

static struct {
    pthread_mutex_t run;    /* one call at a time (ctypes releases the GIL) */
    pthread_mutex_t lock;   /* with wake: where idle workers sleep */
    pthread_cond_t wake;
    int workers;            /* started, indices 1..workers */
    unsigned born[MAX_THREADS];
    atomic_uint generation; /* one more per job */
    atomic_int seats;       /* workers the current job still takes (<= 0: none) */
    atomic_int finished;    /* workers through the current job */
    job_t job;
    void *arg;
} pool = {.run = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static void *pool_worker(void *p) {
    const int index = (int)(intptr_t)p;
    unsigned seen = pool.born[index];
    for (;;) {
        unsigned now;
        double until = 0;
        for (long spins = 1; (now = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen;
             spins++) {
            relax();
            if (spins % 256) continue;
            if (until == 0) {
                until = now_s() + SPIN_S;
            } else if (now_s() > until) { /* no call for a while: sleep until the next */
                pthread_mutex_lock(&pool.lock);
                while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
                pthread_mutex_unlock(&pool.lock);
            }
        }
        seen = now;
        if (atomic_fetch_sub(&pool.seats, 1) > 0) { /* a seat of the job now posted: its fields are set */
            pool.job(pool.arg, index);
            atomic_fetch_add_explicit(&pool.finished, 1, memory_order_release);
        }
    }
    return NULL;
}

static void pool_after_fork(void) { /* the child has no workers: start afresh */
    pthread_mutex_init(&pool.run, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pool.workers = 0;
}

static void pool_register(void) { pthread_atfork(NULL, NULL, pool_after_fork); }

static inline void wait_a_little(long spins) {
    if (spins % 64) relax(); else sched_yield();
}

/* Run the job; where no worker thread can start, the caller does it alone. Returns 0. */
static int pool_run(job_t job, void *arg, int threads) {
    if (threads <= 1) {
        job(arg, 0);
        return 0;
    }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_register);
    pthread_mutex_lock(&pool.run);
    while (pool.workers < threads - 1) {
        pthread_t tid;
        int index = pool.workers + 1;
        pool.born[index] = atomic_load(&pool.generation);
        if (pthread_create(&tid, NULL, pool_worker, (void *)(intptr_t)index) != 0) break;
        pthread_detach(tid);
        pool.workers = index;
    }
    if (pool.workers == 0) {
        pthread_mutex_unlock(&pool.run);
        job(arg, 0);
        return 0;
    }
    const int seats = (threads - 1 < pool.workers ? threads - 1 : pool.workers);
    pool.job = job;
    pool.arg = arg;
    atomic_store(&pool.finished, 0);
    atomic_store(&pool.seats, seats);
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    job(arg, 0);
    const int left = atomic_exchange(&pool.seats, 0); /* close the job: latecomers skip it */
    const int joined = seats - (left > 0 ? left : 0);
    for (long spins = 1; atomic_load_explicit(&pool.finished, memory_order_acquire) < joined; spins++)
        wait_a_little(spins);
    pthread_mutex_unlock(&pool.run);
    return 0;
}

/* ---- the work: chunks of rows, layer after layer ---------------------------------------------------- */

/* A layer's rows are cut into chunks (a multiple of 4 rows, chunk_rows). `claim` holds the
 * current layer (high 32 bits) and its next unclaimed chunk; `done` counts chunks finished over all layers;
 * `layer` is the layer whose input is ready. Whoever finishes a layer's last chunk prepares the next layer's
 * input and then announces it; the others wait for that. */
typedef struct {
    atomic_llong claim;
    atomic_llong done;
    atomic_int layer;
    long rows, chunk_rows, chunks;
} schedule_t;

/* Rows in a chunk of a (rows x row_bytes) matrix: a multiple of 4, about 1/CHUNKS_PER_MATRIX of it, within
 * CHUNK_BYTES..CHUNK_BYTES_MAX. */
static long chunk_rows(long rows, long row_bytes) {
    long bytes = rows * row_bytes / CHUNKS_PER_MATRIX;
    bytes = bytes < CHUNK_BYTES ? CHUNK_BYTES : bytes > CHUNK_BYTES_MAX ? CHUNK_BYTES_MAX : bytes;
    long chunk = bytes / (row_bytes > 0 ? row_bytes : 1) / 4 * 4;
    return chunk < 4 ? 4 : chunk;
}

static void schedule_init(schedule_t *c, long rows, long row_bytes) {
    c->chunk_rows = chunk_rows(rows, row_bytes);
    c->rows = rows;
    c->chunks = (rows + c->chunk_rows - 1) / c->chunk_rows;
    atomic_init(&c->claim, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->layer, 0);
}

/* Claim the next chunk of `layer`: 1 and its rows [r0, r1), or 0 when none is left in that layer. */
static int claim_chunk(schedule_t *c, int layer, long *r0, long *r1) {
    long long v = atomic_load(&c->claim);
    for (;;) {
        if ((v >> 32) != layer || (v & 0xffffffffLL) >= c->chunks) return 0;
        if (atomic_compare_exchange_weak(&c->claim, &v, v + 1)) break;
    }
    *r0 = (long)(v & 0xffffffffLL) * c->chunk_rows;
    *r1 = *r0 + c->chunk_rows < c->rows ? *r0 + c->chunk_rows : c->rows;
    return 1;
}

/* Count a finished chunk of `layer`: 1 if it was the layer's last. */
static int finish_chunk(schedule_t *c, int layer) {
    return atomic_fetch_add(&c->done, 1) + 1 == (long long)(layer + 1) * c->chunks;
}

/* Open `layer` for claims and announce it (after its input is ready). */
static void open_layer(schedule_t *c, int layer) {
    atomic_store(&c->claim, (long long)layer << 32);
    atomic_store_explicit(&c->layer, layer, memory_order_release);
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
    schedule_t schedule;
} step_t;

/* ---- one row range of one layer: y[r] = h[r] + dot(W[r, :], h) ---------------------------------------- */

/* Each kernel works on ROWS rows at once (chunks are whole groups of 4): every load of x serves all of them. */
#define ROWS 4

#if defined(__AVX2__) && defined(__FMA__)

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

/* Weights asked for ahead of use go to L2 (T1), which holds more misses in flight than L1 and leaves L1 to
 * the data in use. The macros here and FETCH_AHEAD below can be set with -D to try other values. */
#ifndef PREFETCH_HINT
#define PREFETCH_HINT _MM_HINT_T1
#endif

/* How far ahead the fp32 loop asks for rows: whole groups of 4 rows, at least this many bytes ahead. */
#ifndef FP32_AHEAD_BYTES
#define FP32_AHEAD_BYTES 32768
#endif

static inline long fp32_ahead_rows(long stride) {
    long groups = (FP32_AHEAD_BYTES + ROWS * 4 * stride - 1) / (ROWS * 4 * stride);
    return ROWS * (groups > 0 ? groups : 1);
}

/* dot[k] = W[k, :] . x for the ROWS rows from w (row stride `stride` floats, `cols` used), 64 bytes of each
 * row a step, asking for the same bytes of rows `ahead` rows further on (fp32_ahead_rows). */
static inline void dot4_f32(const float *w, long stride, long cols, const float *x, float dot[ROWS]) {
    const float *next = w + fp32_ahead_rows(stride) * stride;
    const long vec = cols / 16 * 16;
#if defined(__AVX512F__)
    __m512 acc[ROWS];
    for (int k = 0; k < ROWS; k++) acc[k] = _mm512_setzero_ps();
    for (long i = 0; i < vec; i += 16) {
        __m512 xv = _mm512_loadu_ps(x + i);
        for (int k = 0; k < ROWS; k++) {
            _mm_prefetch((const char *)(next + k * stride + i), PREFETCH_HINT);
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(w + k * stride + i), xv, acc[k]);
        }
    }
    for (int k = 0; k < ROWS; k++) dot[k] = _mm512_reduce_add_ps(acc[k]);
#else
    __m256 acc[ROWS];
    for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();
    for (long i = 0; i < vec; i += 16) {
        __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
        for (int k = 0; k < ROWS; k++) {
            _mm_prefetch((const char *)(next + k * stride + i), PREFETCH_HINT);
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * stride + i), x0, acc[k]);
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * stride + i + 8), x1, acc[k]);
        }
    }
    for (int k = 0; k < ROWS; k++) dot[k] = sum_f32x8(acc[k]);
#endif
    for (long i = vec; i < cols; i++)
        for (int k = 0; k < ROWS; k++) dot[k] += w[k * stride + i] * x[i];
}

static inline float dot1_f32(const float *w, long cols, const float *x) {
    __m256 acc = _mm256_setzero_ps();
    long i = 0;
    for (; i + 8 <= cols; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc);
    float dot = sum_f32x8(acc);
    for (; i < cols; i++) dot += w[i] * x[i];
    return dot;
}

/* int8 and int4 weights come in groups of 4 rows, interleaved 32 bytes at a time (see the header): a group
 * is one sequential stream of 128 bytes per step, fetched ahead of use. (A plain row of int8 weights is one
 * 4 KiB page, and the hardware prefetcher starts over at every page.) */
#ifndef FETCH_AHEAD /* bytes: about what one core's share of the memory bandwidth brings in per latency */
#define FETCH_AHEAD 4096
#endif

static inline void fetch_ahead(const void *p) {
    _mm_prefetch((const char *)p + FETCH_AHEAD, PREFETCH_HINT);
    _mm_prefetch((const char *)p + FETCH_AHEAD + 64, PREFETCH_HINT);
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

static inline void dot4_f32(const float *w, long stride, long cols, const float *x, float dot[ROWS]) {
    for (int k = 0; k < ROWS; k++) {
        float acc = 0;
        for (long i = 0; i < cols; i++) acc += w[k * stride + i] * x[i];
        dot[k] = acc;
    }
}

static inline float dot1_f32(const float *w, long cols, const float *x) {
    float acc = 0;
    for (long i = 0; i < cols; i++) acc += w[i] * x[i];
    return acc;
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

static void rows_fp32(const step_t *s, const float *w, const float *h, float *y, long r0, long r1) {
    float dot[ROWS];
    for (long r = r0; r < r1; r += ROWS) {
        dot4_f32(w + r * s->d, s->d, s->d, h, dot);
        for (int k = 0; k < ROWS; k++) y[r + k] = h[r + k] + dot[k];
    }
}

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

static inline float *layer_output(const step_t *s, int layer) {
    return (s->n_layers - layer) % 2 ? s->out : s->work; /* the last layer writes into out */
}

static inline const float *layer_input(const step_t *s, int layer) {
    return layer == 0 ? s->h0 : layer_output(s, layer - 1);
}

static void step_job(void *arg, int index) {
    (void)index;
    step_t *s = arg;
    long r0, r1;
    for (long spins = 1;; spins++) {
        const int layer = atomic_load_explicit(&s->schedule.layer, memory_order_acquire);
        if (layer >= s->n_layers) return;
        if (!claim_chunk(&s->schedule, layer, &r0, &r1)) { /* the layer's last chunks are being done */
            wait_a_little(spins);
            continue;
        }
        const float *h = layer_input(s, layer);
        float *y = layer_output(s, layer);
        if (s->bits == 32)
            rows_fp32(s, s->weights[layer], h, y, r0, r1);
        else if (s->bits == 8)
            rows_int8(s, s->weights[layer], s->scales[layer], h, y, r0, r1);
        else
            rows_int4(s, s->weights[layer], s->scales[layer], h, y, r0, r1);
        if (finish_chunk(&s->schedule, layer)) { /* every row of y is written: it is the next input */
            if (layer + 1 < s->n_layers && s->bits != 32) quantize_input(s, y);
            open_layer(&s->schedule, layer + 1);
        }
    }
}

/* Run the step: h0 (d,) in, out (d,) the result, work (2 d,) scratch. bits: 32, 8 or 4; d a multiple of 64.
 * Returns 0, or -1 for bad arguments. */
int lowbit_decode_step(int bits, int n_layers, long d, const void *const *weights, const float *const *scales,
                       const float *h0, float *out, float *work, int threads) {
    if ((bits != 32 && bits != 8 && bits != 4) || n_layers < 1 || d < 64 || d % 64 || threads < 1)
        return -1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    step_t s = {.bits = bits, .n_layers = n_layers, .d = d, .weights = weights, .scales = scales, .h0 = h0,
                .out = out, .work = work};
    /* the input's int8 copy, |xq| and block sums live in the second half of work (2.125 d of its 4 d bytes) */
    s.xq = (int8_t *)(work + d);
    s.xabs = (uint8_t *)s.xq + d;
    s.xsum = (float *)(s.xabs + d);
    schedule_init(&s.schedule, d, bits == 32 ? 4 * d : bits == 8 ? d : d / 2);
    if (bits != 32) quantize_input(&s, h0);
    open_layer(&s.schedule, 0);
    return pool_run(step_job, &s, threads);
}

/* ---- y = W x + b for a Linear layer's weights ------------------------------------------------------ */

typedef struct {
    long rows, cols;
    const float *w, *x, *bias;
    float *y;
    schedule_t schedule;
} gemv_t;

/* y[r] = W[r, :] . x + bias[r] (bias NULL: none) for the rows [r0, r1) of row-major fp32 w (cols a row). */
static void gemv_rows(const float *w, long cols, const float *x, const float *bias, float *y, long r0,
                      long r1) {
    float dot[ROWS];
    long r = r0;
    for (; r + ROWS <= r1; r += ROWS) {
        dot4_f32(w + r * cols, cols, cols, x, dot);
        for (int k = 0; k < ROWS; k++) y[r + k] = dot[k] + (bias ? bias[r + k] : 0.0f);
    }
    for (; r < r1; r++) y[r] = dot1_f32(w + r * cols, cols, x) + (bias ? bias[r] : 0.0f);
}

static void gemv_job(void *arg, int index) {
    (void)index;
    gemv_t *g = arg;
    long r0, r1;
    while (claim_chunk(&g->schedule, 0, &r0, &r1)) gemv_rows(g->w, g->cols, g->x, g->bias, g->y, r0, r1);
}

/* y (rows,) = w (rows, cols) x (cols,) + bias (rows,; NULL for none), fp32, w row-major (a torch Linear's
 * weight). Returns 0, or -1 for bad arguments. */
int lowbit_gemv_f32(long rows, long cols, const float *w, const float *x, const float *bias, float *y,
                    int threads) {
    if (rows < 1 || cols < 1 || !w || !x || !y || threads < 1) return -1;
    gemv_t g = {.rows = rows, .cols = cols, .w = w, .x = x, .bias = bias, .y = y};
    schedule_init(&g.schedule, rows, 4 * cols);
    if (threads > g.schedule.chunks) threads = (int)g.schedule.chunks; /* a small matrix: fewer workers */
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    return pool_run(gemv_job, &g, threads);
}

/* ---- one token through a pre-norm decoder-only transformer (the tiny decoder) ------------------------- */

/* The decode step of hwopt/models/tiny_decoder.py in one call: every Linear is one stage, a GEMV whose
 * rows the workers share in chunks (as above), and whoever finishes a stage's last chunk prepares the next
 * stage's input on its own: the layer norms, the residual adds, GELU, and attention over the KV cache. The
 * work between two GEMVs is a few vectors of d numbers (and the cache), so it is done by one core while the
 * others wait for the next stage, spinning: no framework call, nothing that leaves the core's caches.
 *
 * Per layer, tensors[16 * layer + ...] are (torch's nn.Linear weights are (out, in), row-major):
 *   0 ln1 weight, 1 ln1 bias, 2 qkv weight (3d, d), 3 qkv bias, 4 proj weight (d, d), 5 proj bias,
 *   6 ln2 weight, 7 ln2 bias, 8 up weight (4d, d), 9 up bias, 10 down weight (d, 4d), 11 down bias,
 *   12 K cache (heads, past, head_dim), 13 V cache, 14 new K (heads, past + 1, head_dim), 15 new V;
 * the caches are read with strides[4 * layer + 0..3] (elements): K between heads, K between tokens, and the
 * same for V (the new ones are contiguous). Then tensors[16 * n_layers + ...]: 0 the final norm's weight,
 * 1 its bias, 2 the head's weight (vocab, d; no bias), 3 the token's embedding row, 4 its position's row. */
#define BLOCK_TENSORS 16
#define LINEARS 4 /* stages per layer: qkv, proj, up, down */

typedef struct {
    int n_layers, heads;
    long d, past, vocab;
    float eps;
    const float *const *t;
    const long *strides;
    float *logits;
    float *x;      /* (d,) the residual stream */
    float *a;      /* (d,) the normalized x: the input of qkv, up and the head */
    float *qkv;    /* (3d,) q, k, v of the new token */
    float *attn;   /* (d,) attention's output: proj's input */
    float *up;     /* (4d,) up's output, then (4d,) GELU of it: down's input */
    float *y;      /* (d,) the output of proj or down, added to x */
    float *scores; /* (past + 1,) one head's softmax */
    atomic_llong claim, done; /* claim: stage << 32 | its next chunk; done: the stage's chunks finished */
    atomic_int stage;         /* the stage whose input is ready */
} decoder_t;

static inline const float *tensor(const decoder_t *s, int layer, int i) {
    return s->t[(long)BLOCK_TENSORS * layer + i];
}

/* Stage k: rows, cols, weights, bias, input and output of its GEMV. */
static void stage_gemv(const decoder_t *s, int k, long *rows, long *cols, const float **w, const float **bias,
                       const float **in, float **out) {
    const int layer = k / LINEARS, which = k % LINEARS;
    const long d = s->d;
    if (layer == s->n_layers) { /* the head */
        *rows = s->vocab, *cols = d, *w = s->t[(long)BLOCK_TENSORS * s->n_layers + 2], *bias = NULL;
        *in = s->a, *out = s->logits;
        return;
    }
    static const int weight[LINEARS] = {2, 4, 8, 10};
    const long out_rows[LINEARS] = {3 * d, d, 4 * d, d}, in_cols[LINEARS] = {d, d, d, 4 * d};
    const float *inputs[LINEARS] = {s->a, s->attn, s->a, s->up + 4 * d};
    float *outputs[LINEARS] = {s->qkv, s->y, s->up, s->y};
    *rows = out_rows[which], *cols = in_cols[which];
    *w = tensor(s, layer, weight[which]), *bias = tensor(s, layer, weight[which] + 1);
    *in = inputs[which], *out = outputs[which];
}

static long stage_chunks(const decoder_t *s, int k) {
    long rows, cols;
    const float *w, *bias, *in;
    float *out;
    stage_gemv(s, k, &rows, &cols, &w, &bias, &in, &out);
    const long chunk = chunk_rows(rows, 4 * cols);
    return (rows + chunk - 1) / chunk;
}

static void layer_norm(const float *x, const float *w, const float *b, long d, float eps, float *y) {
    double mean = 0, var = 0;
    for (long i = 0; i < d; i++) mean += x[i];
    mean /= (double)d;
    for (long i = 0; i < d; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
    const float inv = (float)(1.0 / sqrt(var / (double)d + (double)eps)), m = (float)mean;
    for (long i = 0; i < d; i++) y[i] = (x[i] - m) * inv * w[i] + b[i];
}
/* The new token's K and V appended to copies of the cache, then softmax(q K^T / sqrt(head_dim)) V a head. */
/* The new token's K and V appended to copies of the cache, then softmax(q K^T / sqrt(head_dim)) V per head. */
static void attend(decoder_t *s, int layer) {
    const long d = s->d, hd = d / s->heads, past = s->past, len = past + 1;
    const long *st = s->strides + 4L * layer;
    const float *k_past = tensor(s, layer, 12), *v_past = tensor(s, layer, 13);
    float *k = (float *)tensor(s, layer, 14), *v = (float *)tensor(s, layer, 15);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < s->heads; h++) {
        float *kh = k + h * len * hd, *vh = v + h * len * hd;
        for (long t = 0; t < past; t++)
            for (long i = 0; i < hd; i++) {
                kh[t * hd + i] = k_past[h * st[0] + t * st[1] + i];
                vh[t * hd + i] = v_past[h * st[2] + t * st[3] + i];
            }
        const float *q = s->qkv + h * hd;
        for (long i = 0; i < hd; i++) {
            kh[past * hd + i] = s->qkv[d + h * hd + i];
            vh[past * hd + i] = s->qkv[2 * d + h * hd + i];
        }
        float top = -INFINITY;
        for (long t = 0; t < len; t++) {
            float dot = 0;
            for (long i = 0; i < hd; i++) dot += q[i] * kh[t * hd + i];
            s->scores[t] = dot * scale;
            top = fmaxf(top, s->scores[t]);
        }
        float total = 0;
        for (long t = 0; t < len; t++) total += s->scores[t] = expf(s->scores[t] - top);
        float *o = s->attn + h * hd;
        for (long i = 0; i < hd; i++) o[i] = 0;
        for (long t = 0; t < len; t++) {
            const float p = s->scores[t] / total;
            for (long i = 0; i < hd; i++) o[i] += p * vh[t * hd + i];
        }
    }
}

/* The input of stage k, from what stage k - 1 wrote (k = 0: the embeddings). */
static void prepare_stage(decoder_t *s, int k) {
    const int layer = k / LINEARS, which = k % LINEARS;
    const long d = s->d;
    const float *const *model = s->t + (long)BLOCK_TENSORS * s->n_layers; /* final norm, head, embeddings */
    if (which == 0) { /* a layer's start, or the head: x += down's output, then norm */
        if (k == 0)
            for (long i = 0; i < d; i++) s->x[i] = model[3][i] + model[4][i];
        else
            for (long i = 0; i < d; i++) s->x[i] += s->y[i];
        if (layer == s->n_layers)
            layer_norm(s->x, model[0], model[1], d, s->eps, s->a);
        else
            layer_norm(s->x, tensor(s, layer, 0), tensor(s, layer, 1), d, s->eps, s->a);
    } else if (which == 1) {
        attend(s, layer);
    } else if (which == 2) { /* x += proj's output, then norm */
        for (long i = 0; i < d; i++) s->x[i] += s->y[i];
        layer_norm(s->x, tensor(s, layer, 6), tensor(s, layer, 7), d, s->eps, s->a);
    } else { /* GELU (erf), as torch's default */
        float *g = s->up + 4 * d;
        const float inv_sqrt2 = 0.70710678118654752f;
        for (long i = 0; i < 4 * d; i++) g[i] = 0.5f * s->up[i] * (1.0f + erff(s->up[i] * inv_sqrt2));
    }
}

static void decoder_job(void *arg, int index) {
    (void)index;
    decoder_t *s = arg;
    const int stages = LINEARS * s->n_layers + 1;
    for (long spins = 1;; spins++) {
        const int k = atomic_load_explicit(&s->stage, memory_order_acquire);
        if (k >= stages) return;
        long long v = atomic_load(&s->claim);
        const long chunks = stage_chunks(s, k);
        if ((v >> 32) != k || (v & 0xffffffffLL) >= chunks ||
            !atomic_compare_exchange_weak(&s->claim, &v, v + 1)) { /* none to take now: the stage is ending */
            wait_a_little(spins);
            continue;
        }
        long rows, cols;
        const float *w, *bias, *in;
        float *out;
        stage_gemv(s, k, &rows, &cols, &w, &bias, &in, &out);
        const long chunk = chunk_rows(rows, 4 * cols), r0 = (long)(v & 0xffffffffLL) * chunk;
        gemv_rows(w, cols, in, bias, out, r0, r0 + chunk < rows ? r0 + chunk : rows);
        if (atomic_fetch_add(&s->done, 1) + 1 == chunks) { /* the stage's last chunk: prepare the next */
            atomic_store(&s->done, 0);
            if (k + 1 < stages) prepare_stage(s, k + 1);
            atomic_store(&s->claim, (long long)(k + 1) << 32);
            atomic_store_explicit(&s->stage, k + 1, memory_order_release);
        }
    }
}

/* Logits (vocab,) of one token (see the block above for tensors and strides); d a multiple of heads.
 * Returns 0, -1 for bad arguments, -2 when out of memory. */
int lowbit_decoder_step(int n_layers, long d, int heads, long past, long vocab, const float *const *tensors,
                        const long *strides, float eps, float *logits, int threads) {
    if (n_layers < 1 || d < 1 || heads < 1 || d % heads || past < 0 || vocab < 1 || !tensors || !strides ||
        !logits || threads < 1)
        return -1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    float *work = malloc(sizeof(float) * (size_t)(15 * d + past + 1));
    if (!work) return -2;
    decoder_t s = {.n_layers = n_layers, .heads = heads, .d = d, .past = past, .vocab = vocab, .eps = eps,
                   .t = tensors, .strides = strides, .logits = logits};
    s.x = work, s.a = s.x + d, s.qkv = s.a + d, s.attn = s.qkv + 3 * d, s.up = s.attn + d;
    s.y = s.up + 8 * d, s.scores = s.y + d;
    atomic_init(&s.claim, 0);
    atomic_init(&s.done, 0);
    atomic_init(&s.stage, 0);
    prepare_stage(&s, 0);
    const int status = pool_run(decoder_job, &s, threads);
    free(work);
    return status;
}
