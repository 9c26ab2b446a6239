/*
 * The check every received DATA/PAD datagram passes before it is written into
 * an image (defined in _data_check.h): driver.wire.datagram.validate_data_datagram
 * runs this per datagram and walks only a datagram that fails it again, in
 * Python, to say what is wrong.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_data_check.h"

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
    long result = length > b.len ? -2 : data_datagram_check((const unsigned char *)b.buf, length, term_length);
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
