/* The batch-header walk of the uncompressed v2 batches the decoder sees most (arrow.py's fast path).
 *
 *     walk_plain(buf, pos, end, budget, take_one, check_crc) -> (next_pos, meta: bytes, spans: bytes)
 *
 * Reads the 61-byte headers of consecutive batches from `pos`, and stops before the first one that
 * is not plain: fewer than 61 bytes left, a length below the v2 minimum or past `end`, magic other
 * than 2, or a compression codec. Python's walk (batch.py, legacy.py) then takes that unit, with
 * its own error text or its own handling (a partial tail, a legacy message, a codec); so this
 * walk never judges anything, and whatever Python accepts or rejects stays the same. It also stops
 * before a batch whose records section would bring the sum past `budget` bytes, except the first
 * one with `take_one` (the caller's chunk is empty; a batch is never split).
 *
 * meta holds decode_batches' 9 int64 per batch (records_start 61; the stored CRC, or -1 without
 * check_crc); spans holds (position, size) int64 pairs, for the sections and for error messages.
 * Per batch that is a few dozen cycles, against ~6 us of Python per header.
 */
#include "batch_walk.h"

#include <stdint.h>
#include <string.h>

#define LOG_OVERHEAD 12 /* baseOffset + length: the bytes `length` does not count */
#define HEADER_SIZE 61
#define MIN_LENGTH_FIELD (HEADER_SIZE - LOG_OVERHEAD)
#define CURRENT_MAGIC 2
#define COMPRESSION_MASK 0x07
enum { META_FIELDS = 9, SPAN_FIELDS = 2 };

static inline uint64_t be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

static inline uint32_t be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static inline uint16_t be16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return __builtin_bswap16(v);
}

/* How many plain batches follow `pos` within the limits, and where they end. */
static Py_ssize_t count_plain(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t budget, int take_one,
                              Py_ssize_t *next_pos)
{
    Py_ssize_t n = 0, records_bytes = 0;
    while (end - pos >= HEADER_SIZE) {
        const uint8_t *h = buf + pos;
        const int32_t length = (int32_t)be32(h + 8);
        if (length < MIN_LENGTH_FIELD || (Py_ssize_t)length + LOG_OVERHEAD > end - pos ||
            (int8_t)h[16] != CURRENT_MAGIC || (be16(h + 21) & COMPRESSION_MASK) != 0)
            break;
        const Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (records_bytes + size - HEADER_SIZE > budget && !(take_one && n == 0))
            break;
        records_bytes += size - HEADER_SIZE;
        pos += size;
        n++;
    }
    *next_pos = pos;
    return n;
}

PyObject *walk_plain(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, budget;
    int take_one, check_crc;
    if (!PyArg_ParseTuple(args, "y*nnnpp", &view, &pos, &end, &budget, &take_one, &check_crc))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "walk_plain: pos and end must lie within the buffer");
        goto done;
    }
    const uint8_t *buf = view.buf;
    Py_ssize_t next_pos;
    Py_ssize_t n = count_plain(buf, pos, end, budget, take_one, &next_pos);
    PyObject *meta = PyBytes_FromStringAndSize(NULL, n * META_FIELDS * (Py_ssize_t)sizeof(int64_t));
    PyObject *spans = PyBytes_FromStringAndSize(NULL, n * SPAN_FIELDS * (Py_ssize_t)sizeof(int64_t));
    if (meta && spans) {
        int64_t *m = (int64_t *)PyBytes_AS_STRING(meta), *s = (int64_t *)PyBytes_AS_STRING(spans);
        for (Py_ssize_t i = 0; i < n; i++, m += META_FIELDS, s += SPAN_FIELDS) {
            /* the bytes are read again: bounded again (another process may rewrite a shared map) */
            const uint8_t *h = buf + pos;
            const int32_t length = next_pos - pos >= HEADER_SIZE ? (int32_t)be32(h + 8) : -1;
            const Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
            if (length < MIN_LENGTH_FIELD || size > next_pos - pos) {
                n = i;
                next_pos = pos;
                break;
            }
            m[0] = (int32_t)be32(h + 57);  /* recordsCount */
            m[1] = (int64_t)be64(h);       /* baseOffset */
            m[2] = (int64_t)be64(h + 27);  /* baseTimestamp */
            m[3] = (int64_t)be64(h + 35);  /* maxTimestamp */
            m[4] = (int16_t)be16(h + 21);  /* attributes */
            m[5] = (int64_t)be64(h + 43);  /* producerId */
            m[6] = (int16_t)be16(h + 51);  /* producerEpoch */
            m[7] = HEADER_SIZE;            /* the records section starts after the header */
            m[8] = check_crc ? (int64_t)be32(h + 17) : -1;
            s[0] = pos;
            s[1] = size;
            pos += size;
        }
        if (_PyBytes_Resize(&meta, n * META_FIELDS * (Py_ssize_t)sizeof(int64_t)) == 0 &&
            _PyBytes_Resize(&spans, n * SPAN_FIELDS * (Py_ssize_t)sizeof(int64_t)) == 0)
            result = Py_BuildValue("(nNN)", next_pos, meta, spans);
        else {
            Py_XDECREF(meta);
            Py_XDECREF(spans);
        }
    } else {
        Py_XDECREF(meta);
        Py_XDECREF(spans);
    }
done:
    PyBuffer_Release(&view);
    return result;
}
