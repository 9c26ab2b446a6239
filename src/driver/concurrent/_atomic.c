/*
 * AtomicBuffer: typed, bounds-checked access to a writable buffer (usually an
 * mmap shared between processes) with the memory-ordering operations the
 * Aeron layouts need: acquire loads, release stores, fetch-add and CAS.
 *
 * Python has no portable way to do an atomic read-modify-write on shared
 * memory; this module is the only native code the driver needs. Beside the
 * buffer it holds the few hot loops that cost too much as Python calls: frame
 * writes and scans, PublicationWriter (a publication's single-message offer), and the watches that
 * check hundreds of positions in one call.
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
deadlines_due(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    /* deadlines_due(deadlines, now_ns) -> indices i with deadlines[i] <= now_ns.
     * deadlines: an int64 buffer (array('q')). An agent keeps one slot per publication or image
     * and finds the few that are due without a Python call for each of the idle rest. */
    if (!nargs_ok(nargs, 2, "deadlines_due")) return NULL;
    long long now = PyLong_AsLongLong(args[1]);
    if (now == -1 && PyErr_Occurred()) return NULL;
    Py_buffer deadlines;
    if (PyObject_GetBuffer(args[0], &deadlines, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *due = NULL;
    if (deadlines.len % 8) {
        PyErr_Format(PyExc_ValueError, "deadlines must hold int64 values, got %zd bytes", deadlines.len);
        goto done;
    }
    due = PyList_New(0);
    if (!due) goto done;
    const int64_t *values = (const int64_t *)deadlines.buf;
    Py_ssize_t n = deadlines.len / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] <= now) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(due, index) < 0) { Py_XDECREF(index); Py_CLEAR(due); goto done; }
            Py_DECREF(index);
        }
    }
done:
    PyBuffer_Release(&deadlines);
    return due;
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

static PyObject *str_offset;  /* "offset", interned at import */

static PyObject *
AtomicBuffer_read_fragments(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* read_fragments(offset, fragments_limit, handler, header, view, error_handler) -> (fragments, new_offset):
     * driver.logbuffer.reader.read's loop. For each committed DATA frame from offset: header.offset =
     * frame offset, then handler(view[frame + 32 : frame + length], header); padding is stepped over.
     * An Exception from the handler (or the loop) goes to error_handler, if one is given, and ends the
     * call with the failed fragment consumed; otherwise it propagates. The buffer is checked before every
     * load, as a handler may close the log under the loop. */
    if (!nargs_ok(nargs, 6, "read_fragments")) return NULL;
    ARG_INDEX(0)
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    PyObject *handler = args[2], *header = args[3], *view = args[4], *error_handler = args[5];
    Py_ssize_t capacity = self->capacity, offset = index, fragments = 0;
    while (fragments < limit && offset < capacity) {
        if (check(self, offset, 8, 1) < 0) goto error;
        int64_t word = __atomic_load_n((int64_t *)(self->base + offset), __ATOMIC_ACQUIRE);
        int64_t length = word & 0xFFFFFFFFLL;
        if (length <= 0 || length >= 0x80000000LL) break;
        Py_ssize_t frame_offset = offset;
        offset += (Py_ssize_t)((length + 31) & ~31LL);
        if (((uint64_t)word >> 48) == 0)  /* PAD */
            continue;
        PyObject *frame = PyLong_FromSsize_t(frame_offset);
        if (!frame) goto error;
        int set = PyObject_SetAttr(header, str_offset, frame);
        Py_DECREF(frame);
        if (set < 0) goto error;
        PyObject *payload = PySequence_GetSlice(view, frame_offset + 32, frame_offset + (Py_ssize_t)length);
        if (!payload) goto error;
        PyObject *call_args[2] = {payload, header};
        PyObject *result = PyObject_Vectorcall(handler, call_args, 2, NULL);
        Py_DECREF(payload);
        if (!result) goto error;
        Py_DECREF(result);
        fragments++;
    }
    return Py_BuildValue("nn", fragments, offset);
error:
    if (error_handler == Py_None || !PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback && value)
        PyException_SetTraceback(value, traceback);
    PyObject *handled = PyObject_CallOneArg(error_handler, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (!handled) return NULL;
    Py_DECREF(handled);
    return Py_BuildValue("nn", fragments, offset);
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
    M(scan_for_availability), M(scan_for_gap), M(scan_frames), M(insert_packet), M(read_fragments),
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

/* ---- PublicationWriter: the single-message offer in one call ----
 *
 * A publication's offer of a message that fits one frame, as
 * driver.client.publication writes it (Aeron 1.15.1's order and codes), without a
 * Python frame per step. The writer keeps references to the AtomicBuffers of the
 * publisher limit, the log metadata and the three terms, and checks on every call
 * that each is still mapped, so a closed log is never written.
 *
 * offer(buffer, offset=0, length=None) returns the new position (> 0); ADMIN_ACTION
 * (-3) or MAX_POSITION_EXCEEDED (-5) after a concurrent claim that ran off the end
 * of the term (padded and rotated here, as the claim cannot be undone); or 0 when
 * nothing was written and the caller's own path must decide: not mapped, back
 * pressure, a message for fragmentation, a buffer it cannot read, a rotation under
 * way, or (exclusive) the end of the term. A bad source range raises ValueError
 * before anything is claimed.
 *
 * A concurrent writer claims with a fetch-add on the shared tail. An exclusive
 * writer owns its position (active partition, term id, term offset, term begin
 * position); the Python publication reads and moves it through the attributes
 * of the same names, which are range-checked because offer trusts them.
 */

#define TERM_COUNT_OFFSET 24        /* LOG_ACTIVE_TERM_COUNT_OFFSET, after 3 tail counters */
#define META_NEEDED 32              /* bytes of metadata offer touches */
#define WRITE_SLOW_PATH 0
#define WRITE_ADMIN_ACTION (-3)
#define WRITE_MAX_POSITION_EXCEEDED (-5)

typedef struct {
    PyObject_HEAD
    AtomicBuffer *limit;
    AtomicBuffer *meta;
    AtomicBuffer *terms[3];
    int64_t term_length;
    int64_t max_possible_position;
    int64_t vft;
    int64_t session_word;
    int64_t stream_word;
    Py_ssize_t max_payload;
    int32_t initial_term_id;
    int bits;
    int exclusive;
    /* exclusive writers only */
    int active_index;
    int32_t term_id;
    int64_t term_offset;
    int64_t term_begin_position;
} PublicationWriter;

static PyTypeObject PublicationWriterType;

static inline int
mapped(const AtomicBuffer *b, Py_ssize_t needed)
{
    return b->has_view && b->capacity >= needed && (((uintptr_t)b->base) & 7) == 0;
}

static inline int
python_mod3(int32_t v)
{
    int r = v % 3;
    return r < 0 ? r + 3 : r;
}

static int
PublicationWriter_init(PublicationWriter *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"limit", "metadata", "terms", "initial_term_id", "max_payload_length",
                             "vft", "session_word", "stream_word", "exclusive", NULL};
    PyObject *limit, *meta, *terms;
    int initial_term_id, exclusive;
    Py_ssize_t max_payload;
    long long vft, session_word, stream_word;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!inLLLp", kwlist, &AtomicBufferType, &limit,
                                     &AtomicBufferType, &meta, &PyTuple_Type, &terms, &initial_term_id,
                                     &max_payload, &vft, &session_word, &stream_word, &exclusive))
        return -1;
    if (PyTuple_GET_SIZE(terms) != 3) {
        PyErr_SetString(PyExc_ValueError, "terms must be a tuple of 3 AtomicBuffers");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(terms, i), &AtomicBufferType)) {
            PyErr_SetString(PyExc_TypeError, "terms must be a tuple of 3 AtomicBuffers");
            return -1;
        }
    }
    int64_t term_length = ((AtomicBuffer *)PyTuple_GET_ITEM(terms, 0))->capacity;
    if (term_length < 64 || (term_length & (term_length - 1)) != 0 || term_length > (1LL << 30)) {
        PyErr_Format(PyExc_ValueError, "term length %lld is not a power of two in [64, 1G]", (long long)term_length);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        AtomicBuffer *t = (AtomicBuffer *)PyTuple_GET_ITEM(terms, i);
        if (!mapped(t, term_length) || t->capacity != term_length) {
            PyErr_SetString(PyExc_ValueError, "terms must be mapped, 8-byte aligned and of one length");
            return -1;
        }
    }
    if (!mapped((AtomicBuffer *)limit, 8) || !mapped((AtomicBuffer *)meta, META_NEEDED)) {
        PyErr_SetString(PyExc_ValueError, "limit and metadata must be mapped and 8-byte aligned");
        return -1;
    }
    Py_INCREF(limit);
    Py_XSETREF(self->limit, (AtomicBuffer *)limit);
    Py_INCREF(meta);
    Py_XSETREF(self->meta, (AtomicBuffer *)meta);
    for (int i = 0; i < 3; i++) {
        PyObject *t = PyTuple_GET_ITEM(terms, i);
        Py_INCREF(t);
        Py_XSETREF(self->terms[i], (AtomicBuffer *)t);
    }
    int bits = 0;
    while ((1LL << bits) < term_length)
        bits++;
    self->term_length = term_length;
    self->bits = bits;
    self->max_possible_position = term_length << 31;
    self->initial_term_id = (int32_t)initial_term_id;
    self->max_payload = max_payload;
    self->vft = (int64_t)vft;
    self->session_word = (int64_t)session_word;
    self->stream_word = (int64_t)stream_word;
    self->exclusive = exclusive;
    self->active_index = 0;
    self->term_id = (int32_t)initial_term_id;
    self->term_offset = 0;
    self->term_begin_position = 0;
    return 0;
}

static void
PublicationWriter_dealloc(PublicationWriter *self)
{
    Py_XDECREF(self->limit);
    Py_XDECREF(self->meta);
    for (int i = 0; i < 3; i++)
        Py_XDECREF(self->terms[i]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static inline int
writer_ready(const PublicationWriter *self)
{
    return self->limit && mapped(self->limit, 8) && mapped(self->meta, META_NEEDED) &&
           self->terms[0]->capacity == self->term_length && self->terms[0]->has_view &&
           self->terms[1]->capacity == self->term_length && self->terms[1]->has_view &&
           self->terms[2]->capacity == self->term_length && self->terms[2]->has_view &&
           (((uintptr_t)self->terms[0]->base | (uintptr_t)self->terms[1]->base |
             (uintptr_t)self->terms[2]->base) & 7) == 0;
}

/* A padding frame from frame_offset to the end of the term, committed last. */
static void
write_padding(const PublicationWriter *self, char *base, int64_t frame_offset, int32_t term_id)
{
    int32_t padding = (int32_t)(self->term_length - frame_offset);
    __atomic_store_n((int64_t *)(base + frame_offset),
                     (int64_t)(((uint64_t)self->vft & 0xFFFFFFFF00000000ULL) | (uint32_t)(-padding)),
                     __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    int64_t w1 = self->session_word | (int64_t)(uint32_t)frame_offset;
    int64_t w2 = self->stream_word | (int64_t)((uint64_t)(uint32_t)term_id << 32);
    memcpy(base + frame_offset + 8, &w1, 8);
    memcpy(base + frame_offset + 16, &w2, 8);
    int16_t pad_type = 0;
    memcpy(base + frame_offset + 6, &pad_type, 2);
    __atomic_store_n((int32_t *)(base + frame_offset), padding, __ATOMIC_RELEASE);
}

/* driver.logbuffer.descriptor.rotate_log */
static void
rotate_log(char *meta, int32_t term_count, int32_t term_id)
{
    int32_t next_term_id = (int32_t)((uint32_t)term_id + 1);
    int32_t next_term_count = (int32_t)((uint32_t)term_count + 1);
    int64_t *tail_address = (int64_t *)(meta + 8 * python_mod3(next_term_count));
    int32_t expected_term_id = (int32_t)((uint32_t)next_term_id - 3);
    int64_t new_tail = (int64_t)((uint64_t)(uint32_t)next_term_id << 32);
    for (;;) {
        int64_t tail = __atomic_load_n(tail_address, __ATOMIC_ACQUIRE);
        if ((int32_t)(tail >> 32) != expected_term_id)
            break;
        if (__atomic_compare_exchange_n(tail_address, &tail, new_tail, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    int32_t expected = term_count;
    __atomic_compare_exchange_n((int32_t *)(meta + TERM_COUNT_OFFSET), &expected, next_term_count, 0,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static void
raise_delayed_action(int32_t expected_term_id, int32_t term_id)
{
    PyObject *errors = PyImport_ImportModule("driver.errors");
    PyObject *cls = errors ? PyObject_GetAttrString(errors, "DriverError") : NULL;
    Py_XDECREF(errors);
    if (!cls)
        return;
    PyErr_Format(cls, "action possibly delayed: expected_term_id=%d term_id=%d", (int)expected_term_id,
                 (int)term_id);
    Py_DECREF(cls);
}

static PyObject *
PublicationWriter_offer(PublicationWriter *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* offer(buffer, offset=0, length=None) -> position > 0, -3, -5, or 0 (the caller's path) */
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "offer(buffer, offset=0, length=None)");
        return NULL;
    }
    if (!writer_ready(self))
        return PyLong_FromLong(WRITE_SLOW_PATH);
    Py_ssize_t offset = 0, length = -1;
    int has_length = 0;
    if (nargs > 1) {
        offset = PyLong_AsSsize_t(args[1]);
        if (offset == -1 && PyErr_Occurred()) goto slow_path_error;
    }
    if (nargs > 2 && args[2] != Py_None) {
        length = PyLong_AsSsize_t(args[2]);
        if (length == -1 && PyErr_Occurred()) goto slow_path_error;
        has_length = 1;
    }

    /* The source, read without a copy: bytes directly, anything else by the buffer protocol. */
    PyObject *src_obj = args[0];
    Py_buffer src;
    const char *src_base;
    Py_ssize_t src_len;
    int has_buffer = 0;
    if (PyBytes_CheckExact(src_obj)) {
        src_base = PyBytes_AS_STRING(src_obj);
        src_len = PyBytes_GET_SIZE(src_obj);
    } else {
        if (PyObject_GetBuffer(src_obj, &src, PyBUF_SIMPLE) < 0)
            goto slow_path_error;
        has_buffer = 1;
        src_base = (const char *)src.buf;
        src_len = src.len;
    }
    if (!has_length)
        length = src_len - offset;

    PyObject *result = NULL;
    int64_t limit = __atomic_load_n((int64_t *)self->limit->base, __ATOMIC_ACQUIRE);
    char *meta = self->meta->base;
    int64_t value = WRITE_SLOW_PATH;

    if (self->exclusive) {
        int index = self->active_index;
        int32_t term_id = self->term_id;
        int64_t term_offset = self->term_offset;
        int64_t position = self->term_begin_position + term_offset;
        if (position >= limit || length > self->max_payload || (term_offset & 31) != 0)
            goto done;
        if (length < 0 || offset < 0 || offset > src_len - length)
            goto bad_range;
        int64_t resulting = term_offset + ((length + 32 + 31) & ~(int64_t)31);
        if (resulting > self->term_length)
            goto done;  /* pad and rotate in Python */
        __atomic_store_n((int64_t *)(meta + 8 * index),
                         (int64_t)(((uint64_t)(uint32_t)term_id << 32) | (uint64_t)resulting), __ATOMIC_RELEASE);
        write_frame(self->terms[index]->base, (Py_ssize_t)term_offset, self->vft, self->session_word,
                    self->stream_word | (int64_t)((uint64_t)(uint32_t)term_id << 32), src_base + offset, length);
        self->term_offset = resulting;
        value = self->term_begin_position + resulting;
        goto done;
    }

    int32_t term_count = __atomic_load_n((int32_t *)(meta + TERM_COUNT_OFFSET), __ATOMIC_ACQUIRE);
    int index = python_mod3(term_count);
    int64_t raw_tail = __atomic_load_n((int64_t *)(meta + 8 * index), __ATOMIC_ACQUIRE);
    int32_t term_id = (int32_t)(raw_tail >> 32);
    if ((uint32_t)term_id - (uint32_t)self->initial_term_id != (uint32_t)term_count)
        goto done;  /* rotation under way: ADMIN_ACTION from Python */
    int64_t term_offset = raw_tail & 0xFFFFFFFFLL;
    int64_t position = (int64_t)((uint64_t)(int64_t)term_count << self->bits) + term_offset;
    if (position >= limit || length > self->max_payload)
        goto done;
    if (length < 0 || offset < 0 || offset > src_len - length)
        goto bad_range;
    int64_t aligned = (length + 32 + 31) & ~(int64_t)31;
    int64_t raw = __atomic_fetch_add((int64_t *)(meta + 8 * index), aligned, __ATOMIC_SEQ_CST);
    int64_t frame_offset = raw & 0xFFFFFFFFLL;
    if ((int32_t)(raw >> 32) != term_id) {
        raise_delayed_action(term_id, (int32_t)(raw >> 32));
        goto out;
    }
    int64_t resulting = frame_offset + aligned;
    char *term = self->terms[index]->base;
    if (resulting > self->term_length) {
        if (frame_offset < self->term_length) {
            if ((frame_offset & 31) != 0) {
                PyErr_Format(PyExc_ValueError, "frame offset %lld is not 32-byte aligned", (long long)frame_offset);
                goto out;
            }
            write_padding(self, term, frame_offset, term_id);
        }
        if (position + term_offset > self->max_possible_position) {
            value = WRITE_MAX_POSITION_EXCEEDED;
        } else {
            rotate_log(meta, term_count, term_id);
            value = WRITE_ADMIN_ACTION;
        }
        goto done;
    }
    if ((frame_offset & 31) != 0) {
        PyErr_Format(PyExc_ValueError, "frame offset %lld is not 32-byte aligned", (long long)frame_offset);
        goto out;
    }
    write_frame(term, (Py_ssize_t)frame_offset, self->vft, self->session_word,
                self->stream_word | (int64_t)((uint64_t)(uint32_t)term_id << 32), src_base + offset, length);
    value = position - term_offset + resulting;

done:
    result = PyLong_FromLongLong(value);
out:
    if (has_buffer)
        PyBuffer_Release(&src);
    return result;
bad_range:
    if (length < 0)
        PyErr_Format(PyExc_ValueError, "invalid length: %zd", length);
    else
        PyErr_Format(PyExc_ValueError, "source range %zd+%zd outside %zd bytes", offset, length, src_len);
    goto out;
slow_path_error:
    PyErr_Clear();
    return PyLong_FromLong(WRITE_SLOW_PATH);
}

/* The exclusive writer's position, moved by the Python publication on its slower paths. */
static int
set_checked(PyObject *value, long long low, long long high, long long *out, const char *name)
{
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < low || v > high) {
        PyErr_Format(PyExc_ValueError, "%s %lld outside [%lld, %lld]", name, v, low, high);
        return -1;
    }
    *out = v;
    return 0;
}

static PyObject *
PublicationWriter_get_active_index(PublicationWriter *self, void *closure)
{
    return PyLong_FromLong(self->active_index);
}

static int
PublicationWriter_set_active_index(PublicationWriter *self, PyObject *value, void *closure)
{
    long long v;
    if (set_checked(value, 0, 2, &v, "active_index") < 0) return -1;
    self->active_index = (int)v;
    return 0;
}

static PyObject *
PublicationWriter_get_term_id(PublicationWriter *self, void *closure)
{
    return PyLong_FromLong(self->term_id);
}

static int
PublicationWriter_set_term_id(PublicationWriter *self, PyObject *value, void *closure)
{
    long long v;
    if (set_checked(value, INT32_MIN, INT32_MAX, &v, "term_id") < 0) return -1;
    self->term_id = (int32_t)v;
    return 0;
}

static PyObject *
PublicationWriter_get_term_offset(PublicationWriter *self, void *closure)
{
    return PyLong_FromLongLong(self->term_offset);
}

static int
PublicationWriter_set_term_offset(PublicationWriter *self, PyObject *value, void *closure)
{
    long long v;
    if (set_checked(value, 0, self->term_length, &v, "term_offset") < 0) return -1;
    self->term_offset = v;
    return 0;
}

static PyObject *
PublicationWriter_get_term_begin_position(PublicationWriter *self, void *closure)
{
    return PyLong_FromLongLong(self->term_begin_position);
}

static int
PublicationWriter_set_term_begin_position(PublicationWriter *self, PyObject *value, void *closure)
{
    long long v;
    if (set_checked(value, LLONG_MIN, LLONG_MAX, &v, "term_begin_position") < 0) return -1;
    self->term_begin_position = v;
    return 0;
}

static PyObject *
PublicationWriter_get_term_length(PublicationWriter *self, void *closure)
{
    return PyLong_FromLongLong(self->term_length);
}

#define GS(name, doc) {#name, (getter)PublicationWriter_get_##name, (setter)PublicationWriter_set_##name, doc, NULL}
static PyGetSetDef PublicationWriter_getset[] = {
    GS(active_index, "exclusive: index of the partition being appended to"),
    GS(term_id, "exclusive: id of the term being appended to"),
    GS(term_offset, "exclusive: where the next frame goes in that term"),
    GS(term_begin_position, "exclusive: stream position of the start of that term"),
    {"term_length", (getter)PublicationWriter_get_term_length, NULL, "length of each term", NULL},
    {NULL}
};

static PyMethodDef PublicationWriter_methods[] = {
    {"offer", (PyCFunction)(void (*)(void))PublicationWriter_offer, METH_FASTCALL,
     "offer(buffer, offset=0, length=None): new position, -3, -5, or 0 (nothing written: use the Python path)."},
    {NULL}
};

static PyTypeObject PublicationWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._atomic.PublicationWriter",
    .tp_basicsize = sizeof(PublicationWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One call for a publication's offer of a message that fits one frame.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PublicationWriter_init,
    .tp_dealloc = (destructor)PublicationWriter_dealloc,
    .tp_methods = PublicationWriter_methods,
    .tp_getset = PublicationWriter_getset,
};

/* ---- watches: many shared-memory positions checked in one call ---- */

/* FrameWatch(entries): entry = (counter: AtomicBuffer, offset: int, terms: tuple of 3 AtomicBuffer,
 * position_bits: int, term_mask: int). ready() -> indices of the entries with a frame committed at the
 * position held in (counter, offset): a subscriber's next fragment, a sender's next frame to send.
 * Entries are checked once, when the watch is made, so a scan over hundreds of idle images or
 * publications costs a few nanoseconds each. A released buffer (closed under us) is skipped. */

typedef struct {
    AtomicBuffer *counter;
    Py_ssize_t offset;
    AtomicBuffer *terms[3];
    int bits;
    int64_t mask;
} FrameEntry;

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    FrameEntry *entries;
} FrameWatch;

static void
FrameWatch_clear_entries(FrameWatch *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++) {
        Py_XDECREF(self->entries[i].counter);
        for (int t = 0; t < 3; t++) Py_XDECREF(self->entries[i].terms[t]);
    }
    PyMem_Free(self->entries);
    self->entries = NULL;
    self->count = 0;
}

static int
FrameWatch_init(FrameWatch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entries", NULL};
    PyObject *arg;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &arg)) return -1;
    PyObject *seq = PySequence_Fast(arg, "entries must be a sequence of tuples");
    if (!seq) return -1;
    FrameWatch_clear_entries(self);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->entries = PyMem_Calloc(n ? n : 1, sizeof(FrameEntry));
    if (!self->entries) { Py_DECREF(seq); PyErr_NoMemory(); return -1; }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (counter, offset, terms, bits, mask)", i);
            goto fail;
        }
        PyObject *counter = PyTuple_GET_ITEM(entry, 0), *terms = PyTuple_GET_ITEM(entry, 2);
        if (!PyObject_TypeCheck(counter, &AtomicBufferType) || !PyTuple_Check(terms) || PyTuple_GET_SIZE(terms) != 3) {
            PyErr_Format(PyExc_TypeError, "entry %zd must hold an AtomicBuffer and a tuple of 3 terms", i);
            goto fail;
        }
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        long bits = PyLong_AsLong(PyTuple_GET_ITEM(entry, 3));
        long long mask = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 4));
        if ((offset == -1 || bits == -1 || mask == -1) && PyErr_Occurred()) goto fail;
        if (bits < 0 || bits > 62 || mask < 0) {
            PyErr_Format(PyExc_ValueError, "entry %zd: bits must be in [0, 62] and mask >= 0", i);
            goto fail;
        }
        if (check((AtomicBuffer *)counter, offset, 8, 1) < 0) goto fail;
        FrameEntry *e = &self->entries[i];
        for (int t = 0; t < 3; t++) {
            PyObject *term = PyTuple_GET_ITEM(terms, t);
            if (!PyObject_TypeCheck(term, &AtomicBufferType)) {
                PyErr_Format(PyExc_TypeError, "entry %zd: terms must be AtomicBuffers", i);
                goto fail;
            }
            Py_INCREF(term);
            e->terms[t] = (AtomicBuffer *)term;
        }
        Py_INCREF(counter);
        e->counter = (AtomicBuffer *)counter;
        e->offset = offset;
        e->bits = (int)bits;
        e->mask = mask;
    }
    self->count = n;
    Py_DECREF(seq);
    return 0;
fail:
    self->count = n;  /* unset slots are NULL: cleared with Py_XDECREF */
    FrameWatch_clear_entries(self);
    Py_DECREF(seq);
    return -1;
}

static void
FrameWatch_dealloc(FrameWatch *self)
{
    FrameWatch_clear_entries(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
FrameWatch_ready(FrameWatch *self, PyObject *unused)
{
    PyObject *ready = PyList_New(0);
    if (!ready) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        FrameEntry *e = &self->entries[i];
        if (!e->counter->has_view) continue;
        int64_t position = __atomic_load_n((int64_t *)(e->counter->base + e->offset), __ATOMIC_ACQUIRE);
        if (position < 0) continue;
        AtomicBuffer *term = e->terms[(position >> e->bits) % 3];
        Py_ssize_t term_offset = (Py_ssize_t)(position & e->mask);
        if (!term->has_view || term_offset > term->capacity - 4) continue;
        if (__atomic_load_n((int32_t *)(term->base + term_offset), __ATOMIC_ACQUIRE) > 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(ready, index) < 0) { Py_XDECREF(index); Py_DECREF(ready); return NULL; }
            Py_DECREF(index);
        }
    }
    return ready;
}

static Py_ssize_t
FrameWatch_len(FrameWatch *self)
{
    return self->count;
}

static PyMethodDef FrameWatch_methods[] = {
    {"ready", (PyCFunction)FrameWatch_ready, METH_NOARGS,
     "Indices of the entries with a frame committed (length > 0) at their position."},
    {NULL}
};

static PySequenceMethods FrameWatch_as_sequence = {.sq_length = (lenfunc)FrameWatch_len};

static PyTypeObject FrameWatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._atomic.FrameWatch",
    .tp_basicsize = sizeof(FrameWatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Positions over terms, checked for a committed frame in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FrameWatch_init,
    .tp_dealloc = (destructor)FrameWatch_dealloc,
    .tp_methods = FrameWatch_methods,
    .tp_as_sequence = &FrameWatch_as_sequence,
};

/* PositionWatch(entries): entry = (buffer: AtomicBuffer, offset: int) holding an int64 (a position
 * counter). changed() -> indices whose value differs from the last look (the values when the watch
 * was made, then those seen by each changed()). A released buffer is skipped. */

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    AtomicBuffer **buffers;
    Py_ssize_t *offsets;
    int64_t *last;
} PositionWatch;

static void
PositionWatch_clear_entries(PositionWatch *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++) Py_XDECREF(self->buffers ? self->buffers[i] : NULL);
    PyMem_Free(self->buffers);
    PyMem_Free(self->offsets);
    PyMem_Free(self->last);
    self->buffers = NULL;
    self->offsets = NULL;
    self->last = NULL;
    self->count = 0;
}

static int
PositionWatch_init(PositionWatch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entries", NULL};
    PyObject *arg;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &arg)) return -1;
    PyObject *seq = PySequence_Fast(arg, "entries must be a sequence of (AtomicBuffer, offset)");
    if (!seq) return -1;
    PositionWatch_clear_entries(self);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t alloc = n ? n : 1;
    self->buffers = PyMem_Calloc(alloc, sizeof(AtomicBuffer *));
    self->offsets = PyMem_Calloc(alloc, sizeof(Py_ssize_t));
    self->last = PyMem_Calloc(alloc, sizeof(int64_t));
    if (!self->buffers || !self->offsets || !self->last) {
        self->count = 0;
        PositionWatch_clear_entries(self);
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(entry, 0), &AtomicBufferType)) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (AtomicBuffer, offset)", i);
            goto fail;
        }
        AtomicBuffer *buffer = (AtomicBuffer *)PyTuple_GET_ITEM(entry, 0);
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        if (offset == -1 && PyErr_Occurred()) goto fail;
        if (check(buffer, offset, 8, 1) < 0) goto fail;
        Py_INCREF(buffer);
        self->buffers[i] = buffer;
        self->offsets[i] = offset;
        self->last[i] = __atomic_load_n((int64_t *)(buffer->base + offset), __ATOMIC_ACQUIRE);
    }
    self->count = n;
    Py_DECREF(seq);
    return 0;
fail:
    self->count = n;
    PositionWatch_clear_entries(self);
    Py_DECREF(seq);
    return -1;
}

static void
PositionWatch_dealloc(PositionWatch *self)
{
    PositionWatch_clear_entries(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
PositionWatch_changed(PositionWatch *self, PyObject *unused)
{
    PyObject *changed = PyList_New(0);
    if (!changed) return NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        AtomicBuffer *buffer = self->buffers[i];
        if (!buffer->has_view) continue;
        int64_t value = __atomic_load_n((int64_t *)(buffer->base + self->offsets[i]), __ATOMIC_ACQUIRE);
        if (value != self->last[i]) {
            self->last[i] = value;
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index || PyList_Append(changed, index) < 0) { Py_XDECREF(index); Py_DECREF(changed); return NULL; }
            Py_DECREF(index);
        }
    }
    return changed;
}

static Py_ssize_t
PositionWatch_len(PositionWatch *self)
{
    return self->count;
}

static PyMethodDef PositionWatch_methods[] = {
    {"changed", (PyCFunction)PositionWatch_changed, METH_NOARGS,
     "Indices whose value changed since the last look (which they now remember)."},
    {NULL}
};

static PySequenceMethods PositionWatch_as_sequence = {.sq_length = (lenfunc)PositionWatch_len};

static PyTypeObject PositionWatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._atomic.PositionWatch",
    .tp_basicsize = sizeof(PositionWatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Position counters, checked for a change in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PositionWatch_init,
    .tp_dealloc = (destructor)PositionWatch_dealloc,
    .tp_methods = PositionWatch_methods,
    .tp_as_sequence = &PositionWatch_as_sequence,
};

static PyMethodDef module_methods[] = {
    {"fence", fence, METH_NOARGS, "A full memory fence."},
    {"validate_data_datagram", (PyCFunction)(void (*)(void))validate_data_datagram, METH_FASTCALL,
     "Check a DATA/PAD datagram; bytes of term covered, or a negative reason code."},
    {"frames_length", (PyCFunction)(void (*)(void))frames_length, METH_FASTCALL,
     "Total aligned length of the frames of a batch of messages; ValueError if one exceeds max payload."},
    {"deadlines_due", (PyCFunction)(void (*)(void))deadlines_due, METH_FASTCALL,
     "Indices of the int64 deadlines that are <= now_ns."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_atomic", "Atomic operations over shared buffers.", -1, module_methods
};

PyMODINIT_FUNC
PyInit__atomic(void)
{
    str_offset = PyUnicode_InternFromString("offset");
    if (!str_offset) return NULL;
    if (PyType_Ready(&AtomicBufferType) < 0 || PyType_Ready(&PublicationWriterType) < 0 ||
        PyType_Ready(&FrameWatchType) < 0 || PyType_Ready(&PositionWatchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "AtomicBuffer", (PyObject *)&AtomicBufferType) < 0 ||
        PyModule_AddObjectRef(m, "PublicationWriter", (PyObject *)&PublicationWriterType) < 0 ||
        PyModule_AddObjectRef(m, "FrameWatch", (PyObject *)&FrameWatchType) < 0 ||
        PyModule_AddObjectRef(m, "PositionWatch", (PyObject *)&PositionWatchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
