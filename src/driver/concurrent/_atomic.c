/*
 * AtomicBuffer: typed, bounds-checked access to a writable buffer (usually an
 * mmap shared between processes) with the memory-ordering operations the
 * Aeron layouts need: acquire loads, release stores, fetch-add and CAS.
 *
 * Python has no portable way to do an atomic read-modify-write on shared
 * memory, and a C method call is cheaper than struct.unpack_from for the plain
 * reads and writes too. The hot loops over these buffers live beside the Python
 * they stand in for: frames in driver.logbuffer._frames, watches over many
 * positions in driver.concurrent._watches, datagram checks in
 * driver.wire._datagrams.
 */
#define DRIVER_ATOMIC_BUFFER_DEFINED_HERE
#include "_atomic_buffer.h"

static PyTypeObject AtomicBufferType;

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

/* ---- loads ---- */
#define DEF_GET(NAME, CTYPE, ORDER, ALIGNED, CONV)                                   \
static PyObject *                                                                    \
AtomicBuffer_##NAME(AtomicBuffer *self, PyObject *const *args, Py_ssize_t nargs)     \
{                                                                                    \
    if (!nargs_ok(nargs, 1, #NAME)) return NULL;                                     \
    ARG_INDEX(0)                                                                     \
    if (buffer_check(self, index, sizeof(CTYPE), ALIGNED) < 0) return NULL;                 \
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
    if (buffer_check(self, index, sizeof(CTYPE), ALIGNED) < 0) return NULL;                 \
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
    if (buffer_check(self, index, sizeof(CTYPE), 1) < 0) return NULL;                      \
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
    if (buffer_check(self, index, sizeof(CTYPE), 1) < 0) return NULL;                      \
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
    if (buffer_check(self, index, length, 0) < 0) { PyBuffer_Release(&src); return NULL; }
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
    if (buffer_check(self, index, length, 0) < 0) return NULL;
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
    if (buffer_check(self, index, length, 0) < 0) return NULL;
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
    if (buffer_check(self, index, length, 0) < 0) return NULL;
    return PyMemoryView_FromMemory(self->base + index, length, PyBUF_WRITE);
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
    M(put_bytes), M(get_bytes), M(set_memory), M(view),
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
    if (PyModule_AddObjectRef(m, "AtomicBuffer", (PyObject *)&AtomicBufferType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
