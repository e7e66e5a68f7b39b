/* Native kernels of the log cleaner (segments/offset_map.py and segments/cleaner.py).
 *
 *     md5_digests(column) -> bytes
 *         MD5 of every value of an Arrow binary column, 16 bytes per row (a null row gives 16
 *         zero bytes; callers mask nulls themselves). Kafka's cleaner keys its offset map by the
 *         MD5 of the record key (CleanerConfig.HASH_ALGORITHM); hashlib.md5 is the Python twin.
 *
 *     encode_batches(columns, rows, starts, base_offsets, base_timestamps) -> list[bytes]
 *         The uncompressed records section of each rebuilt batch b: the rows
 *         rows[starts[b]:starts[b+1]] of the decoded columns, encoded exactly as batch.py's
 *         encode_record (record attributes 0, zig-zag varints, deltas against the batch's base
 *         offset and base timestamp). batch.build_batch is the Python twin.
 *
 * A binary column is the tuple (validity buffer or None, int32 offsets buffer, data buffer,
 * array offset); `columns` is (rows, offset int64 buffer, timestamp int64 buffer, key column,
 * value column, (header list offsets buffer, list array offset), header key column, header value
 * column), the header columns' array offsets including their struct's. The buffers usually come
 * from our own decoder, but every index, offset and length is checked against the buffer it
 * reads, so bad input raises ValueError instead of reading out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef __int128 i128;
typedef unsigned __int128 u128;

/* ------------------------------------------------------------------------------------ MD5 */

static const uint32_t MD5_K[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
};
static const uint8_t MD5_R[4][4] = {{7, 12, 17, 22}, {5, 9, 14, 20}, {4, 11, 16, 23}, {6, 10, 15, 21}};

static inline uint32_t rotl(uint32_t x, int c) { return (x << c) | (x >> (32 - c)); }

/* RFC 1321, one 64-byte block. */
static void md5_block(uint32_t h[4], const uint8_t *p)
{
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        switch (i >> 4) {
        case 0: f = (b & c) | (~b & d); g = i; break;
        case 1: f = (d & b) | (~d & c); g = (5 * i + 1) & 15; break;
        case 2: f = b ^ c ^ d; g = (3 * i + 5) & 15; break;
        default: f = c ^ (b | ~d); g = (7 * i) & 15; break;
        }
        uint32_t t = d;
        d = c;
        c = b;
        b = b + rotl(a + f + MD5_K[i] + w[g], MD5_R[i >> 4][i & 3]);
        a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
}

static void md5(const uint8_t *msg, size_t len, uint8_t out[16])
{
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t full = len & ~(size_t)63;
    for (size_t i = 0; i < full; i += 64)
        md5_block(h, msg + i);
    /* the tail, 0x80, zero padding and the bit length (little-endian) in one or two blocks */
    uint8_t tail[128] = {0};
    size_t rest = len - full;
    memcpy(tail, msg + full, rest);
    tail[rest] = 0x80;
    size_t blocks = rest < 56 ? 1 : 2;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[blocks * 64 - 8 + i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < blocks; i++)
        md5_block(h, tail + 64 * i);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            out[4 * i + k] = (uint8_t)(h[i] >> (8 * k));
}

/* --------------------------------------------------------------------- Arrow column access */

typedef struct {
    Py_buffer valid, offsets, data; /* valid.buf == NULL: no validity bitmap (no nulls) */
    Py_ssize_t offset;              /* the array's offset, added to every row index */
} BinaryColumn;

static void release_column(BinaryColumn *c)
{
    if (c->valid.obj) PyBuffer_Release(&c->valid);
    if (c->offsets.obj) PyBuffer_Release(&c->offsets);
    if (c->data.obj) PyBuffer_Release(&c->data);
}

static int get_column(PyObject *spec, const char *name, BinaryColumn *c)
{
    PyObject *valid;
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(spec, "Oy*y*n", &valid, &c->offsets, &c->data, &c->offset)) {
        PyErr_Format(PyExc_TypeError, "%s: expected (validity|None, offsets, data, array offset)", name);
        return -1;
    }
    if (valid != Py_None && PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE) < 0) {
        release_column(c);
        return -1;
    }
    if (c->offset < 0 || c->offset > INT32_MAX) { /* Arrow arrays here have int32 offsets */
        PyErr_Format(PyExc_ValueError, "%s: array offset %zd out of range", name, c->offset);
        release_column(c);
        return -1;
    }
    return 0;
}

/* Value `row` of column `c`: *size = -1 for null. 0, or -1 with *why set on bad buffers. */
static int column_value(const BinaryColumn *c, Py_ssize_t row, const uint8_t **data, Py_ssize_t *size,
                        const char **why)
{
    Py_ssize_t j = c->offset + row;
    if (j < 0 || j > PY_SSIZE_T_MAX / 8 - 1) {
        *why = "row index out of range";
        return -1;
    }
    if (c->valid.buf) {
        if ((j >> 3) >= c->valid.len) {
            *why = "validity bitmap too short";
            return -1;
        }
        if (!(((const uint8_t *)c->valid.buf)[j >> 3] & (1u << (j & 7)))) {
            *size = -1;
            return 0;
        }
    }
    if ((j + 2) * (Py_ssize_t)sizeof(int32_t) > c->offsets.len) {
        *why = "offsets buffer too short";
        return -1;
    }
    int32_t o0, o1;
    memcpy(&o0, (const char *)c->offsets.buf + 4 * j, 4);
    memcpy(&o1, (const char *)c->offsets.buf + 4 * (j + 1), 4);
    if (o0 < 0 || o1 < o0 || o1 > c->data.len) {
        *why = "value offsets outside the data buffer";
        return -1;
    }
    *data = (const uint8_t *)c->data.buf + o0;
    *size = o1 - o0;
    return 0;
}

static PyObject *md5_digests(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *spec;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "On", &spec, &rows))
        return NULL;
    if (rows < 0 || rows > PY_SSIZE_T_MAX / 16)
        return PyErr_Format(PyExc_ValueError, "bad row count %zd", rows);
    BinaryColumn c;
    if (get_column(spec, "keys", &c) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, rows * 16);
    if (!out) {
        release_column(&c);
        return NULL;
    }
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    const char *why = NULL;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        const uint8_t *data = NULL;
        Py_ssize_t size;
        if (column_value(&c, i, &data, &size, &why) < 0) {
            bad = i;
            break;
        }
        if (size < 0)
            memset(dst + 16 * i, 0, 16);
        else
            md5(data, (size_t)size, dst + 16 * i);
    }
    Py_END_ALLOW_THREADS
    release_column(&c);
    if (bad >= 0) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_ValueError, "keys row %zd: %s", bad, why);
    }
    return out;
}

/* ------------------------------------------------------------------------- record encoding */

/* batch.py's encode_varint: zig-zag of the exact value, truncated to 64 bits. The deltas are
 * computed in 128 bits so that even hostile timestamps (a delta beyond int64) encode the same
 * bytes as Python's unbounded ints do. */
static inline uint64_t zigzag(i128 v) { return (uint64_t)(((u128)v << 1) ^ (u128)(v >> 63)); }

static inline int varint_size(uint64_t u)
{
    int n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t u)
{
    while (u >= 0x80) {
        *p++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

static inline Py_ssize_t field_size(Py_ssize_t size)
{
    return size < 0 ? varint_size(zigzag(-1)) : varint_size(zigzag(size)) + size;
}

static inline uint8_t *put_field(uint8_t *p, const uint8_t *data, Py_ssize_t size)
{
    if (size < 0)
        return put_varint(p, zigzag(-1));
    p = put_varint(p, zigzag(size));
    memcpy(p, data, (size_t)size);
    return p + size;
}

typedef struct {
    Py_ssize_t rows;
    Py_buffer offset, timestamp, header_offsets;
    Py_ssize_t header_list_offset;
    BinaryColumn key, value, hkey, hvalue;
} Columns;

typedef struct {
    const uint8_t *key, *value;
    Py_ssize_t key_size, value_size, first_header, header_count, body;
    int64_t offset, timestamp;
} Row;

/* Everything about one row that encoding needs, checked; body = bytes after the length varint. */
static int read_row(const Columns *c, Py_ssize_t row, int64_t base_offset, int64_t base_timestamp, Row *r,
                    const char **why)
{
    if (row < 0 || row >= c->rows || row >= c->offset.len / 8 || row >= c->timestamp.len / 8) {
        *why = "row index outside the columns";
        return -1;
    }
    memcpy(&r->offset, (const char *)c->offset.buf + 8 * row, 8);
    memcpy(&r->timestamp, (const char *)c->timestamp.buf + 8 * row, 8);
    if (column_value(&c->key, row, &r->key, &r->key_size, why) < 0 ||
        column_value(&c->value, row, &r->value, &r->value_size, why) < 0)
        return -1;
    Py_ssize_t j = c->header_list_offset + row; /* both bounded: no overflow */
    if (c->header_list_offset < 0 || c->header_list_offset > INT32_MAX || j > c->header_offsets.len / 4 - 2) {
        *why = "header list offsets buffer too short";
        return -1;
    }
    int32_t h0, h1;
    memcpy(&h0, (const char *)c->header_offsets.buf + 4 * j, 4);
    memcpy(&h1, (const char *)c->header_offsets.buf + 4 * (j + 1), 4);
    if (h0 < 0 || h1 < h0) {
        *why = "bad header list offsets";
        return -1;
    }
    r->first_header = h0;
    r->header_count = h1 - h0;
    Py_ssize_t body = 1 + varint_size(zigzag((i128)r->timestamp - base_timestamp)) +
                      varint_size(zigzag((i128)r->offset - base_offset)) + field_size(r->key_size) +
                      field_size(r->value_size) + varint_size(zigzag(r->header_count));
    for (Py_ssize_t h = h0; h < h1; h++) {
        const uint8_t *data;
        Py_ssize_t hkey, hvalue;
        if (column_value(&c->hkey, h, &data, &hkey, why) < 0 || column_value(&c->hvalue, h, &data, &hvalue, why) < 0)
            return -1;
        if (hkey < 0) {
            *why = "null header key";
            return -1;
        }
        body += field_size(hkey) + field_size(hvalue);
    }
    r->body = body;
    return 0;
}

static uint8_t *write_row(const Columns *c, const Row *r, int64_t base_offset, int64_t base_timestamp, uint8_t *p)
{
    const char *why; /* read_row already validated every access */
    p = put_varint(p, zigzag(r->body));
    *p++ = 0; /* record attributes */
    p = put_varint(p, zigzag((i128)r->timestamp - base_timestamp));
    p = put_varint(p, zigzag((i128)r->offset - base_offset));
    p = put_field(p, r->key, r->key_size);
    p = put_field(p, r->value, r->value_size);
    p = put_varint(p, zigzag(r->header_count));
    for (Py_ssize_t h = r->first_header; h < r->first_header + r->header_count; h++) {
        const uint8_t *data = NULL;
        Py_ssize_t size;
        column_value(&c->hkey, h, &data, &size, &why);
        p = put_field(p, data, size);
        column_value(&c->hvalue, h, &data, &size, &why);
        p = put_field(p, data, size);
    }
    return p;
}

static void release_columns(Columns *c)
{
    if (c->offset.obj) PyBuffer_Release(&c->offset);
    if (c->timestamp.obj) PyBuffer_Release(&c->timestamp);
    if (c->header_offsets.obj) PyBuffer_Release(&c->header_offsets);
    release_column(&c->key);
    release_column(&c->value);
    release_column(&c->hkey);
    release_column(&c->hvalue);
}

static int get_columns(PyObject *spec, Columns *c)
{
    PyObject *key, *value, *headers, *hkey, *hvalue;
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(spec, "ny*y*OOOOO", &c->rows, &c->offset, &c->timestamp, &key, &value, &headers, &hkey,
                          &hvalue))
        return -1;
    if (!PyArg_ParseTuple(headers, "y*n", &c->header_offsets, &c->header_list_offset) ||
        get_column(key, "key", &c->key) < 0 || get_column(value, "value", &c->value) < 0 ||
        get_column(hkey, "header key", &c->hkey) < 0 || get_column(hvalue, "header value", &c->hvalue) < 0) {
        release_columns(c);
        return -1;
    }
    return 0;
}

/* A read-only int64 vector argument of `n` entries. */
static const int64_t *int64s(const Py_buffer *b, Py_ssize_t n, const char *name)
{
    if (b->len != n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd int64 values", name, n);
        return NULL;
    }
    return (const int64_t *)b->buf;
}

static PyObject *encode_batches(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *spec, *result = NULL;
    Py_buffer rows_b, starts_b, bases_b, stamps_b;
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*", &spec, &rows_b, &starts_b, &bases_b, &stamps_b))
        return NULL;
    Columns c;
    Row *meta = NULL;
    int have_columns = get_columns(spec, &c) == 0;
    const Py_ssize_t nbatches = bases_b.len / (Py_ssize_t)sizeof(int64_t);
    const Py_ssize_t nrows = rows_b.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *rows = NULL, *starts = NULL, *bases = NULL, *stamps = NULL;
    if (!have_columns || !(rows = int64s(&rows_b, nrows, "rows")) ||
        !(starts = int64s(&starts_b, nbatches + 1, "starts")) || !(bases = int64s(&bases_b, nbatches, "base_offsets")) ||
        !(stamps = int64s(&stamps_b, nbatches, "base_timestamps")))
        goto done;
    for (Py_ssize_t b = 0; b < nbatches; b++)
        if (starts[b] < 0 || starts[b] > starts[b + 1] || starts[b + 1] > nrows) {
            PyErr_Format(PyExc_ValueError, "batch %zd: rows [%lld, %lld) outside the %zd rows given", b,
                         (long long)starts[b], (long long)starts[b + 1], nrows);
            goto done;
        }
    meta = PyMem_Malloc(sizeof(Row) * (size_t)(nrows ? nrows : 1));
    if (!meta) {
        PyErr_NoMemory();
        goto done;
    }
    /* pass 1: validate and size every row (no GIL needed) */
    const char *why = NULL;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < nbatches && bad < 0; b++)
        for (int64_t i = starts[b]; i < starts[b + 1]; i++)
            if (read_row(&c, (Py_ssize_t)rows[i], bases[b], stamps[b], &meta[i], &why) < 0) {
                bad = (Py_ssize_t)i;
                break;
            }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "row %lld: %s", (long long)rows[bad], why);
        goto done;
    }
    result = PyList_New(nbatches);
    for (Py_ssize_t b = 0; result && b < nbatches; b++) {
        Py_ssize_t size = 0;
        for (int64_t i = starts[b]; i < starts[b + 1]; i++) {
            Py_ssize_t record = varint_size(zigzag(meta[i].body)) + meta[i].body;
            if (record > PY_SSIZE_T_MAX - size) { /* rows may repeat: sizes can add up past any buffer */
                PyErr_Format(PyExc_OverflowError, "batch %zd: records section too large", b);
                Py_CLEAR(result);
                goto done;
            }
            size += record;
        }
        PyObject *section = PyBytes_FromStringAndSize(NULL, size);
        if (!section) {
            Py_CLEAR(result);
            break;
        }
        PyList_SET_ITEM(result, b, section);
    }
    if (!result)
        goto done;
    /* pass 2: write, into the sections sized above */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < nbatches; b++) {
        uint8_t *p = (uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(result, b));
        for (int64_t i = starts[b]; i < starts[b + 1]; i++)
            p = write_row(&c, &meta[i], bases[b], stamps[b], p);
    }
    Py_END_ALLOW_THREADS

done:
    PyMem_Free(meta);
    if (have_columns)
        release_columns(&c);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&starts_b);
    PyBuffer_Release(&bases_b);
    PyBuffer_Release(&stamps_b);
    return result;
}

static PyMethodDef methods[] = {
    {"md5_digests", md5_digests, METH_VARARGS,
     "md5_digests((validity|None, offsets, data, array_offset), rows) -> bytes\n\n"
     "MD5 of each value of an Arrow binary column, 16 bytes per row (zeros for a null)."},
    {"encode_batches", encode_batches, METH_VARARGS,
     "encode_batches(columns, rows, starts, base_offsets, base_timestamps) -> list[bytes]\n\n"
     "Uncompressed v2 records sections, one per batch, of the selected rows of decoded columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_compact", .m_doc = "Native kernels of the log cleaner.", .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__compact(void) { return PyModule_Create(&module); }
