/* CRC-32C with the SSE4.2 crc32 instruction, three streams at a time.
 *
 * The instruction takes 3 cycles but a new one can start every cycle, so the buffer is cut into
 * blocks of three lanes computed side by side, then joined: the CRC state after lane A followed
 * by lane B is (state_A * x^(8 * len(B)) mod P) xor crc(B) (the CRC is linear over GF(2)). The
 * multiply is zlib's multmodp (crc32.c), by a constant computed once. Only x86-64 has it; other
 * CPUs report crc32c_available() == 0 and arrow.py checks CRCs with the crc32c package instead.
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
#include <nmmintrin.h>

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

__attribute__((target("sse4.2"))) uint32_t crc32c(const uint8_t *p, size_t n)
{
    static uint32_t long_factor, short_factor; /* racing threads store the same values */
    if (!short_factor) {
        long_factor = shift_factor(LONG_LANE);
        short_factor = shift_factor(SHORT_LANE);
    }
    uint64_t a = 0xFFFFFFFFu;
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
