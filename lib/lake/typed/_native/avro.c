/* Columnar decoder of Avro binary datums (the native kernel behind lake/typed/avro.py).
 *
 * Python compiles a writer schema into a program (a flat int32 array of nodes, avro.py's
 * `compile_program`); then ONE call decodes every value of a column that was written with that
 * schema straight into Arrow buffers, one set per node (no per-record Python object):
 *
 *     decode(program: buffer of int32, data: buffer, offsets: buffer of int32[n + 1], skip: int)
 *         -> (ok: bytes[n], failures: list[(row, reason)], nodes: list[(valid, data, offsets)])
 *
 * Value i is data[offsets[i] + skip : offsets[i + 1]] (skip: the wire-format prefix). A value
 * that is not one datum of the schema, exactly (truncated, an out-of-range union branch or enum
 * symbol, bad UTF-8, bytes left over...), is rolled back and reported: ok[i] = 0 and a failure
 * naming the row and the reason; the node buffers then hold the rows that decoded, in order.
 *
 * Program: [n_nodes, then per node: type, param, n_children, child...]; node 0 is the root.
 * Every node gets exactly one slot per slot of its parent: `valid` holds one byte per slot,
 * `data` the fixed-width values (or string bytes), `offsets` int32 slot boundaries for
 * strings, bytes, arrays and maps (starting with 0). A null union branch fills the other
 * branches with null slots, so children stay aligned with their parents.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    T_NULL, T_BOOLEAN, T_INT, T_LONG, T_FLOAT, T_DOUBLE, T_BYTES, T_STRING, T_FIXED, T_ENUM, T_RECORD,
    T_ARRAY, T_MAP, T_UNION, T_DECIMAL_BYTES, T_DECIMAL_FIXED, N_TYPES
};

#define MAX_NODES 4096
#define MAX_CHILDREN 4096
#define MAX_DEPTH 64
#define MAX_EMPTY_ITEMS (1 << 24) /* items that take no bytes (null): a bound on absurd counts */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

typedef struct Node {
    int type, param, n_children;
    struct Node **children;
    Buf valid, data, offsets;
    Py_ssize_t saved[3];
} Node;

typedef struct {
    Node *nodes;
    int n_nodes;
    Node **child_slots;
    int oom;
} Program;

/* ------------------------------------------------------------------------------------------ */

static int buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p)
        return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n))
        return -1;
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_zero(Buf *b, Py_ssize_t n)
{
    if (buf_reserve(b, n))
        return -1;
    memset(b->p + b->len, 0, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_byte(Buf *b, uint8_t v) { return buf_put(b, &v, 1); }

static inline int32_t buf_end32(const Buf *b) { return ((const int32_t *)b->p)[b->len / 4 - 1]; }

static inline int buf_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }

/* The number of slots a node has filled (its valid bytes). */
static inline Py_ssize_t slots(const Node *n) { return n->valid.len; }

/* ------------------------------------------------------------------------------------------ */

static const char OOM[] = "out of memory";

/* Avro's zig-zag varint long. */
static inline const char *read_long(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t u = 0;
    for (int shift = 0;; shift += 7) {
        if (p >= end)
            return "truncated: a varint runs past the end of the value";
        if (shift > 63)
            return "a varint longer than 10 bytes";
        uint8_t b = *p++;
        u |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
    }
    *pp = p;
    *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return NULL;
}

static int valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) { /* fast path: eight ASCII bytes at a time */
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return 0;
        if (i + len > n)
            return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

/* A null slot for a node and, for records and unions, all their children. */
static int append_null(Node *n)
{
    if (buf_byte(&n->valid, 0))
        return -1;
    switch (n->type) {
    case T_NULL:
        return 0;
    case T_BOOLEAN:
        return buf_zero(&n->data, 1);
    case T_INT: case T_FLOAT: case T_ENUM:
        return buf_zero(&n->data, 4);
    case T_LONG: case T_DOUBLE:
        return buf_zero(&n->data, 8);
    case T_FIXED:
        return buf_zero(&n->data, n->param);
    case T_DECIMAL_BYTES: case T_DECIMAL_FIXED:
        return buf_zero(&n->data, 16);
    case T_BYTES: case T_STRING: case T_ARRAY: case T_MAP:
        return buf_i32(&n->offsets, buf_end32(&n->offsets));
    case T_UNION:
        if (buf_zero(&n->data, 1))
            return -1;
        /* fall through: every branch gets its null slot */
    case T_RECORD:
        for (int i = 0; i < n->n_children; i++)
            if (append_null(n->children[i]))
                return -1;
        return 0;
    }
    return 0;
}

/* Big-endian two's complement of up to 16 bytes -> little-endian int128. */
static const char *put_decimal(Node *n, const uint8_t *src, Py_ssize_t len)
{
    if (len > 16)
        return "a decimal wider than 128 bits";
    uint8_t out[16];
    uint8_t fill = (len > 0 && (src[0] & 0x80)) ? 0xFF : 0x00;
    memset(out, fill, 16);
    for (Py_ssize_t i = 0; i < len; i++)
        out[i] = src[len - 1 - i];
    return buf_put(&n->data, out, 16) ? OOM : NULL;
}

static const char *decode_node(Node *n, const uint8_t **pp, const uint8_t *end, int depth);

/* The blocks of an array or map: count, (if negative: -count items and a byte size), ..., 0. */
static const char *decode_blocks(Node *n, const uint8_t **pp, const uint8_t *end, int depth)
{
    Node *item = n->type == T_MAP ? n->children[1] : n->children[0];
    Node *key = n->type == T_MAP ? n->children[0] : NULL;
    Py_ssize_t items = 0;
    for (;;) {
        int64_t count;
        const char *err = read_long(pp, end, &count);
        if (err)
            return err;
        if (count == 0)
            break;
        if (count < 0) {
            if (count == INT64_MIN)
                return "an absurd block count";
            count = -count;
            int64_t size;
            if ((err = read_long(pp, end, &size)))
                return err;
        }
        int empty_items = key == NULL && item->type == T_NULL;
        if ((!empty_items && count > end - *pp) || (empty_items && count > MAX_EMPTY_ITEMS))
            return "truncated: a block counts more items than bytes are left";
        items += count;
        if (items > INT32_MAX)
            return "too many items";
        for (int64_t i = 0; i < count; i++) {
            if (key && (err = decode_node(key, pp, end, depth + 1)))
                return err;
            if ((err = decode_node(item, pp, end, depth + 1)))
                return err;
        }
    }
    if (slots(item) > INT32_MAX)
        return "a column holds more than 2**31 items";
    if (buf_byte(&n->valid, 1) || buf_i32(&n->offsets, (int32_t)slots(item)))
        return OOM;
    return NULL;
}

static const char *decode_node(Node *n, const uint8_t **pp, const uint8_t *end, int depth)
{
    const uint8_t *p = *pp;
    const char *err;
    int64_t v;
    if (depth > MAX_DEPTH)
        return "values nest too deeply";
    switch (n->type) {
    case T_NULL:
        return buf_byte(&n->valid, 0) ? OOM : NULL;
    case T_BOOLEAN:
        if (p >= end)
            return "truncated: a boolean past the end of the value";
        if (*p > 1)
            return "a boolean that is neither 0 nor 1";
        if (buf_byte(&n->valid, 1) || buf_byte(&n->data, *p))
            return OOM;
        *pp = p + 1;
        return NULL;
    case T_INT: case T_ENUM: {
        if ((err = read_long(pp, end, &v)))
            return err;
        if (v < INT32_MIN || v > INT32_MAX)
            return "an int out of the 32-bit range";
        if (n->type == T_ENUM && (v < 0 || v >= n->param))
            return "an enum symbol index out of range";
        int32_t i = (int32_t)v;
        return (buf_byte(&n->valid, 1) || buf_put(&n->data, &i, 4)) ? OOM : NULL;
    }
    case T_LONG:
        if ((err = read_long(pp, end, &v)))
            return err;
        return (buf_byte(&n->valid, 1) || buf_put(&n->data, &v, 8)) ? OOM : NULL;
    case T_FLOAT: case T_DOUBLE: case T_FIXED: case T_DECIMAL_FIXED: {
        Py_ssize_t size = n->type == T_FLOAT ? 4 : n->type == T_DOUBLE ? 8 : n->param;
        if (end - p < size)
            return "truncated: a fixed-size value past the end of the value";
        *pp = p + size;
        if (buf_byte(&n->valid, 1))
            return OOM;
        if (n->type == T_DECIMAL_FIXED)
            return put_decimal(n, p, size);
        return buf_put(&n->data, p, size) ? OOM : NULL;
    }
    case T_BYTES: case T_STRING: case T_DECIMAL_BYTES: {
        if ((err = read_long(pp, end, &v)))
            return err;
        p = *pp;
        if (v < 0)
            return "a negative length";
        if (v > end - p)
            return "truncated: bytes or a string past the end of the value";
        *pp = p + v;
        if (n->type == T_DECIMAL_BYTES)
            return buf_byte(&n->valid, 1) ? OOM : put_decimal(n, p, (Py_ssize_t)v);
        if (n->type == T_STRING && !valid_utf8(p, (Py_ssize_t)v))
            return "a string that is not UTF-8";
        if (n->data.len + v > INT32_MAX)
            return "a column holds more than 2 GiB of strings";
        if (buf_byte(&n->valid, 1) || buf_put(&n->data, p, (Py_ssize_t)v) || buf_i32(&n->offsets, (int32_t)n->data.len))
            return OOM;
        return NULL;
    }
    case T_RECORD:
        if (buf_byte(&n->valid, 1))
            return OOM;
        for (int i = 0; i < n->n_children; i++)
            if ((err = decode_node(n->children[i], pp, end, depth + 1)))
                return err;
        return NULL;
    case T_ARRAY: case T_MAP:
        return decode_blocks(n, pp, end, depth);
    case T_UNION: {
        if ((err = read_long(pp, end, &v)))
            return err;
        if (v < 0 || v >= n->n_children)
            return "a union branch index out of range";
        Node *branch = n->children[v];
        if (buf_byte(&n->valid, branch->type != T_NULL) || buf_byte(&n->data, (uint8_t)v))
            return OOM;
        for (int i = 0; i < n->n_children; i++) {
            if (i == v)
                err = decode_node(branch, pp, end, depth + 1);
            else
                err = append_null(n->children[i]) ? OOM : NULL;
            if (err)
                return err;
        }
        return NULL;
    }
    }
    return "unknown node type";
}

/* ------------------------------------------------------------------------------------------ */

static void free_program(Program *prog)
{
    if (prog->nodes) {
        for (int i = 0; i < prog->n_nodes; i++) {
            free(prog->nodes[i].valid.p);
            free(prog->nodes[i].data.p);
            free(prog->nodes[i].offsets.p);
        }
    }
    free(prog->nodes);
    free(prog->child_slots);
}

static int load_program(Program *prog, const int32_t *code, Py_ssize_t words)
{
    memset(prog, 0, sizeof *prog);
    if (words < 1 || code[0] < 1 || code[0] > MAX_NODES)
        goto bad;
    prog->n_nodes = code[0];
    prog->nodes = calloc((size_t)prog->n_nodes, sizeof(Node));
    prog->child_slots = calloc((size_t)words, sizeof(Node *));
    if (!prog->nodes || !prog->child_slots) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t at = 1, slot = 0;
    for (int i = 0; i < prog->n_nodes; i++) {
        if (at + 3 > words)
            goto bad;
        Node *n = &prog->nodes[i];
        n->type = code[at];
        n->param = code[at + 1];
        n->n_children = code[at + 2];
        at += 3;
        if (n->type < 0 || n->type >= N_TYPES || n->n_children < 0 || n->n_children > MAX_CHILDREN ||
            at + n->n_children > words || n->param < 0)
            goto bad;
        n->children = &prog->child_slots[slot];
        for (int c = 0; c < n->n_children; c++) {
            int32_t child = code[at + c];
            if (child <= i || child >= prog->n_nodes) /* children come after their parent: no cycles */
                goto bad;
            n->children[c] = &prog->nodes[child];
        }
        slot += n->n_children;
        at += n->n_children;
        int want = n->type == T_ARRAY ? 1 : n->type == T_MAP ? 2 : -1;
        if (want >= 0 && n->n_children != want)
            goto bad;
        if (n->type == T_BYTES || n->type == T_STRING || n->type == T_ARRAY || n->type == T_MAP)
            if (buf_i32(&n->offsets, 0)) {
                PyErr_NoMemory();
                return -1;
            }
    }
    for (int i = 0; i < prog->n_nodes; i++) /* children are loaded now: a map's key is a string */
        if (prog->nodes[i].type == T_MAP && prog->nodes[i].children[0]->type != T_STRING)
            goto bad;
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "malformed Avro decoding program");
    return -1;
}

static PyObject *as_bytes(const Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len); }

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer code, data, offs;
    Py_ssize_t skip;
    if (!PyArg_ParseTuple(args, "y*y*y*n", &code, &data, &offs, &skip))
        return NULL;
    PyObject *result = NULL, *failures = NULL, *ok = NULL, *nodes = NULL;
    Program prog;
    memset(&prog, 0, sizeof prog);
    Py_ssize_t n = offs.len / 4 - 1;
    if (offs.len % 4 || n < 0 || code.len % 4 || skip < 0) {
        PyErr_SetString(PyExc_ValueError, "bad buffer sizes");
        goto done;
    }
    if (load_program(&prog, (const int32_t *)code.buf, code.len / 4))
        goto done;
    const int32_t *o = (const int32_t *)offs.buf;
    const uint8_t *base = (const uint8_t *)data.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (o[i] < 0 || o[i] > o[i + 1] || o[i + 1] > data.len) {
            PyErr_SetString(PyExc_ValueError, "offsets outside the data buffer");
            goto done;
        }
    ok = PyBytes_FromStringAndSize(NULL, n);
    failures = PyList_New(0);
    if (!ok || !failures)
        goto done;
    char *okp = PyBytes_AS_STRING(ok);
    Node *root = &prog.nodes[0];
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int k = 0; k < prog.n_nodes; k++) {
            Node *m = &prog.nodes[k];
            m->saved[0] = m->valid.len;
            m->saved[1] = m->data.len;
            m->saved[2] = m->offsets.len;
        }
        const uint8_t *p = base + o[i] + skip, *end = base + o[i + 1];
        const char *err = p > end ? "truncated: shorter than the wire-format prefix" : NULL;
        char message[120];
        if (!err)
            err = decode_node(root, &p, end, 0);
        if (!err && p != end) {
            snprintf(message, sizeof message, "%zd bytes left over after the datum", (Py_ssize_t)(end - p));
            err = message;
        }
        okp[i] = err == NULL;
        if (err) {
            if (err == OOM) {
                PyErr_NoMemory();
                goto done;
            }
            for (int k = 0; k < prog.n_nodes; k++) {
                Node *m = &prog.nodes[k];
                m->valid.len = m->saved[0];
                m->data.len = m->saved[1];
                m->offsets.len = m->saved[2];
            }
            PyObject *f = Py_BuildValue("(ns)", i, err);
            if (!f || PyList_Append(failures, f)) {
                Py_XDECREF(f);
                goto done;
            }
            Py_DECREF(f);
        }
    }
    nodes = PyList_New(prog.n_nodes);
    if (!nodes)
        goto done;
    for (int k = 0; k < prog.n_nodes; k++) {
        Node *m = &prog.nodes[k];
        PyObject *t = Py_BuildValue("(NNN)", as_bytes(&m->valid), as_bytes(&m->data), as_bytes(&m->offsets));
        if (!t)
            goto done;
        PyList_SET_ITEM(nodes, k, t);
    }
    result = Py_BuildValue("(OOO)", ok, failures, nodes);
done:
    Py_XDECREF(ok);
    Py_XDECREF(failures);
    Py_XDECREF(nodes);
    free_program(&prog);
    PyBuffer_Release(&code);
    PyBuffer_Release(&data);
    PyBuffer_Release(&offs);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Decode Avro datums into Arrow buffers (see the module comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_avro", .m_doc = "Columnar decoder of Avro binary datums.",
    .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__avro(void) { return PyModule_Create(&module); }
