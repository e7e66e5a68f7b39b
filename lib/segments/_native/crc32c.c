/* CRC-32C with the SSE4.2 crc32 instruction, three streams at a time, or, on CPUs with AVX-512
 * VPCLMULQDQ, by carry-less multiplication folding (Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", 512 bits a step) for buffers of 256 bytes and more.
 *
 * The instruction takes 3 cycles but a new one can start every cycle, so the buffer is cut into
 * blocks of three lanes computed side by side, then joined: the CRC state after lane A followed
 * by lane B is (state_A * x^(8 * len(B)) mod P) xor crc(B) (the CRC is linear over GF(2)). The
 * multiply is zlib's multmodp (crc32.c), by a constant computed once. That peaks at 8 bytes a
 * cycle; folding does 256 bytes in 8 multiplies, so the check costs a fraction of the decode.
 * Only x86-64 has it; other CPUs report crc32c_available() == 0 and arrow.py checks CRCs with the
 * crc32c package instead.
 */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* CRC-32C, bit-reflected */
#define LONG_LANE 8192 /* bytes per lane: a join costs ~100 cycles per 3 lanes */
#define SHORT_LANE 256 /* then shorter lanes for the rest (Mark Adler's crc32c.c does the same) */

/* a(x) * b(x) mod P, bit-reflected (zlib's multmodp). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^(8 * bytes) mod P: the factor that moves a CRC state past `bytes` zero bytes. */
static uint32_t shift_factor(size_t bytes)
{
    uint32_t result = 1u << 31, square = 1u << 30; /* x^0, and x^1 */
    for (size_t bits = 8 * bytes; bits; bits >>= 1) {
        if (bits & 1)
            result = multmodp(square, result);
        square = multmodp(square, square);
    }
    return result;
}

#if defined(__x86_64__)
#include <immintrin.h>

int crc32c_available(void)
{
    return __builtin_cpu_supports("sse4.2");
}

__attribute__((target("sse4.2"))) static uint64_t crc_run(uint64_t crc, const uint8_t *p, size_t n)
{
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = _mm_crc32_u64(crc, word);
    }
    for (; n; p++, n--)
        crc = _mm_crc32_u8((uint32_t)crc, *p);
    return crc;
}

/* Whole blocks of three `lane`-byte lanes from state *a; returns the bytes consumed. */
__attribute__((target("sse4.2"))) static inline size_t crc_lanes(uint64_t *a, const uint8_t *p, size_t n,
                                                                 size_t lane, uint32_t factor)
{
    size_t done = 0;
    for (; n - done >= 3 * lane; done += 3 * lane) {
        const uint8_t *q = p + done;
        uint64_t b = 0, c = 0;
        for (size_t i = 0; i < lane; i += 8) {
            uint64_t wa, wb, wc;
            memcpy(&wa, q + i, 8);
            memcpy(&wb, q + lane + i, 8);
            memcpy(&wc, q + 2 * lane + i, 8);
            *a = _mm_crc32_u64(*a, wa);
            b = _mm_crc32_u64(b, wb);
            c = _mm_crc32_u64(c, wc);
        }
        *a = multmodp(factor, multmodp(factor, (uint32_t)*a) ^ (uint32_t)b) ^ (uint32_t)c;
    }
    return done;
}

#define FOLD_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.2")))
#define FOLD_MIN 256 /* bytes: four 64-byte accumulators */

/* The multiplier pair that moves a 16-byte chunk `bytes` forward: its low 64 bits (the earlier
 * bytes) times x^(8 * bytes + 32), its high 64 bits times x^(8 * bytes - 32), both mod P and
 * shifted left by one (the product of two reflected polynomials lands one bit low). */
static void fold_constants(size_t bytes, uint64_t k[2])
{
    k[0] = (uint64_t)shift_factor(bytes + 4) << 1;
    k[1] = (uint64_t)shift_factor(bytes - 4) << 1;
}

FOLD_TARGET static inline __m512i fold_512(__m512i x, __m512i k, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11),
                                     next, 0x96); /* a ^ b ^ c */
}

FOLD_TARGET static inline __m128i fold_128(__m128i x, const uint64_t k[2], __m128i next)
{
    const __m128i kk = _mm_set_epi64x((long long)k[1], (long long)k[0]);
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, kk, 0x00), _mm_clmulepi64_si128(x, kk, 0x11)),
                         next);
}

/* The CRC state after the first (n & ~63) bytes of p (n >= FOLD_MIN), from state `crc`: the state
 * goes into the first bytes (the CRC update is state xor data), four 512-bit accumulators fold
 * 256 bytes a step, then one 64 bytes a step, its four 128-bit lanes fold into one, and the crc32
 * instruction reduces those 16 bytes from state 0 (they are congruent to everything before). */
FOLD_TARGET static uint64_t crc_fold(uint32_t crc, const uint8_t *p, size_t n, const uint64_t (*k)[2])
{
    __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
    __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    const __m512i k256 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[0][1], (long long)k[0][0]));
    const __m512i k64 = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)k[1][1], (long long)k[1][0]));
    size_t done = 256;
    for (; n - done >= 256; done += 256) {
        x0 = fold_512(x0, k256, _mm512_loadu_si512(p + done));
        x1 = fold_512(x1, k256, _mm512_loadu_si512(p + done + 64));
        x2 = fold_512(x2, k256, _mm512_loadu_si512(p + done + 128));
        x3 = fold_512(x3, k256, _mm512_loadu_si512(p + done + 192));
    }
    __m512i x = fold_512(fold_512(fold_512(x0, k64, x1), k64, x2), k64, x3);
    for (; n - done >= 64; done += 64)
        x = fold_512(x, k64, _mm512_loadu_si512(p + done));
    __m128i v = fold_128(_mm512_extracti32x4_epi32(x, 0), k[2], _mm512_extracti32x4_epi32(x, 3));
    v = fold_128(_mm512_extracti32x4_epi32(x, 1), k[3], v);
    v = fold_128(_mm512_extracti32x4_epi32(x, 2), k[4], v);
    return _mm_crc32_u64(_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(v)), (uint64_t)_mm_extract_epi64(v, 1));
}

__attribute__((target("sse4.2"))) uint32_t crc32c(const uint8_t *p, size_t n)
{
    /* racing threads store the same values; `ready` is written last */
    static uint32_t long_factor, short_factor;
    static uint64_t fold_k[5][2]; /* moves of 256, 64, 48, 32 and 16 bytes (fold_constants) */
    static int can_fold, ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        long_factor = shift_factor(LONG_LANE);
        short_factor = shift_factor(SHORT_LANE);
        const size_t moves[5] = {256, 64, 48, 32, 16};
        for (int i = 0; i < 5; i++)
            fold_constants(moves[i], fold_k[i]);
        can_fold = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("vpclmulqdq");
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    uint64_t a = 0xFFFFFFFFu;
    if (can_fold && n >= FOLD_MIN) {
        a = crc_fold((uint32_t)a, p, n, (const uint64_t(*)[2])fold_k);
        size_t done = n & ~(size_t)63;
        return (uint32_t)crc_run(a, p + done, n - done) ^ 0xFFFFFFFFu;
    }
    size_t done = crc_lanes(&a, p, n, LONG_LANE, long_factor);
    done += crc_lanes(&a, p + done, n - done, SHORT_LANE, short_factor);
    return (uint32_t)crc_run(a, p + done, n - done) ^ 0xFFFFFFFFu;
}

#else

int crc32c_available(void)
{
    return 0;
}

uint32_t crc32c(const uint8_t *p, size_t n)
{
    (void)shift_factor;
    uint32_t crc = 0xFFFFFFFFu;
    for (; n; p++, n--) { /* bit by bit: never used for batches here (crc32c_available() == 0) */
        crc ^= *p;
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ POLY : crc >> 1;
    }
    return ~crc;
}

#endif
