/*
 * Frames in a term: the hot loops of driver.logbuffer in one native call each.
 *
 * Writing (write_frame, write_frames, frames_length, and PublicationWriter, the
 * single-message offer that accelerates driver.logbuffer.appender), scanning
 * (scan_for_availability for the sender, scan_frames and read_fragments for the
 * subscriber, first_gap for the loss detector) and the receiver's insert_packet.
 * Each function takes the term's AtomicBuffer first; the layouts and orders are
 * those the Python modules of driver.logbuffer describe.
 */
#include "../concurrent/_atomic_buffer.h"
#include "_rebuild.h"

/* ---- frames committed by this process ----
 * Every call that commits frames (or padding) to a log adds one, after the last length is stored (release):
 * a reader that loads the count (acquire) and then looks at a log sees every frame counted so far. A sender
 * whose driver has only clients of this process compares the count with the one it read before its last look
 * that found nothing, instead of looking at every publication's log again (see driver.local_clients). */
static int64_t frames_committed_count;

static inline void
note_frame_committed(void)
{
    __atomic_fetch_add(&frames_committed_count, 1, __ATOMIC_RELEASE);
}

/* ---- data frames ----
 * Aeron's write order for one frame: word 0 (version/flags/type | -length) with a
 * release store, a store fence, header words 1 and 2, the payload, and finally the
 * release store of the positive length that hands the frame to readers. vft is the
 * high 32 bits of word 0 already shifted; session_word = session_id << 32;
 * stream_word = stream_id | term_id << 32.
 */
static inline void
put_frame(char *base, Py_ssize_t off, int64_t vft, int64_t session_word, int64_t stream_word,
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
term_write_frame(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* write_frame(term, frame_offset, vft, session_word, stream_word, src, src_offset, length) */
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
    if ((index & 31) != 0 || buffer_check(self, index, ((length + 32 + 31) & ~(Py_ssize_t)31), 0) < 0) {
        PyBuffer_Release(&src);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "frame offset %zd is not 32-byte aligned", index);
        return NULL;
    }
    put_frame(self->base, index, vft, session_word, stream_word, (const char *)src.buf + src_offset, length);
    note_frame_committed();
    PyBuffer_Release(&src);
    Py_RETURN_NONE;
}

static PyObject *
term_write_frames(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* write_frames(term, frame_offset, vft, session_word, stream_word, messages) -> end offset.
     * Each message (any contiguous buffer) becomes one unfragmented frame; the space
     * must already be reserved (see frames_length). */
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
    PyObject *result = NULL;
    Py_ssize_t i = 0;
    for (; i < n; i++) {
        Py_buffer src;
        if (PyObject_GetBuffer(items[i], &src, PyBUF_C_CONTIGUOUS) < 0) goto out;
        Py_ssize_t aligned = (src.len + 32 + 31) & ~(Py_ssize_t)31;
        if (buffer_check(self, off, aligned, 0) < 0) { PyBuffer_Release(&src); goto out; }
        put_frame(self->base, off, vft, session_word, stream_word, (const char *)src.buf, src.len);
        PyBuffer_Release(&src);
        off += aligned;
    }
    result = PyLong_FromSsize_t(off);
out:
    if (i > 0)
        note_frame_committed(); /* once for the frames written: after the last one's length */
    Py_DECREF(seq);
    return result;
}

/* ---- term scans (sender and receiver hot loops) ---- */

static PyObject *
term_scan_for_availability(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* scan_for_availability(term, offset, max_length) -> (available, padding): Aeron's TermScanner.
     * Whole committed frames from offset up to max_length bytes; a PAD ends the scan and
     * counts only its header as available, the rest as padding. */
    ARG_INDEX(0)
    Py_ssize_t max_length = PyLong_AsSsize_t(args[1]);
    if (max_length == -1 && PyErr_Occurred()) return NULL;
    if (buffer_check(self, index, 0, 0) < 0) return NULL;
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
term_scan_frames(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* scan_frames(term, offset, limit) -> (end_offset, [(frame_offset, frame_length, flags), ...]):
     * up to `limit` committed DATA frames from offset (padding is stepped over, not listed),
     * stopping at the first uncommitted frame or the end of the term. The subscriber's hot
     * loop in one call: the caller slices payloads and moves its position to end_offset. */
    ARG_INDEX(0)
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (buffer_check(self, index, 0, 0) < 0) return NULL;
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
term_scan_for_gap(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* first_gap(term, rebuild_offset, limit_offset) -> (gap_begin, gap_length): Aeron's
     * TermGapScanner. gap_length is 0 when there is no gap before limit_offset. */
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
term_insert_packet(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* insert_packet(term, term_offset, packet, length) -> bool: Aeron's TermRebuilder. If the
     * slot is empty, copy bytes [8, length) then release-store the first 8 bytes last. */
    ARG_INDEX(0)
    Py_ssize_t length = PyLong_AsSsize_t(args[2]);
    if (length == -1 && PyErr_Occurred()) return NULL;
    Py_buffer src;
    if (PyObject_GetBuffer(args[1], &src, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (length < 8 || length > src.len || (index & 7) != 0 || buffer_check(self, index, length, 0) < 0) {
        PyBuffer_Release(&src);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "packet of %zd bytes at %zd does not fit", length, index);
        return NULL;
    }
    int inserted = rebuild_insert(self->base + index, (const char *)src.buf, (size_t)length);
    PyBuffer_Release(&src);
    return PyBool_FromLong(inserted);
}

static PyObject *str_offset;  /* "offset", interned at import */

static PyObject *
term_read_fragments(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* read_fragments(term, offset, fragments_limit, handler, header, view, error_handler) -> (fragments, new_offset):
     * driver.logbuffer.reader.read's loop. For each committed DATA frame from offset: header.offset =
     * frame offset, then handler(view[frame + 32 : frame + length], header); padding is stepped over.
     * An Exception from the handler (or the loop) goes to error_handler, if one is given, and ends the
     * call with the failed fragment consumed; otherwise it propagates. The buffer is checked before every
     * load, as a handler may close the log under the loop. */
    ARG_INDEX(0)
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    PyObject *handler = args[2], *header = args[3], *view = args[4], *error_handler = args[5];
    Py_ssize_t capacity = self->capacity, offset = index, fragments = 0;
    while (fragments < limit && offset < capacity) {
        if (buffer_check(self, offset, 8, 1) < 0) goto error;
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

/* ---- PublicationWriter: the single-message offer in one call ----
 *
 * A publication's offer of a message that fits one frame, as
 * driver.logbuffer.appender.LogAppender.offer writes it (Aeron 1.15.1's order and codes),
 * without a Python frame per step: its accelerator, tested against it byte for byte. The writer keeps references to the AtomicBuffers of the
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
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!inLLLp", kwlist, AtomicBuffer_Type, &limit,
                                     AtomicBuffer_Type, &meta, &PyTuple_Type, &terms, &initial_term_id,
                                     &max_payload, &vft, &session_word, &stream_word, &exclusive))
        return -1;
    if (PyTuple_GET_SIZE(terms) != 3) {
        PyErr_SetString(PyExc_ValueError, "terms must be a tuple of 3 AtomicBuffers");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(terms, i), AtomicBuffer_Type)) {
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
    note_frame_committed();
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
        put_frame(self->terms[index]->base, (Py_ssize_t)term_offset, self->vft, self->session_word,
                    self->stream_word | (int64_t)((uint64_t)(uint32_t)term_id << 32), src_base + offset, length);
        note_frame_committed();
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
    put_frame(term, (Py_ssize_t)frame_offset, self->vft, self->session_word,
                self->stream_word | (int64_t)((uint64_t)(uint32_t)term_id << 32), src_base + offset, length);
    note_frame_committed();
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
    .tp_name = "driver.logbuffer._frames.PublicationWriter",
    .tp_basicsize = sizeof(PublicationWriter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One call for a publication's offer of a message that fits one frame.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PublicationWriter_init,
    .tp_dealloc = (destructor)PublicationWriter_dealloc,
    .tp_methods = PublicationWriter_methods,
    .tp_getset = PublicationWriter_getset,
};

/* The term functions: the AtomicBuffer first, then the arguments documented above. */
#define TERM_FUNCTION(NAME, IMPL, WANT)                                                   \
static PyObject *                                                                         \
NAME(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)                              \
{                                                                                         \
    if (!nargs_ok(nargs, WANT, #NAME)) return NULL;                                       \
    if (!PyObject_TypeCheck(args[0], AtomicBuffer_Type)) {                                \
        PyErr_Format(PyExc_TypeError, #NAME "() takes an AtomicBuffer first, not %.100s", \
                     Py_TYPE(args[0])->tp_name);                                          \
        return NULL;                                                                      \
    }                                                                                     \
    return IMPL((AtomicBuffer *)args[0], args + 1, nargs - 1);                            \
}

TERM_FUNCTION(write_frame, term_write_frame, 8)
TERM_FUNCTION(write_frames, term_write_frames, 6)
TERM_FUNCTION(scan_for_availability, term_scan_for_availability, 3)
TERM_FUNCTION(scan_frames, term_scan_frames, 3)
TERM_FUNCTION(first_gap, term_scan_for_gap, 3)
TERM_FUNCTION(insert_packet, term_insert_packet, 4)
TERM_FUNCTION(read_fragments, term_read_fragments, 7)

static PyObject *
frames_committed(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    return PyLong_FromLongLong(__atomic_load_n(&frames_committed_count, __ATOMIC_ACQUIRE));
}

static PyObject *
note_committed(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    note_frame_committed();
    Py_RETURN_NONE;
}

#define F(name, doc) {#name, (PyCFunction)(void (*)(void))name, METH_FASTCALL, doc}
static PyMethodDef module_methods[] = {
    {"frames_committed", frames_committed, METH_NOARGS,
     "Frames this process's writers have committed to logs so far (a count read with acquire ordering)."},
    {"note_committed", note_committed, METH_NOARGS,
     "Count a frame committed by a Python writer (after its length is stored): see frames_committed."},
    F(write_frame, "Write and commit one unfragmented frame in Aeron's order."),
    F(write_frames, "Write and commit one frame per message from a reserved offset; the end offset."),
    F(frames_length, "Total aligned length of the frames of a batch of messages; ValueError if one exceeds max payload."),
    F(scan_for_availability, "(available, padding) bytes a sender may take from an offset (Aeron's TermScanner)."),
    F(scan_frames, "(end offset, [(frame offset, frame length, flags), ...]) of committed DATA frames."),
    F(first_gap, "(gap begin, gap length) of the first gap before a limit (Aeron's TermGapScanner)."),
    F(insert_packet, "Insert a received datagram into an empty slot (Aeron's TermRebuilder); False if filled."),
    F(read_fragments, "(fragments, new offset): deliver committed DATA frames to a handler."),
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_frames", "Frames in a term: writing, the offer, scanning, rebuilding.", -1, module_methods
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    if (import_atomic_buffer() < 0) return NULL;
    str_offset = PyUnicode_InternFromString("offset");
    if (!str_offset) return NULL;
    if (PyType_Ready(&PublicationWriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "PublicationWriter", (PyObject *)&PublicationWriterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
