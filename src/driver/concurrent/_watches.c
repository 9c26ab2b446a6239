/*
 * Watches: many shared-memory positions (or deadlines) checked in one call.
 *
 * An agent or a poller with hundreds of idle images, publications or timers
 * would spend most of its time in a Python call per entry only to learn that
 * nothing happened; these find the few entries that need it. FrameWatch finds
 * a committed frame at a position, PositionWatch a position that moved, and
 * deadlines_due the deadlines that have passed.
 */
#include "_atomic_buffer.h"

/* ---- watches: many shared-memory positions checked in one call ---- */

/* FrameWatch(entries): entry = (counter: AtomicBuffer, offset: int, terms: tuple of 3 AtomicBuffer,
 * position_bits: int, term_mask: int). ready() -> indices of the entries with a frame committed at the
 * position held in (counter, offset): a subscriber's next fragment, a sender's next frame to send.
 * Entries are checked once, when the watch is made or extended, so a scan over hundreds of idle images or
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

/* Append ``arg``'s entries after those held; on error nothing is added. */
static int
FrameWatch_append(FrameWatch *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "entries must be a sequence of tuples");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t total = self->count + n;
    FrameEntry *entries = PyMem_Realloc(self->entries, (total ? total : 1) * sizeof(FrameEntry));
    if (!entries) { Py_DECREF(seq); PyErr_NoMemory(); return -1; }
    self->entries = entries;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t base = self->count, i;
    for (i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 5) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (counter, offset, terms, bits, mask)", i);
            goto fail;
        }
        PyObject *counter = PyTuple_GET_ITEM(entry, 0), *terms = PyTuple_GET_ITEM(entry, 2);
        if (!PyObject_TypeCheck(counter, AtomicBuffer_Type) || !PyTuple_Check(terms) || PyTuple_GET_SIZE(terms) != 3) {
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
        if (buffer_check((AtomicBuffer *)counter, offset, 8, 1) < 0) goto fail;
        for (int t = 0; t < 3; t++) {
            if (!PyObject_TypeCheck(PyTuple_GET_ITEM(terms, t), AtomicBuffer_Type)) {
                PyErr_Format(PyExc_TypeError, "entry %zd: terms must be AtomicBuffers", i);
                goto fail;
            }
        }
        FrameEntry *e = &self->entries[base + i];
        for (int t = 0; t < 3; t++) {
            PyObject *term = PyTuple_GET_ITEM(terms, t);
            Py_INCREF(term);
            e->terms[t] = (AtomicBuffer *)term;
        }
        Py_INCREF(counter);
        e->counter = (AtomicBuffer *)counter;
        e->offset = offset;
        e->bits = (int)bits;
        e->mask = mask;
    }
    self->count = total;
    Py_DECREF(seq);
    return 0;
fail:
    while (i-- > 0) { /* the entries taken before the bad one */
        FrameEntry *e = &self->entries[base + i];
        Py_DECREF(e->counter);
        for (int t = 0; t < 3; t++) Py_DECREF(e->terms[t]);
    }
    Py_DECREF(seq);
    return -1;
}

static int
FrameWatch_init(FrameWatch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entries", NULL};
    PyObject *arg;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &arg)) return -1;
    FrameWatch_clear_entries(self);
    return FrameWatch_append(self, arg);
}

static PyObject *
FrameWatch_extend(FrameWatch *self, PyObject *arg)
{
    if (FrameWatch_append(self, arg) < 0) return NULL;
    Py_RETURN_NONE;
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
    {"extend", (PyCFunction)FrameWatch_extend, METH_O,
     "Watch these entries too, after those held (their indices follow on)."},
    {NULL}
};

static PySequenceMethods FrameWatch_as_sequence = {.sq_length = (lenfunc)FrameWatch_len};

static PyTypeObject FrameWatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._watches.FrameWatch",
    .tp_basicsize = sizeof(FrameWatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Positions over terms, checked for a committed frame in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FrameWatch_init,
    .tp_dealloc = (destructor)FrameWatch_dealloc,
    .tp_methods = FrameWatch_methods,
    .tp_as_sequence = &FrameWatch_as_sequence,
};

/* PositionWatch(entries): entry = (buffer: AtomicBuffer, offset: int[, step: int]) holding an int64 (a
 * position counter). changed() -> indices whose value differs from the last look (the values when the
 * watch was made, then those seen by each changed()); an entry with a step > 1 shows only once its value
 * has grown by at least step since it last showed (or fell): a conductor that moves a publisher limit
 * a window ahead of a sender position need not look at every message sent. A released buffer is
 * skipped. */

typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    AtomicBuffer **buffers;
    Py_ssize_t *offsets;
    int64_t *last;
    int64_t *steps;
} PositionWatch;

static void
PositionWatch_clear_entries(PositionWatch *self)
{
    for (Py_ssize_t i = 0; i < self->count; i++) Py_XDECREF(self->buffers ? self->buffers[i] : NULL);
    PyMem_Free(self->buffers);
    PyMem_Free(self->offsets);
    PyMem_Free(self->last);
    PyMem_Free(self->steps);
    self->buffers = NULL;
    self->offsets = NULL;
    self->last = NULL;
    self->steps = NULL;
    self->count = 0;
}

/* Append ``arg``'s entries (each remembering its value now) after those held; on error nothing is added. */
static int
PositionWatch_append(PositionWatch *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "entries must be a sequence of (AtomicBuffer, offset[, step])");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t total = self->count + n;
    Py_ssize_t alloc = total ? total : 1;
    AtomicBuffer **buffers = PyMem_Realloc(self->buffers, alloc * sizeof(AtomicBuffer *));
    if (buffers) self->buffers = buffers;
    Py_ssize_t *offsets = PyMem_Realloc(self->offsets, alloc * sizeof(Py_ssize_t));
    if (offsets) self->offsets = offsets;
    int64_t *last = PyMem_Realloc(self->last, alloc * sizeof(int64_t));
    if (last) self->last = last;
    int64_t *steps = PyMem_Realloc(self->steps, alloc * sizeof(int64_t));
    if (steps) self->steps = steps;
    if (!buffers || !offsets || !last || !steps) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t base = self->count, i;
    for (i = 0; i < n; i++) {
        PyObject *entry = items[i];
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2 || PyTuple_GET_SIZE(entry) > 3 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(entry, 0), AtomicBuffer_Type)) {
            PyErr_Format(PyExc_TypeError, "entry %zd must be (AtomicBuffer, offset[, step])", i);
            goto fail;
        }
        AtomicBuffer *buffer = (AtomicBuffer *)PyTuple_GET_ITEM(entry, 0);
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
        if (offset == -1 && PyErr_Occurred()) goto fail;
        long long step = 1;
        if (PyTuple_GET_SIZE(entry) == 3) {
            step = PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 2));
            if (step == -1 && PyErr_Occurred()) goto fail;
            if (step < 1) {
                PyErr_Format(PyExc_ValueError, "entry %zd: step %lld must be at least 1", i, step);
                goto fail;
            }
        }
        if (buffer_check(buffer, offset, 8, 1) < 0) goto fail;
        Py_INCREF(buffer);
        self->buffers[base + i] = buffer;
        self->offsets[base + i] = offset;
        self->steps[base + i] = step;
        self->last[base + i] = __atomic_load_n((int64_t *)(buffer->base + offset), __ATOMIC_ACQUIRE);
    }
    self->count = total;
    Py_DECREF(seq);
    return 0;
fail:
    while (i-- > 0) /* the entries taken before the bad one */
        Py_DECREF(self->buffers[base + i]);
    Py_DECREF(seq);
    return -1;
}

static int
PositionWatch_init(PositionWatch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"entries", NULL};
    PyObject *arg;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &arg)) return -1;
    PositionWatch_clear_entries(self);
    return PositionWatch_append(self, arg);
}

static PyObject *
PositionWatch_extend(PositionWatch *self, PyObject *arg)
{
    if (PositionWatch_append(self, arg) < 0) return NULL;
    Py_RETURN_NONE;
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
        int64_t last = self->last[i];
        if (value != last && (value < last || value - last >= self->steps[i])) {
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
     "Indices whose value changed since the last look (by at least their step, or fell), which they now remember."},
    {"extend", (PyCFunction)PositionWatch_extend, METH_O,
     "Watch these entries too, after those held (their indices follow on), each from its value now."},
    {NULL}
};

static PySequenceMethods PositionWatch_as_sequence = {.sq_length = (lenfunc)PositionWatch_len};

static PyTypeObject PositionWatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.concurrent._watches.PositionWatch",
    .tp_basicsize = sizeof(PositionWatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Position counters, checked for a change in one call.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)PositionWatch_init,
    .tp_dealloc = (destructor)PositionWatch_dealloc,
    .tp_methods = PositionWatch_methods,
    .tp_as_sequence = &PositionWatch_as_sequence,
};

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

static PyMethodDef module_methods[] = {
    {"deadlines_due", (PyCFunction)(void (*)(void))deadlines_due, METH_FASTCALL,
     "Indices of the int64 deadlines that are <= now_ns."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_watches", "Many positions or deadlines checked in one call.", -1, module_methods
};

PyMODINIT_FUNC
PyInit__watches(void)
{
    if (import_atomic_buffer() < 0) return NULL;
    if (PyType_Ready(&FrameWatchType) < 0 || PyType_Ready(&PositionWatchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "FrameWatch", (PyObject *)&FrameWatchType) < 0 ||
        PyModule_AddObjectRef(m, "PositionWatch", (PyObject *)&PositionWatchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
