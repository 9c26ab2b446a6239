/*
 * The check every received DATA/PAD datagram passes before it is written into
 * an image: driver.wire.datagram.validate_data_datagram runs this per datagram
 * and walks only a datagram that fails it again, in Python, to say what is
 * wrong. Plain reads of a received buffer: no shared memory here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
nargs_ok(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return 0;
    }
    return 1;
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

static PyMethodDef module_methods[] = {
    {"validate_data_datagram", (PyCFunction)(void (*)(void))validate_data_datagram, METH_FASTCALL,
     "Check a DATA/PAD datagram; bytes of term covered, or a negative reason code."},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_datagrams", "The DATA/PAD datagram check.", -1, module_methods
};

PyMODINIT_FUNC
PyInit__datagrams(void)
{
    return PyModule_Create(&moduledef);
}
