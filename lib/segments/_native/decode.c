/* Columnar decoder of Kafka v2 record sections (the native kernel behind segments/arrow.py).
 *
 * Python walks batch headers and decompresses; then ONE call here checks the CRCs of uncompressed
 * batches and decodes the record sections of many batches straight into Arrow buffers (no
 * per-record Python object):
 *
 *     decode_batches(sections: list[buffer], meta: buffer of int64[9 * len(sections)],
 *                    min_offset: int, max_offset: int, allocate) -> dict[str, int | bytes]
 *
 * meta holds per batch: recordsCount, baseOffset, baseTimestamp, maxTimestamp, attributes,
 * producerId, producerEpoch, recordsStart (where the records section starts in the buffer: 61 for
 * a whole uncompressed batch, 0 for a decompressed section) and crc (the stored CRC-32C of the
 * buffer's bytes from 21 on, checked just before the batch is decoded, while its bytes are in
 * cache; -1: not checked here). Bad bytes raise DecodeError(batch_index, position, reason),
 * position being the byte of the bad record inside its (decompressed) section, or -1 for a CRC
 * mismatch (arrow.py then raises batch.py's own CRC error).
 *
 * The rules are batch.py's reference decoder (_decode_records): whatever it rejects is rejected
 * here. Varints are decoded exactly (up to 70 bits, as Python does) so that both agree even on
 * absurd 10-byte varints; an offset or timestamp that does not fit in int64 is an error in both.
 * Every read is bounded by the record's declared end: the reference reads past it only to fail
 * later (its position never moves back), so failing at once gives the same verdict.
 * Each record is first tried by record_fast.h (64-bit varints, no error text): the usual record
 * costs a few cycles per field there; anything unusual goes through the exact path below.
 *
 * Output buffers are sized once from upper bounds (a record takes >= 7 bytes, a header >= 2, and
 * all key/value/header bytes fit in the section bytes), filled with the GIL released, then shrunk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "batch_walk.h"
#include "crc32c.h"

typedef __int128 i128;
typedef unsigned __int128 u128;

enum { M_COUNT, M_BASE_OFFSET, M_BASE_TIMESTAMP, M_MAX_TIMESTAMP, M_ATTRIBUTES, M_PRODUCER_ID,
       M_PRODUCER_EPOCH, M_RECORDS_START, M_CRC, META_FIELDS };
#define CRC_START 21 /* the CRC-32C covers a batch from its attributes to its end */

#define TIMESTAMP_TYPE_BIT 0x08
#define TRANSACTIONAL_BIT 0x10
#define CONTROL_BIT 0x20
#define MIN_RECORD_BODY 6 /* attributes + five one-byte varints */
#define MIN_RECORD_SIZE (1 + MIN_RECORD_BODY)
#define MIN_HEADER_SIZE 2 /* two one-byte length varints */
#define DATA_SLACK 32 /* key and value data: room for record_fast.h's fixed-size copy of a small field */

/* The Arrow buffers produced, in the order of the names Python receives them under. */
enum {
    B_OFFSET, B_TIMESTAMP, B_TIMESTAMP_TYPE, B_PRODUCER_ID, B_PRODUCER_EPOCH, B_TRANSACTIONAL,
    B_CONTROL, B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA, B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA,
    B_HEADER_OFFSETS, B_HKEY_OFFSETS, B_HKEY_DATA, B_HVALUE_VALID, B_HVALUE_OFFSETS, B_HVALUE_DATA,
    N_BUFFERS
};
static const char *const BUFFER_NAMES[N_BUFFERS] = {
    "offset", "timestamp", "timestamp_type", "producer_id", "producer_epoch", "is_transactional",
    "is_control", "key_valid", "key_offsets", "key_data", "value_valid", "value_offsets",
    "value_data", "header_offsets", "header_key_offsets", "header_key_data", "header_value_valid",
    "header_value_offsets", "header_value_data",
};

/* Where the decoded columns go, and how far each is filled. */
typedef struct {
    char *buf[N_BUFFERS];
    Py_ssize_t rows, headers;
    Py_ssize_t key_bytes, value_bytes, hkey_bytes, hvalue_bytes;
    Py_ssize_t key_nulls, value_nulls, hvalue_nulls;
} Columns;

typedef struct {
    Py_ssize_t batch, position;
    char reason[200];
} Failure;

static PyObject *DecodeError;

/* ------------------------------------------------------------------------------------------ */

/* Kafka's zig-zag varint of at most 10 bytes, exact like varint.decode_varint. 0 or a reason. */
static inline const char *read_varint(const uint8_t **pp, const uint8_t *end, i128 *out)
{
    const uint8_t *p = *pp;
    uint64_t u = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (p >= end)
            return "varint runs past the end of the record";
        uint8_t b = *p++;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = (i128)(u >> 1) ^ -(i128)(u & 1);
            return NULL;
        }
    }
    if (p >= end)
        return "varint runs past the end of the record";
    uint8_t b = *p++;
    if (b & 0x80)
        return "varint longer than 10 bytes";
    u128 w = (u128)u | ((u128)(b & 0x7F) << 63); /* the 10th byte reaches bits 63..69 */
    *pp = p;
    *out = (i128)(w >> 1) ^ -(i128)(w & 1);
    return NULL;
}

/* A length-prefixed field; *size = -1 for null (any negative length, as the reference). */
static inline const char *read_field(const uint8_t **pp, const uint8_t *end, const uint8_t **data,
                                     Py_ssize_t *size)
{
    i128 n;
    const char *err = read_varint(pp, end, &n);
    if (err)
        return err;
    if (n < 0) {
        *size = -1;
        return NULL;
    }
    if (n > end - *pp)
        return "field runs past the end of the record";
    *data = *pp;
    *size = (Py_ssize_t)n;
    *pp += n;
    return NULL;
}

/* Well-formed UTF-8 (Unicode table 3-7): what Python's strict decoder accepts. */
static int valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) { more = 2; lo = 0xA0; }              /* no overlongs */
        else if (c == 0xED) { more = 2; hi = 0x9F; }              /* no surrogates */
        else if (c >= 0xE1 && c <= 0xEF) more = 2;
        else if (c == 0xF0) { more = 3; lo = 0x90; }              /* no overlongs */
        else if (c == 0xF4) { more = 3; hi = 0x8F; }              /* <= U+10FFFF */
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else return 0;
        if (n - i <= more || s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (int k = 2; k <= more; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += more + 1;
    }
    return 1;
}

static inline void set_bit(char *bits, Py_ssize_t i, int on)
{
    uint8_t mask = (uint8_t)(1u << (i & 7));
    if (on)
        bits[i >> 3] |= mask;
    else
        bits[i >> 3] &= (uint8_t)~mask;
}

/* Append a nullable field to an Arrow binary column (validity, int32 offsets, data). */
static inline void put_field(char *valid, char *offsets, char *data, Py_ssize_t row, Py_ssize_t *used,
                             Py_ssize_t *nulls, const uint8_t *src, Py_ssize_t size)
{
    if (valid)
        set_bit(valid, row, size >= 0);
    if (size < 0) {
        (*nulls)++;
    } else {
        memcpy(data + *used, src, (size_t)size);
        *used += size;
    }
    ((int32_t *)offsets)[row + 1] = (int32_t)*used;
}

static int fail(Failure *f, Py_ssize_t position, const char *fmt, long long a, long long b)
{
    f->position = position;
    snprintf(f->reason, sizeof f->reason, fmt, a, b);
    return -1;
}

static int fail_with(Failure *f, Py_ssize_t position, const char *reason)
{
    f->position = position;
    snprintf(f->reason, sizeof f->reason, "%s", reason);
    return -1;
}

static inline long long clamp(i128 v)
{
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (long long)v;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        const char *err_ = (call);                                                                 \
        if (err_)                                                                                  \
            return fail_with(f, rec - buf, err_);                                                 \
    } while (0)

#include "record_fast.h" /* decode_record_fast: the usual record, fast */

/* The columns every record of a batch shares, for its rows [first_row, c->rows). */
static void fill_batch_columns(Columns *c, Py_ssize_t first_row, const int64_t *m, int log_append_time)
{
    const int transactional = (m[M_ATTRIBUTES] & TRANSACTIONAL_BIT) != 0, control = (m[M_ATTRIBUTES] & CONTROL_BIT) != 0;
    memset(c->buf[B_TIMESTAMP_TYPE] + first_row, log_append_time, (size_t)(c->rows - first_row));
    for (Py_ssize_t row = first_row; row < c->rows; row++) {
        ((int64_t *)c->buf[B_PRODUCER_ID])[row] = m[M_PRODUCER_ID];
        ((int16_t *)c->buf[B_PRODUCER_EPOCH])[row] = (int16_t)m[M_PRODUCER_EPOCH];
        if (transactional) /* the bitmaps start zeroed */
            set_bit(c->buf[B_TRANSACTIONAL], row, 1);
        if (control)
            set_bit(c->buf[B_CONTROL], row, 1);
    }
}

/* Decode one batch's records section, appending the records within [lo, hi] to `c`. The next
 * batch's buffer (`ahead`) is prefetched as far into it as this one's records have gone: its bytes
 * come from memory while these are decoded, not while its CRC waits for them (bench/decode.py:
 * about 10% of the uncompressed decode). */
static int decode_batch(const uint8_t *buf, Py_ssize_t len, const int64_t *m, int64_t lo, int64_t hi,
                        Columns *c, Failure *f, const uint8_t *ahead, Py_ssize_t ahead_len)
{
    const uint8_t *p = buf, *end = buf + len, *rec = buf;
    const uint8_t *prefetched = ahead, *ahead_end = ahead + ahead_len;
    const int64_t count = m[M_COUNT];
    const int log_append_time = (m[M_ATTRIBUTES] & TIMESTAMP_TYPE_BIT) != 0;
    const Py_ssize_t first_row = c->rows;
    for (int64_t i = 0; i < count; i++) {
        rec = p;
        if (p >= end)
            return fail(f, rec - buf, "Incorrect declared batch size: %lld records declared, %lld found",
                        count, i);
        const uint8_t *next = decode_record_fast(p, end, m, log_append_time, lo, hi, c);
        if (LIKELY(next != NULL)) {
            p = next;
            for (; prefetched < ahead_end && prefetched - ahead < p - buf; prefetched += 64)
                __builtin_prefetch(prefetched);
            continue;
        }
        i128 length, ts_delta, offset_delta, header_count;
        CHECK(read_varint(&p, end, &length));
        if (length < MIN_RECORD_BODY || length > end - p)
            return fail(f, rec - buf, "record length %lld runs past the end of the batch or is too short",
                        clamp(length), 0);
        const uint8_t *record_end = p + length;
        p++; /* record attributes: unused */
        CHECK(read_varint(&p, record_end, &ts_delta));
        CHECK(read_varint(&p, record_end, &offset_delta));
        const uint8_t *key = NULL, *value = NULL;
        Py_ssize_t key_size, value_size;
        CHECK(read_field(&p, record_end, &key, &key_size));
        CHECK(read_field(&p, record_end, &value, &value_size));
        CHECK(read_varint(&p, record_end, &header_count));
        if (header_count < 0)
            return fail(f, rec - buf, "negative header count %lld", clamp(header_count), 0);

        /* headers go straight to the output; a record dropped by the offset filter rolls back */
        const Py_ssize_t row = c->rows, first_header = c->headers;
        const Py_ssize_t hkey_mark = c->hkey_bytes, hvalue_mark = c->hvalue_bytes, hnull_mark = c->hvalue_nulls;
        for (i128 h = 0; h < header_count; h++) {
            const uint8_t *hkey = NULL, *hvalue = NULL;
            Py_ssize_t hkey_size, hvalue_size;
            CHECK(read_field(&p, record_end, &hkey, &hkey_size));
            if (hkey_size < 0)
                return fail(f, rec - buf, "null header key", 0, 0);
            CHECK(read_field(&p, record_end, &hvalue, &hvalue_size));
            if (!valid_utf8(hkey, hkey_size))
                return fail(f, rec - buf, "header key is not UTF-8", 0, 0);
            put_field(NULL, c->buf[B_HKEY_OFFSETS], c->buf[B_HKEY_DATA], c->headers, &c->hkey_bytes, NULL,
                      hkey, hkey_size);
            put_field(c->buf[B_HVALUE_VALID], c->buf[B_HVALUE_OFFSETS], c->buf[B_HVALUE_DATA], c->headers,
                      &c->hvalue_bytes, &c->hvalue_nulls, hvalue, hvalue_size);
            c->headers++;
        }
        if (p != record_end)
            return fail(f, rec - buf, "record declares %lld bytes but its fields take %lld", (long long)length,
                        (long long)(length + (p - record_end)));

        i128 offset = (i128)m[M_BASE_OFFSET] + offset_delta;
        if (offset < INT64_MIN || offset > INT64_MAX)
            return fail(f, rec - buf, "record offset does not fit in 64 bits (delta %lld)", clamp(offset_delta), 0);
        i128 timestamp = log_append_time ? (i128)m[M_MAX_TIMESTAMP] : (i128)m[M_BASE_TIMESTAMP] + ts_delta;
        if (timestamp < INT64_MIN || timestamp > INT64_MAX)
            return fail(f, rec - buf, "record timestamp does not fit in 64 bits (delta %lld)", clamp(ts_delta), 0);
        if (offset < lo || offset > hi) {
            roll_back_headers(c, first_header, hkey_mark, hvalue_mark, hnull_mark);
            continue;
        }

        ((int64_t *)c->buf[B_OFFSET])[row] = (int64_t)offset;
        ((int64_t *)c->buf[B_TIMESTAMP])[row] = (int64_t)timestamp;
        put_field(c->buf[B_KEY_VALID], c->buf[B_KEY_OFFSETS], c->buf[B_KEY_DATA], row, &c->key_bytes,
                  &c->key_nulls, key, key_size);
        put_field(c->buf[B_VALUE_VALID], c->buf[B_VALUE_OFFSETS], c->buf[B_VALUE_DATA], row, &c->value_bytes,
                  &c->value_nulls, value, value_size);
        ((int32_t *)c->buf[B_HEADER_OFFSETS])[row + 1] = (int32_t)c->headers;
        c->rows++;
    }
    if (p != end)
        return fail(f, p - buf, "Incorrect declared batch size: %lld bytes left after %lld records",
                    (long long)(end - p), count);
    fill_batch_columns(c, first_row, m, log_append_time);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

/* Byte size of each buffer for `rows` records, `headers` headers and the data column sizes. */
static void buffer_sizes(Py_ssize_t rows, Py_ssize_t headers, Py_ssize_t key_bytes, Py_ssize_t value_bytes,
                         Py_ssize_t hkey_bytes, Py_ssize_t hvalue_bytes, Py_ssize_t size[N_BUFFERS])
{
    Py_ssize_t row_bits = (rows + 7) / 8;
    size[B_OFFSET] = size[B_TIMESTAMP] = size[B_PRODUCER_ID] = 8 * rows;
    size[B_TIMESTAMP_TYPE] = rows;
    size[B_PRODUCER_EPOCH] = 2 * rows;
    size[B_TRANSACTIONAL] = size[B_CONTROL] = size[B_KEY_VALID] = size[B_VALUE_VALID] = row_bits;
    size[B_KEY_OFFSETS] = size[B_VALUE_OFFSETS] = size[B_HEADER_OFFSETS] = 4 * (rows + 1);
    size[B_HVALUE_VALID] = (headers + 7) / 8;
    size[B_HKEY_OFFSETS] = size[B_HVALUE_OFFSETS] = 4 * (headers + 1);
    size[B_KEY_DATA] = key_bytes;
    size[B_VALUE_DATA] = value_bytes;
    size[B_HKEY_DATA] = hkey_bytes;
    size[B_HVALUE_DATA] = hvalue_bytes;
}

/* A declared count no section could hold, or a chunk too large for Arrow's int32 offsets. */
static int check_section(int64_t count, Py_ssize_t len, Py_ssize_t bytes_before, Failure *f)
{
    if (count < 0)
        return fail(f, 0, "negative record count %lld", count, 0);
    if (count > len / MIN_RECORD_SIZE)
        return fail(f, 0, "Incorrect declared batch size: %lld records cannot fit in %lld bytes", count, len);
    if (len > INT32_MAX - bytes_before)
        return fail(f, 0, "records section of %lld bytes is too large to decode (%lld bytes before it)", len,
                    bytes_before);
    return 0;
}

/* The CRC of the batch in `view`, when meta asks for it (0: fine or not asked). */
static int check_crc(const Py_buffer *view, const int64_t *m, Failure *f)
{
    if (m[M_CRC] < 0 || crc32c((const uint8_t *)view->buf + CRC_START, (size_t)(view->len - CRC_START)) == m[M_CRC])
        return 0;
    return fail_with(f, -1, "CRC mismatch");
}

/* The buffers the caller passed in, viewed for reading (sections) or writing (outputs). */
typedef struct {
    Py_buffer *views;
    Py_ssize_t count;
} Views;

static void release_views(Views *v)
{
    for (Py_ssize_t i = 0; i < v->count; i++)
        PyBuffer_Release(&v->views[i]);
    PyMem_Free(v->views);
}

/* Allocate one output buffer through `allocate(size)` (pyarrow.allocate_buffer: Arrow's pool,
 * which recycles pages) and view it for writing. */
static int allocate_output(PyObject *allocate, Py_ssize_t size, PyObject **obj, Py_buffer *view)
{
    PyObject *n = PyLong_FromSsize_t(size);
    *obj = n ? PyObject_CallOneArg(allocate, n) : NULL;
    Py_XDECREF(n);
    if (!*obj || PyObject_GetBuffer(*obj, view, PyBUF_WRITABLE) < 0)
        return -1;
    if (view->len < size) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "allocate(%zd) returned a buffer of %zd bytes", size, view->len);
        return -1;
    }
    return 0;
}

static PyObject *raise_failure(const Failure *f)
{
    PyObject *args = Py_BuildValue("(nns)", f->batch, f->position, f->reason);
    if (args) {
        PyErr_SetObject(DecodeError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *build_result(PyObject **bufs, const Columns *c)
{
    Py_ssize_t used[N_BUFFERS];
    buffer_sizes(c->rows, c->headers, c->key_bytes, c->value_bytes, c->hkey_bytes, c->hvalue_bytes, used);
    PyObject *out = Py_BuildValue("{s:n,s:n,s:n,s:n,s:n}", "rows", c->rows, "headers", c->headers,
                                  "key_nulls", c->key_nulls, "value_nulls", c->value_nulls,
                                  "header_value_nulls", c->hvalue_nulls);
    PyObject *buffers = PyDict_New(), *sizes = PyDict_New();
    int ok = out && buffers && sizes && PyDict_SetItemString(out, "buffers", buffers) == 0 &&
             PyDict_SetItemString(out, "sizes", sizes) == 0;
    for (int b = 0; ok && b < N_BUFFERS; b++) {
        PyObject *size = PyLong_FromSsize_t(used[b]);
        ok = size && PyDict_SetItemString(buffers, BUFFER_NAMES[b], bufs[b]) == 0 &&
             PyDict_SetItemString(sizes, BUFFER_NAMES[b], size) == 0;
        Py_XDECREF(size);
    }
    Py_XDECREF(buffers);
    Py_XDECREF(sizes);
    if (!ok)
        Py_CLEAR(out);
    return out;
}

static PyObject *decode_batches(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *sections, *allocate, *result = NULL, *bufs[N_BUFFERS] = {NULL};
    Py_buffer meta;
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "O!y*LLO", &PyList_Type, &sections, &meta, &lo, &hi, &allocate))
        return NULL;
    const Py_ssize_t nbatches = PyList_GET_SIZE(sections);
    const int64_t *m = (const int64_t *)meta.buf;
    Views in = {PyMem_Calloc(nbatches + 1, sizeof(Py_buffer)), 0};
    Views out = {PyMem_Calloc(N_BUFFERS, sizeof(Py_buffer)), 0};
    Failure failure = {.batch = -1};
    if (!in.views || !out.views) {
        PyErr_NoMemory();
        goto done;
    }
    if (meta.len != nbatches * META_FIELDS * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "meta must hold 9 int64 per section");
        goto done;
    }

    /* Upper bounds (a record takes >= 7 bytes, a header >= 2, every key/value/header byte is a
     * section byte): allocated once. Impossible counts fail before anything is allocated. */
    Py_ssize_t rows = 0, bytes = 0;
    while (in.count < nbatches) {
        Py_buffer *view = &in.views[in.count];
        const int64_t *bm = m + in.count * META_FIELDS;
        if (PyObject_GetBuffer(PyList_GET_ITEM(sections, in.count), view, PyBUF_SIMPLE) < 0)
            goto done;
        in.count++;
        const int64_t start = bm[M_RECORDS_START];
        if (start < 0 || start > view->len || (bm[M_CRC] >= 0 && view->len < CRC_START) ||
            (bm[M_CRC] >= 0 && !crc32c_available())) {
            PyErr_SetString(PyExc_ValueError, "records start outside its buffer, or a CRC this CPU cannot check");
            goto done;
        }
        if (check_section(bm[M_COUNT], view->len - start, bytes, &failure) < 0) {
            /* the CRCs up to this batch come first, as if each were checked before it is read */
            for (Py_ssize_t j = 0; j < in.count; j++)
                if (check_crc(&in.views[j], m + j * META_FIELDS, &failure) < 0) {
                    failure.batch = j;
                    break;
                }
            if (failure.batch < 0)
                failure.batch = in.count - 1;
            raise_failure(&failure);
            goto done;
        }
        rows += bm[M_COUNT];
        bytes += view->len - start;
    }
    Py_ssize_t capacity[N_BUFFERS];
    buffer_sizes(rows, bytes / MIN_HEADER_SIZE, bytes + DATA_SLACK, bytes + DATA_SLACK, bytes, bytes, capacity);
    Columns c = {0};
    for (; out.count < N_BUFFERS; out.count++) {
        if (allocate_output(allocate, capacity[out.count], &bufs[out.count], &out.views[out.count]) < 0)
            goto done;
        c.buf[out.count] = out.views[out.count].buf;
    }
    /* bitmaps are or-ed into; every offsets array starts at 0 */
    const int bitmaps[] = {B_TRANSACTIONAL, B_CONTROL, B_KEY_VALID, B_VALUE_VALID, B_HVALUE_VALID};
    for (size_t z = 0; z < sizeof bitmaps / sizeof *bitmaps; z++)
        memset(c.buf[bitmaps[z]], 0, capacity[bitmaps[z]]);
    const int offsets[] = {B_KEY_OFFSETS, B_VALUE_OFFSETS, B_HEADER_OFFSETS, B_HKEY_OFFSETS, B_HVALUE_OFFSETS};
    for (size_t z = 0; z < sizeof offsets / sizeof *offsets; z++)
        memset(c.buf[offsets[z]], 0, sizeof(int32_t));

    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nbatches && rc == 0; i++) {
        const int64_t *bm = m + i * META_FIELDS;
        const Py_ssize_t start = (Py_ssize_t)bm[M_RECORDS_START];
        const Py_buffer *next = i + 1 < nbatches ? &in.views[i + 1] : &in.views[i]; /* the last: nothing */
        failure.batch = i;
        rc = check_crc(&in.views[i], bm, &failure);
        if (rc == 0)
            rc = decode_batch((const uint8_t *)in.views[i].buf + start, in.views[i].len - start, bm, lo, hi, &c,
                              &failure, next->buf, next == &in.views[i] ? 0 : next->len);
    }
    Py_END_ALLOW_THREADS
    if (rc != 0)
        raise_failure(&failure);
    else
        result = build_result(bufs, &c);

done:
    if (in.views)
        release_views(&in);
    if (out.views)
        release_views(&out);
    for (int b = 0; b < N_BUFFERS; b++)
        Py_XDECREF(bufs[b]);
    PyBuffer_Release(&meta);
    return result;
}

static PyObject *crc32c_of(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    if (!crc32c_available()) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_RuntimeError, "this CPU has no crc32 instruction (HARDWARE_CRC32C is False)");
        return NULL;
    }
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc32c(data.buf, (size_t)data.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32c", crc32c_of, METH_VARARGS, "crc32c(data) -> int: the CRC-32C the kernel checks batches with."},
    {"walk_plain", walk_plain, METH_VARARGS,
     "walk_plain(buf, pos, end, budget, take_one, check_crc) -> (next_pos, meta, spans)\n\n"
     "The headers of the plain (uncompressed v2) batches from pos, as decode_batches' meta (batch_walk.c)."},
    {"decode_batches", decode_batches, METH_VARARGS,
     "decode_batches(sections, meta, min_offset, max_offset, allocate) -> dict\n\n"
     "Decode v2 record sections into Arrow buffers obtained from allocate(size); returns the row,\n"
     "header and null counts, 'buffers' (name -> buffer) and 'sizes' (name -> bytes used)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_decode", .m_doc = "Columnar decoder of Kafka v2 record sections.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__decode(void)
{
    PyObject *mod = PyModule_Create(&module);
    if (!mod)
        return NULL;
    DecodeError = PyErr_NewException("topiclake.segments._native._decode.DecodeError", PyExc_ValueError, NULL);
    if (!DecodeError || PyModule_AddObjectRef(mod, "DecodeError", DecodeError) < 0 ||
        PyModule_AddObjectRef(mod, "HARDWARE_CRC32C", crc32c_available() ? Py_True : Py_False) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
