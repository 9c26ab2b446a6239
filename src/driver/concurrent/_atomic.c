/*
 * AtomicBuffer: typed, bounds-checked access to a writable buffer (usually an
 * mmap shared between processes) with the memory-ordering operations the
 * Aeron layouts need: acquire loads, release stores, fetch-add and CAS.
 *
 * Python has no portable way to do an atomic read-modify-write on shared
 * memory; this module is the only native code the driver needs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    char *base;
    Py_ssize_t capacity;
} AtomicBuffer;

static PyTypeObject AtomicBufferType;

static int
check(AtomicBuffer *self, Py_ssize_t index, Py_ssize_t size, int aligned)
{
    if (!self->has_view) {
        PyErr_SetString(PyExc_ValueError, "AtomicBuffer is released");
        return -1;
    }
    if (index < 0 || size < 0 || index > self->capacity - size) {
        PyErr_Format(PyExc_IndexError,
                     "index %zd (+%zd bytes) out of bounds for capacity %zd",
                     index, size, self->capacity);
        return -1;
    }
    if (aligned && (((uintptr_t)(self->base + index)) & (size - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "index %zd not aligned to %zd for an atomic access",
                     index, size);
        return -1;
    }
    return 0;
}

static int
AtomicBuffer_init(AtomicBuffer *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer", "offset", "length", NULL};
    PyObject *obj;
    Py_ssize_t offset = 0, length = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|nn", kwlist, &obj, &offset, &length))
        return -1;
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
    if (PyObject_GetBuffer(obj, &self->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    self->has_view = 1;
    if (length < 0)
        length = self->view.len - offset;
    if (offset < 0 || length < 0 || offset + length > self->view.len) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
        PyErr_Format(PyExc_ValueError, "offset %zd + length %zd outside buffer of %zd bytes",
                     offset, length, self->view.len);
        return -1;
    }
    self->base = (char *)self->view.buf + offset;
    self->capacity = length;
    return 0;
}

static void
AtomicBuffer_dealloc(AtomicBuffer *self)
{
    if (self->has_view)
        PyBuffer_Release(&self->view);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
AtomicBuffer_release(AtomicBuffer *self, PyObject *unused)
{
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
        self->base = NULL;
        self->capacity = 0;
    }
    Py_RETURN_NONE;
}

static PyObject *
AtomicBuffer_capacity(AtomicBuffer *self, void *closure)
{
    return PyLong_FromSsize_t(self->capacity);
}

#define ARG_INDEX(i) Py_ssize_t index = PyLong_AsSsize_t(args[i]); \
    if (index == -1 && PyErr_Occurred()) return NULL;

static int
nargs_ok(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return 0;
    }
    return 1;
}

/* ---- loads ---- */
#define DEF_GET(NAME, CTYPE, ORDER, ALIGNED, CONV)                                   \
static PyObject *                                                                    \
AtomicBuffer_##NAME(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)     \
{                                                                                    \
    if (!nargs_ok(nargs, 1, #NAME)) return NULL;                                     \
    ARG_INDEX(0)                                                                     \
    if (check(self, index, sizeof(CTYPE), ALIGNED) < 0) return NULL;                 \
    CTYPE v;                                                                         \
    if (ALIGNED) v = __atomic_load_n((CTYPE *)(self->base + index), ORDER);          \
    else memcpy(&v, self->base + index, sizeof(CTYPE));                              \
    return CONV(v);                                                                  \
}

DEF_GET(get_byte, int8_t, __ATOMIC_RELAXED, 0, PyLong_FromLong)
DEF_GET(get_ubyte, uint8_t, __ATOMIC_RELAXED, 0, PyLong_FromLong)
DEF_GET(get_short, int16_t, __ATOMIC_RELAXED, 0, PyLong_FromLong)
DEF_GET(get_ushort, uint16_t, __ATOMIC_RELAXED, 0, PyLong_FromLong)
DEF_GET(get_int, int32_t, __ATOMIC_RELAXED, 0, PyLong_FromLong)
DEF_GET(get_long, int64_t, __ATOMIC_RELAXED, 0, PyLong_FromLongLong)
DEF_GET(get_int_volatile, int32_t, __ATOMIC_ACQUIRE, 1, PyLong_FromLong)
DEF_GET(get_long_volatile, int64_t, __ATOMIC_ACQUIRE, 1, PyLong_FromLongLong)

/* ---- stores ---- */
#define DEF_PUT(NAME, CTYPE, ORDER, ALIGNED, PYCONV)                                 \
static PyObject *                                                                    \
AtomicBuffer_##NAME(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)     \
{                                                                                    \
    if (!nargs_ok(nargs, 2, #NAME)) return NULL;                                     \
    ARG_INDEX(0)                                                                     \
    long long raw = PYCONV(args[1]);                                                 \
    if (raw == -1 && PyErr_Occurred()) return NULL;                                  \
    if (check(self, index, sizeof(CTYPE), ALIGNED) < 0) return NULL;                 \
    CTYPE v = (CTYPE)raw;                                                            \
    if (ALIGNED) __atomic_store_n((CTYPE *)(self->base + index), v, ORDER);          \
    else memcpy(self->base + index, &v, sizeof(CTYPE));                              \
    Py_RETURN_NONE;                                                                  \
}

DEF_PUT(put_byte, int8_t, __ATOMIC_RELAXED, 0, PyLong_AsLongLong)
DEF_PUT(put_short, int16_t, __ATOMIC_RELAXED, 0, PyLong_AsLongLong)
DEF_PUT(put_int, int32_t, __ATOMIC_RELAXED, 0, PyLong_AsLongLong)
DEF_PUT(put_long, int64_t, __ATOMIC_RELAXED, 0, PyLong_AsLongLong)
DEF_PUT(put_int_ordered, int32_t, __ATOMIC_RELEASE, 1, PyLong_AsLongLong)
DEF_PUT(put_long_ordered, int64_t, __ATOMIC_RELEASE, 1, PyLong_AsLongLong)
DEF_PUT(put_int_volatile, int32_t, __ATOMIC_SEQ_CST, 1, PyLong_AsLongLong)
DEF_PUT(put_long_volatile, int64_t, __ATOMIC_SEQ_CST, 1, PyLong_AsLongLong)

/* ---- read-modify-write ---- */
#define DEF_ADD(NAME, CTYPE, CONV)                                                   \
static PyObject *                                                                    \
AtomicBuffer_##NAME(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)     \
{                                                                                    \
    if (!nargs_ok(nargs, 2, #NAME)) return NULL;                                     \
    ARG_INDEX(0)                                                                     \
    long long delta = PyLong_AsLongLong(args[1]);                                    \
    if (delta == -1 && PyErr_Occurred()) return NULL;                                \
    if (check(self, index, sizeof(CTYPE), 1) < 0) return NULL;                      \
    CTYPE old = __atomic_fetch_add((CTYPE *)(self->base + index), (CTYPE)delta,      \
                                   __ATOMIC_SEQ_CST);                                \
    return CONV(old);                                                                \
}
DEF_ADD(get_and_add_int, int32_t, PyLong_FromLong)
DEF_ADD(get_and_add_long, int64_t, PyLong_FromLongLong)

#define DEF_CAS(NAME, CTYPE)                                                         \
static PyObject *                                                                    \
AtomicBuffer_##NAME(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)     \
{                                                                                    \
    if (!nargs_ok(nargs, 3, #NAME)) return NULL;                                     \
    ARG_INDEX(0)                                                                     \
    long long expected = PyLong_AsLongLong(args[1]);                                 \
    if (expected == -1 && PyErr_Occurred()) return NULL;                             \
    long long update = PyLong_AsLongLong(args[2]);                                   \
    if (update == -1 && PyErr_Occurred()) return NULL;                               \
    if (check(self, index, sizeof(CTYPE), 1) < 0) return NULL;                      \
    CTYPE exp = (CTYPE)expected;                                                     \
    int ok = __atomic_compare_exchange_n((CTYPE *)(self->base + index), &exp,        \
                 (CTYPE)update, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
    return PyBool_FromLong(ok);                                                      \
}
DEF_CAS(compare_and_set_int, int32_t)
DEF_CAS(compare_and_set_long, int64_t)

/* ---- bulk ---- */
static PyObject *
AtomicBuffer_put_bytes(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* put_bytes(index, src[, src_offset[, length]]) */
    if (nargs < 2 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "put_bytes(index, src, src_offset=0, length=-1)");
        return NULL;
    }
    ARG_INDEX(0)
    Py_ssize_t src_offset = 0, length = -1;
    if (nargs > 2) { src_offset = PyLong_AsSsize_t(args[2]); if (src_offset == -1 && PyErr_Occurred()) return NULL; }
    if (nargs > 3) { length = PyLong_AsSsize_t(args[3]); if (length == -1 && PyErr_Occurred()) return NULL; }
    Py_buffer src;
    if (PyObject_GetBuffer(args[1], &src, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (length < 0) length = src.len - src_offset;
    if (src_offset < 0 || length < 0 || src_offset + length > src.len) {
        PyBuffer_Release(&src);
        PyErr_Format(PyExc_IndexError, "source range %zd+%zd outside %zd bytes", src_offset, length, src.len);
        return NULL;
    }
    if (check(self, index, length, 0) < 0) { PyBuffer_Release(&src); return NULL; }
    memmove(self->base + index, (char *)src.buf + src_offset, length);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

static PyObject *
AtomicBuffer_get_bytes(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 2, "get_bytes")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t length = PyLong_AsSsize_t(args[1]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (check(self, index, length, 0) < 0) return NULL;
    return PyBytes_FromStringAndSize(self->base + index, length);
}

static PyObject *
AtomicBuffer_set_memory(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 3, "set_memory")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t length = PyLong_AsSsize_t(args[1]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    long value = PyLong_AsLong(args[2]);
    if (value == -1 && PyErr_Occurred()) return NULL;
    if (check(self, index, length, 0) < 0) return NULL;
    memset(self->base + index, (int)(value & 0xFF), length);
    Py_RETURN_NONE;
}

static PyObject *
AtomicBuffer_view(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* A writable memoryview over [index, index+length) that shares memory. */
    if (!nargs_ok(nargs, 2, "view")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t length = PyLong_AsSsize_t(args[1]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    if (check(self, index, length, 0) < 0) return NULL;
    return PyMemoryView_FromMemory(self->base + index, length, PyBUF_WRITE);
}


/* ---- data frames ----
 * Aeron's write order for one frame: word 0 (version/flags/type | -length) with a
 * release store, a store fence, header words 1 and 2, the payload, and finally the
 * release store of the positive length that hands the frame to readers. vft is the
 * high 32 bits of word 0 already shifted; session_word = session_id << 32;
 * stream_word = stream_id | term_id << 32.
 */
static inline void
write_frame(char *base, Py_ssize_t off, int64_t vft, int64_t session_word, int64_t stream_word,
            const char *src, Py_ssize_t length)
{
    int32_t frame_length = (int32_t)(length + 32);
    __atomic_store_n((int64_t *)(base + off),
                     (int64_t)(((uint64_t)vft & 0xFFFFFFFF00000000ULL) | (uint32_t)(-frame_length)),
                     __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    int64_t w1 = session_word | (int64_t)(uint32_t)off;
    memcpy(base + off + 8, &w1, 8);
    memcpy(base + off + 16, &stream_word, 8);
    if (length)
        memcpy(base + off + 32, src, length);
    __atomic_store_n((int32_t *)(base + off), frame_length, __ATOMIC_RELEASE);
}

static int
frame_args(PyObject *const *args, int64_t *vft, int64_t *session_word, int64_t *stream_word)
{
    long long v;
    v = PyLong_AsLongLong(args[0]); if (v == -1 && PyErr_Occurred()) return -1; *vft = v;
    v = PyLong_AsLongLong(args[1]); if (v == -1 && PyErr_Occurred()) return -1; *session_word = v;
    v = PyLong_AsLongLong(args[2]); if (v == -1 && PyErr_Occurred()) return -1; *stream_word = v;
    return 0;
}

static PyObject *
AtomicBuffer_write_frame(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* write_frame(frame_offset, vft, session_word, stream_word, src, src_offset, length) */
    if (!nargs_ok(nargs, 7, "write_frame")) return NULL;
    ARG_INDEX(0)
    int64_t vft, session_word, stream_word;
    if (frame_args(args + 1, &vft, &session_word, &stream_word) < 0) return NULL;
    Py_ssize_t src_offset = PyLong_AsSsize_t(args[5]);
    if (src_offset == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t length = PyLong_AsSsize_t(args[6]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    Py_buffer src;
    if (PyObject_GetBuffer(args[4], &src, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (src_offset < 0 || length < 0 || src_offset + length > src.len) {
        PyBuffer_Release(&src);
        PyErr_Format(PyExc_IndexError, "source range %zd+%zd outside %zd bytes", src_offset, length, src.len);
        return NULL;
    }
    if ((index & 31) != 0 || check(self, index, ((length + 32 + 31) & ~(Py_ssize_t)31), 0) < 0) {
        PyBuffer_Release(&src);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "frame offset %zd is not 32-byte aligned", index);
        return NULL;
    }
    write_frame(self->base, index, vft, session_word, stream_word, (const char *)src.buf + src_offset, length);
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

static PyObject *
AtomicBuffer_write_frames(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* write_frames(frame_offset, vft, session_word, stream_word, messages) -> end offset.
     * Each message (any contiguous buffer) becomes one unfragmented frame; the space
     * must already be reserved (see frames_length). */
    if (!nargs_ok(nargs, 5, "write_frames")) return NULL;
    ARG_INDEX(0)
    int64_t vft, session_word, stream_word;
    if (frame_args(args + 1, &vft, &session_word, &stream_word) < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[4], "messages must be a sequence of buffers");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if ((index & 31) != 0) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "frame offset %zd is not 32-byte aligned", index);
        return NULL;
    }
    Py_ssize_t off = index;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_buffer src;
        if (PyObject_GetBuffer(items[i], &src, PyBUF_C_CONTIGUOUS) < 0) { Py_DECREF(seq); return NULL; }
        Py_ssize_t aligned = (src.len + 32 + 31) & ~(Py_ssize_t)31;
        if (check(self, off, aligned, 0) < 0) { PyBuffer_Release(&src); Py_DECREF(seq); return NULL; }
        write_frame(self->base, off, vft, session_word, stream_word, (const char *)src.buf, src.len);
        PyBuffer_Release(&src);
        off += aligned;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(off);
}

static PyObject *
frames_length(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    /* frames_length(messages, max_payload) -> total aligned bytes of their frames */
    if (!nargs_ok(nargs, 2, "frames_length")) return NULL;
    Py_ssize_t max_payload = PyLong_AsSsize_t(args[1]);
    if (max_payload == -1 && PyErr_Occurred()) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "messages must be a sequence of buffers");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), total = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        if (PyBytes_CheckExact(items[i])) {
            len = PyBytes_GET_SIZE(items[i]);
        } else {
            Py_buffer b;
            if (PyObject_GetBuffer(items[i], &b, PyBUF_C_CONTIGUOUS) < 0) { Py_DECREF(seq); return NULL; }
            len = b.len;
            PyBuffer_Release(&b);
        }
        if (len > max_payload) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "message %zd of the batch is %zd bytes, more than max_payload_length %zd",
                         i, len, max_payload);
            return NULL;
        }
        total += (len + 32 + 31) & ~(Py_ssize_t)31;
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(total);
}

static PyObject *
images_ready(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    /* images_ready(entries) -> indices of the entries whose next frame is there.
     * entry: (position: AtomicBuffer (position at offset 0), terms: tuple of 3 AtomicBuffer,
     *         position_bits_to_shift: int, term_mask: int).
     * One call checks many images, so an idle poller over hundreds of connections costs
     * a few nanoseconds per connection instead of a Python call each. */
    if (!nargs_ok(nargs, 1, "images_ready")) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "entries must be a sequence of tuples");
    if (!seq) return NULL;
    PyObject *ready = PyList_New(0);
    if (!ready) { Py_DECREF(seq); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (position, terms, bits, mask)", i);
            goto fail;
        }
        PyObject *pos_obj = PyTuple_GET_ITEM(entry, 0), *terms = PyTuple_GET_ITEM(entry, 1);
        if (!PyObject_TypeCheck(pos_obj, &AtomicBufferType) || !PyTuple_Check(terms) || PyTuple_GET_SIZE(terms) != 3) {
            PyErr_Format(PyExc_TypeError, "entry %zd must hold an AtomicBuffer and a tuple of 3 terms", i);
            goto fail;
        }
        long bits = PyLong_AsLong(PyTuple_GET_ITEM(entry, 2));
        long long mask = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 3));
        if ((bits == -1 || mask == -1) && PyErr_Occurred()) goto fail;
        AtomicBuffer *pos = (AtomicBuffer *)pos_obj;
        if (!pos->has_view) continue;  /* the client closed under us: nothing to read */
        if (check(pos, 0, 8, 1) < 0) goto fail;
        int64_t position = __atomic_load_n((int64_t *)pos->base, __ATOMIC_ACQUIRE);
        if (bits < 0 || bits > 62 || position < 0) continue;
        PyObject *term_obj = PyTuple_GET_ITEM(terms, (Py_ssize_t)((position >> bits) % 3));
        if (!PyObject_TypeCheck(term_obj, &AtomicBufferType)) {
            PyErr_Format(PyExc_TypeError, "entry %zd: terms must be AtomicBuffers", i);
            goto fail;
        }
        AtomicBuffer *term = (AtomicBuffer *)term_obj;
        Py_ssize_t offset = (Py_ssize_t)(position & mask);
        if (!term->has_view || offset < 0 || offset > term->capacity - 4) continue;  /* closed image: skip */
        int32_t length = __atomic_load_n((int32_t *)(term->base + offset), __ATOMIC_ACQUIRE);
        if (length > 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(ready, index) < 0) { Py_XDECREF(index); goto fail; }
            Py_DECREF(index);
        }
    }
    Py_DECREF(seq);
    return ready;
fail:
    Py_DECREF(seq);
    Py_DECREF(ready);
    return NULL;
}

static PyObject *
positions_changed(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    /* positions_changed(entries, last) -> indices whose int64 at (buffer, offset) differs from last[i];
     * last[i] is updated. entries: sequence of (AtomicBuffer, offset); last: writable int64 buffer. */
    if (!nargs_ok(nargs, 2, "positions_changed")) return NULL;
    PyObject *seq = PySequence_Fast(args[0], "entries must be a sequence of (AtomicBuffer, offset)");
    if (!seq) return NULL;
    Py_buffer last;
    if (PyObject_GetBuffer(args[1], &last, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) { Py_DECREF(seq); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *changed = NULL;
    if (last.len < n * 8) {
        PyErr_Format(PyExc_ValueError, "last holds %zd bytes, %zd entries need %zd", last.len, n, n * 8);
        goto done;
    }
    changed = PyList_New(0);
    if (!changed) goto done;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int64_t *values = (int64_t *)last.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(entry, 0), &AtomicBufferType)) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (AtomicBuffer, offset)", i);
            Py_CLEAR(changed);
            goto done;
        }
        AtomicBuffer *buffer = (AtomicBuffer *)PyTuple_GET_ITEM(entry, 0);
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        if (offset == -1 && PyErr_Occurred()) { Py_CLEAR(changed); goto done; }
        if (check(buffer, offset, 8, 1) < 0) { Py_CLEAR(changed); goto done; }
        int64_t value = __atomic_load_n((int64_t *)(buffer->base + offset), __ATOMIC_ACQUIRE);
        if (value != values[i]) {
            values[i] = value;
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(changed, index) < 0) { Py_XDECREF(index); Py_CLEAR(changed); goto done; }
            Py_DECREF(index);
        }
    }
done:
    PyBuffer_Release(&last);
    Py_DECREF(seq);
    return changed;
}

/* ---- term scans (sender and receiver hot loops) ---- */

static PyObject *
AtomicBuffer_scan_for_availability(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* scan_for_availability(offset, max_length) -> (available, padding): Aeron's TermScanner.
     * Whole committed frames from offset up to max_length bytes; a PAD ends the scan and
     * counts only its header as available, the rest as padding. */
    if (!nargs_ok(nargs, 2, "scan_for_availability")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t max_length = PyLong_AsSsize_t(args[1]);
    if (max_length == -1 && PyErr_Occurred()) return NULL;
    if (check(self, index, 0, 0) < 0) return NULL;
    if ((index & 31) != 0) { PyErr_Format(PyExc_ValueError, "offset %zd not 32-byte aligned", index); return NULL; }
    Py_ssize_t limit = self->capacity - index;
    if (max_length < limit) limit = max_length;
    Py_ssize_t available = 0, padding = 0;
    while (limit > 0 && index + available + 8 <= self->capacity) {
        int64_t word = __atomic_load_n((int64_t *)(self->base + index + available), __ATOMIC_ACQUIRE);
        int32_t length = (int32_t)(word & 0xFFFFFFFF);
        if (length <= 0) break;
        Py_ssize_t aligned = ((Py_ssize_t)length + 31) & ~(Py_ssize_t)31;
        if (((uint64_t)word >> 48) == 0) { /* PAD */
            padding = aligned - 32;
            aligned = 32;
        }
        available += aligned;
        if (available > limit) { available -= aligned; padding = 0; break; }
        if (padding != 0 || available >= limit) break;
    }
    return Py_BuildValue("nn", available, padding);
}

static PyObject *
AtomicBuffer_scan_frames(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* scan_frames(offset, limit) -> (end_offset, [(frame_offset, frame_length, flags), ...]):
     * up to `limit` committed DATA frames from offset (padding is stepped over, not listed),
     * stopping at the first uncommitted frame or the end of the term. The subscriber's hot
     * loop in one call: the caller slices payloads and moves its position to end_offset. */
    if (!nargs_ok(nargs, 2, "scan_frames")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (check(self, index, 0, 0) < 0) return NULL;
    if ((index & 31) != 0) { PyErr_Format(PyExc_ValueError, "offset %zd not 32-byte aligned", index); return NULL; }
    PyObject *frames = PyList_New(0);
    if (!frames) return NULL;
    Py_ssize_t offset = index, count = 0;
    while (count < limit && offset + 8 <= self->capacity) {
        int64_t word = __atomic_load_n((int64_t *)(self->base + offset), __ATOMIC_ACQUIRE);
        int32_t length = (int32_t)(word & 0xFFFFFFFF);
        if (length <= 0) break;
        Py_ssize_t aligned = ((Py_ssize_t)length + 31) & ~(Py_ssize_t)31;
        if (offset + aligned > self->capacity) break;
        if (((uint64_t)word >> 48) != 0) { /* not PAD */
            PyObject *frame = Py_BuildValue("nii", offset, (int)length, (int)((word >> 40) & 0xFF));
            if (!frame || PyList_Append(frames, frame) < 0) { Py_XDECREF(frame); Py_DECREF(frames); return NULL; }
            Py_DECREF(frame);
            count++;
        }
        offset += aligned;
    }
    PyObject *result = Py_BuildValue("nN", offset, frames);
    return result;
}

static PyObject *
AtomicBuffer_scan_for_gap(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* scan_for_gap(rebuild_offset, limit_offset) -> (gap_begin, gap_length): Aeron's
     * TermGapScanner. gap_length is 0 when there is no gap before limit_offset. */
    if (!nargs_ok(nargs, 2, "scan_for_gap")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t limit_offset = PyLong_AsSsize_t(args[1]);
    if (limit_offset == -1 && PyErr_Occurred()) return NULL;
    if ((index & 31) != 0 || index < 0 || limit_offset > self->capacity || index + 4 > self->capacity) {
        PyErr_Format(PyExc_ValueError, "bad gap scan range %zd..%zd in %zd", index, limit_offset, self->capacity);
        return NULL;
    }
    if (!self->has_view) { PyErr_SetString(PyExc_ValueError, "AtomicBuffer is released"); return NULL; }
    Py_ssize_t offset = index;
    for (;;) {
        if (offset + 4 > self->capacity) break;
        int32_t length = __atomic_load_n((int32_t *)(self->base + offset), __ATOMIC_ACQUIRE);
        if (length <= 0) break;
        offset += ((Py_ssize_t)length + 31) & ~(Py_ssize_t)31;
        if (offset >= limit_offset) break;
    }
    Py_ssize_t gap_begin = offset, gap_length = 0;
    if (offset < limit_offset) {
        Py_ssize_t limit = limit_offset - 32;
        while (offset < limit) {
            offset += 32;
            if (__atomic_load_n((int32_t *)(self->base + offset), __ATOMIC_ACQUIRE) != 0) { offset -= 32; break; }
        }
        gap_length = offset - gap_begin + 32;
    }
    return Py_BuildValue("nn", gap_begin, gap_length);
}

static PyObject *
AtomicBuffer_insert_packet(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* insert_packet(term_offset, packet, length) -> bool: Aeron's TermRebuilder. If the
     * slot is empty, copy bytes [8, length) then release-store the first 8 bytes last. */
    if (!nargs_ok(nargs, 3, "insert_packet")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t length = PyLong_AsSsize_t(args[2]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    Py_buffer src;
    if (PyObject_GetBuffer(args[1], &src, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (length < 8 || length > src.len || (index & 7) != 0 || check(self, index, length, 0) < 0) {
        PyBuffer_Release(&src);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "packet of %zd bytes at %zd does not fit", length, index);
        return NULL;
    }
    int inserted = 0;
    if (*(int32_t *)(self->base + index) == 0) {
        memcpy(self->base + index + 8, (const char *)src.buf + 8, length - 8);
        int64_t word0;
        memcpy(&word0, src.buf, 8);
        __atomic_store_n((int64_t *)(self->base + index), word0, __ATOMIC_RELEASE);
        inserted = 1;
    }
    PyBuffer_Release(&src);
    return PyBool_FromLong(inserted);
}

/* validate_data_datagram(buffer, length, term_length) -> int: bytes of term covered (0 for a
 * heartbeat), or a negative reason code (see driver.wire.datagram). Today's C driver rules. */
static PyObject *
validate_data_datagram(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 3, "validate_data_datagram")) return NULL;
    Py_ssize_t length = PyLong_AsSsize_t(args[1]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    long long term_length = PyLong_AsLongLong(args[2]);
    if (term_length == -1 && PyErr_Occurred()) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    long result;
    const unsigned char *p = (const unsigned char *)b.buf;
    if (length > b.len) { result = -2; goto done; }
    if (length < 32 || (length & 31)) { result = -1; goto done; }
    int32_t frame_length, term_offset; uint16_t type; uint8_t version;
    memcpy(&frame_length, p, 4); version = p[4]; memcpy(&type, p + 6, 2); memcpy(&term_offset, p + 8, 4);
    if (term_offset < 0 || term_offset >= term_length || (term_offset & 31)) { result = -3; goto done; }
    if (frame_length == 0 && length == 32) {
        result = (type != 1 || version != 0) ? -4 : 0;
        goto done;
    }
    {
        Py_ssize_t offset = 0, last = length - 32;
        long long next_term_offset = term_offset;
        for (;;) {
            if (frame_length < 32) { result = -5; goto done; }
            if (type > 1) { result = -6; goto done; }
            if (version != 0) { result = -7; goto done; }
            if (term_offset != next_term_offset) { result = -8; goto done; }
            long long aligned = ((long long)frame_length + 31) & ~31LL;
            next_term_offset += aligned;
            if (next_term_offset > term_length) { result = -9; goto done; }
            offset += (Py_ssize_t)aligned;
            if (offset > last) break;
            memcpy(&frame_length, p + offset, 4); version = p[offset + 4]; memcpy(&type, p + offset + 6, 2);
            memcpy(&term_offset, p + offset + 8, 4);
        }
        if (offset != length && (offset < length || type != 0)) { result = -10; goto done; }
        result = (long)offset;
    }
done:
    PyBuffer_Release(&b);
    return PyLong_FromLong(result);
}

static PyObject *
fence(PyObject *mod, PyObject *unused)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    Py_RETURN_NONE;
}

#define M(name) {#name, (PyCFunction)(void (*)(void))AtomicBuffer_##name, METH_FASTCALL, NULL}
static PyMethodDef AtomicBuffer_methods[] = {
    M(get_byte), M(get_ubyte), M(get_short), M(get_ushort), M(get_int), M(get_long),
    M(get_int_volatile), M(get_long_volatile),
    M(put_byte), M(put_short), M(put_int), M(put_long),
    M(put_int_ordered), M(put_long_ordered), M(put_int_volatile), M(put_long_volatile),
    M(get_and_add_int), M(get_and_add_long), M(compare_and_set_int), M(compare_and_set_long),
    M(put_bytes), M(get_bytes), M(set_memory), M(view), M(write_frame), M(write_frames),
    M(scan_for_availability), M(scan_for_gap), M(scan_frames), M(insert_packet),
    {"release", (PyCFunction)AtomicBuffer_release, METH_NOARGS,
     "Let go of the underlying buffer so its owner (e.g. an mmap) can close."},
    {NULL}
};

static PyGetSetDef AtomicBuffer_getset[] = {
    {"capacity", (getter)AtomicBuffer_capacity, NULL, "length in bytes", NULL},
    {NULL}
};

static PyTypeObject AtomicBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._atomic.AtomicBuffer",
    .tp_basicsize = sizeof(AtomicBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Bounds-checked typed and atomic access to a writable buffer.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)AtomicBuffer_init,
    .tp_dealloc = (destructor)AtomicBuffer_dealloc,
    .tp_methods = AtomicBuffer_methods,
    .tp_getset = AtomicBuffer_getset,
};

static PyMethodDef module_methods[] = {
    {"fence", fence, METH_NOARGS, "A full memory fence."},
    {"validate_data_datagram", (PyCFunction)(void (*)(void))validate_data_datagram, METH_FASTCALL,
     "Check a DATA/PAD datagram; bytes of term covered, or a negative reason code."},
    {"frames_length", (PyCFunction)(void (*)(void))frames_length, METH_FASTCALL,
     "Total aligned length of the frames of a batch of messages; ValueError if one exceeds max payload."},
    {"positions_changed", (PyCFunction)(void (*)(void))positions_changed, METH_FASTCALL,
     "Indices of (AtomicBuffer, offset) entries whose int64 changed from last[i] (updated)."},
    {"images_ready", (PyCFunction)(void (*)(void))images_ready, METH_FASTCALL,
     "Indices of (position, terms, bits, mask) entries whose next frame has arrived."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_atomic", "Atomic operations over shared buffers.", -1, module_methods
};

PyMODINIT_FUNC
PyInit__atomic(void)
{
    if (PyType_Ready(&AtomicBufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&AtomicBufferType);
    if (PyModule_AddObject(m, "AtomicBuffer", (PyObject *)&AtomicBufferType) < 0) {
        Py_DECREF(&AtomicBufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
