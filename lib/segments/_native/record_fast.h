/* The fast path of decode.c's record parser, included by decode.c after the definitions it uses
 * (Columns, put_field, valid_utf8, the meta and buffer indexes): the usual well-formed record,
 * decoded with 64-bit varints and no error text. Anything unusual is handed back (NULL) to the
 * exact path in decode.c, which then gives the verdict; so both always agree. */
#ifndef TOPICLAKE_RECORD_FAST_H
#define TOPICLAKE_RECORD_FAST_H

#define LIKELY(x) __builtin_expect(!!(x), 1)

/* The fast twin of read_varint: a varint of at most 9 bytes (63 bits: every value that fits in
 * int64 after zig-zag). 0 on anything else (past `end`, 10 bytes): the caller then decodes the
 * record again with the exact path, which gives the verdict. */
static inline int read_varint_fast(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    if (LIKELY(end - p >= 2)) { /* the common one- and two-byte varints, unrolled */
        if (!(p[0] & 0x80)) {
            *pp = p + 1;
            *out = (int64_t)(p[0] >> 1) ^ -(int64_t)(p[0] & 1);
            return 1;
        }
        if (!(p[1] & 0x80)) {
            uint64_t u = (uint64_t)(p[0] & 0x7F) | (uint64_t)p[1] << 7;
            *pp = p + 2;
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 1;
        }
    }
    uint64_t u = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (p >= end)
            return 0;
        uint8_t b = *p++;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 1;
        }
    }
    return 0;
}

/* The fast twin of read_field; 0 where the exact path must judge. */
static inline int read_field_fast(const uint8_t **pp, const uint8_t *end, const uint8_t **data, int64_t *size)
{
    if (!read_varint_fast(pp, end, size))
        return 0;
    if (*size < 0) {
        *size = -1;
        return 1;
    }
    if (*size > end - *pp)
        return 0;
    *data = *pp;
    *pp += *size;
    return 1;
}

/* UTF-8 check with an ASCII fast path: eight bytes at a time while no high bit is set. */
static inline int valid_utf8_fast(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            return valid_utf8(s + i, n - i);
    }
    for (; i < n; i++)
        if (s[i] & 0x80)
            return valid_utf8(s + i, n - i);
    return 1;
}

/* put_field for the fast path: a field of up to SMALL_FIELD bytes is copied as one fixed-size
 * block (two vector moves, no call into libc), which may read past the field within the section
 * (`end`) and write past it into the data buffer's slack (DATA_SLACK, decode.c). */
#define SMALL_FIELD 32
static inline void put_field_fast(char *valid, char *offsets, char *data, Py_ssize_t row, Py_ssize_t *used,
                                  Py_ssize_t *nulls, const uint8_t *src, int64_t size, const uint8_t *end)
{
    if (size >= 0 && size <= SMALL_FIELD && end - src >= SMALL_FIELD) {
        set_bit(valid, row, 1);
        memcpy(data + *used, src, SMALL_FIELD);
        *used += size;
        ((int32_t *)offsets)[row + 1] = (int32_t)*used;
    } else {
        put_field(valid, offsets, data, row, used, nulls, src, size);
    }
}

/* Forget the headers appended since the marks (a record dropped or left to the exact path). */
static inline void roll_back_headers(Columns *c, Py_ssize_t headers, Py_ssize_t hkey_bytes, Py_ssize_t hvalue_bytes,
                                     Py_ssize_t hvalue_nulls)
{
    c->headers = headers;
    c->hkey_bytes = hkey_bytes;
    c->hvalue_bytes = hvalue_bytes;
    c->hvalue_nulls = hvalue_nulls;
}

/* One well-formed record at `p` (the usual case), appended like decode_batch's exact loop body
 * would. Returns the record's end, or NULL if anything is unusual (a bound crossed, a 10-byte
 * varint, a 64-bit overflow, a bad header key): then nothing is appended (the header columns are
 * rolled back) and the caller runs the exact path on the same record for the verdict. */
static inline const uint8_t *decode_record_fast(const uint8_t *p, const uint8_t *end, const int64_t *m,
                                                int log_append_time, int64_t lo, int64_t hi, Columns *c)
{
    int64_t length, ts_delta, offset_delta, key_size, value_size, header_count;
    const uint8_t *key = NULL, *value = NULL;
    if (!read_varint_fast(&p, end, &length) || length < MIN_RECORD_BODY || length > end - p)
        return NULL;
    const uint8_t *record_end = p + length;
    p++; /* record attributes: unused */
    if (!read_varint_fast(&p, record_end, &ts_delta) || !read_varint_fast(&p, record_end, &offset_delta) ||
        !read_field_fast(&p, record_end, &key, &key_size) || !read_field_fast(&p, record_end, &value, &value_size) ||
        !read_varint_fast(&p, record_end, &header_count) || header_count < 0)
        return NULL;
    int64_t offset, timestamp = m[M_MAX_TIMESTAMP];
    if (__builtin_add_overflow(m[M_BASE_OFFSET], offset_delta, &offset) ||
        (!log_append_time && __builtin_add_overflow(m[M_BASE_TIMESTAMP], ts_delta, &timestamp)))
        return NULL;
    const Py_ssize_t headers_mark = c->headers, hkey_mark = c->hkey_bytes, hvalue_mark = c->hvalue_bytes,
                     hnull_mark = c->hvalue_nulls;
    for (int64_t h = 0; h < header_count; h++) {
        const uint8_t *hkey = NULL, *hvalue = NULL;
        int64_t hkey_size, hvalue_size;
        if (!read_field_fast(&p, record_end, &hkey, &hkey_size) || hkey_size < 0 ||
            !read_field_fast(&p, record_end, &hvalue, &hvalue_size) || !valid_utf8_fast(hkey, hkey_size))
            goto undo;
        put_field(NULL, c->buf[B_HKEY_OFFSETS], c->buf[B_HKEY_DATA], c->headers, &c->hkey_bytes, NULL, hkey,
                  hkey_size);
        put_field(c->buf[B_HVALUE_VALID], c->buf[B_HVALUE_OFFSETS], c->buf[B_HVALUE_DATA], c->headers,
                  &c->hvalue_bytes, &c->hvalue_nulls, hvalue, hvalue_size);
        c->headers++;
    }
    if (p != record_end)
        goto undo;
    if (offset < lo || offset > hi) { /* a well-formed record the offset filter drops */
        roll_back_headers(c, headers_mark, hkey_mark, hvalue_mark, hnull_mark);
        return record_end;
    }
    const Py_ssize_t row = c->rows;
    /* The value column takes most of the bytes written and its lines are not in cache: asking for
     * them (for writing) ~8 records ahead overlaps their fetch with this work (bench/decode.py:
     * ~12% of the uncompressed decode). A prefetch never faults, past the buffer's end too. */
    __builtin_prefetch(c->buf[B_VALUE_DATA] + c->value_bytes + 1024, 1);
    __builtin_prefetch(c->buf[B_VALUE_DATA] + c->value_bytes + 1024 + 64, 1);
    ((int64_t *)c->buf[B_OFFSET])[row] = offset;
    ((int64_t *)c->buf[B_TIMESTAMP])[row] = timestamp;
    put_field_fast(c->buf[B_KEY_VALID], c->buf[B_KEY_OFFSETS], c->buf[B_KEY_DATA], row, &c->key_bytes,
                   &c->key_nulls, key, key_size, end);
    put_field_fast(c->buf[B_VALUE_VALID], c->buf[B_VALUE_OFFSETS], c->buf[B_VALUE_DATA], row, &c->value_bytes,
                   &c->value_nulls, value, value_size, end);
    ((int32_t *)c->buf[B_HEADER_OFFSETS])[row + 1] = (int32_t)c->headers;
    c->rows++;
    return record_end;
undo:
    roll_back_headers(c, headers_mark, hkey_mark, hvalue_mark, hnull_mark);
    return NULL;
}

#endif
