/*
 * AtomicBuffer's layout, shared by the native modules that work on its memory.
 *
 * driver.concurrent._atomic defines the type; driver.logbuffer._frames and
 * driver.concurrent._watches read and write the buffers it wraps, and find the
 * type object at import (import_atomic_buffer), so an AtomicBuffer passed to
 * them is checked to be one. All three are built from this one definition.
 */
#ifndef DRIVER_CONCURRENT_ATOMIC_BUFFER_H
#define DRIVER_CONCURRENT_ATOMIC_BUFFER_H

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

/* 0 if [index, index + size) is inside the buffer (and, when aligned, naturally aligned); else -1 with an error set. */
static inline int
buffer_check(AtomicBuffer *self, Py_ssize_t index, Py_ssize_t size, int aligned)
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

#define ARG_INDEX(i) Py_ssize_t index = PyLong_AsSsize_t(args[i]); \
    if (index == -1 && PyErr_Occurred()) return NULL;

static inline int
nargs_ok(Py_ssize_t nargs, Py_ssize_t want, const char *name)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", name, want, nargs);
        return 0;
    }
    return 1;
}

#ifndef DRIVER_ATOMIC_BUFFER_DEFINED_HERE
/* The type object, found in driver.concurrent._atomic when a module that uses it is imported. */
static PyTypeObject *AtomicBuffer_Type;

static int
import_atomic_buffer(void)
{
    PyObject *module = PyImport_ImportModule("driver.concurrent._atomic");
    if (!module)
        return -1;
    PyObject *type = PyObject_GetAttrString(module, "AtomicBuffer");
    Py_DECREF(module);
    if (!type)
        return -1;
    if (!PyType_Check(type) || ((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)sizeof(AtomicBuffer)) {
        Py_DECREF(type);
        PyErr_SetString(PyExc_ImportError, "driver.concurrent._atomic.AtomicBuffer has another layout: rebuild");
        return -1;
    }
    AtomicBuffer_Type = (PyTypeObject *)type;  /* kept for the life of the process */
    return 0;
}
#endif

#endif
