/* The common case of the end points' message codec without a Python frame: a registered message of a typed class.
 *
 * A Codec holds what endpoint.serialization made for it: a dict of typed classes to their type id's msgpack
 * bytes, msgspec's encoder, a dict of type ids to decoders, the Python encode and decode to fall back on for
 * everything else, and the error class. encode(message) writes the ext header, the type id and msgspec's body in
 * one allocation; decode(data) reads an ext8/ext16 header and the type id, and hands the rest (a slice: bytes
 * copied, a memoryview shared) to the class's decoder. Anything else, and every failure, goes to Python, so
 * the rules and the error messages live in one place.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define ATTRS_EXT 1

typedef struct {
    PyObject_HEAD
    PyObject *typed;     /* dict: class -> bytes (the type id as msgpack) */
    PyObject *encode;    /* msgspec Encoder.encode */
    PyObject *decoders;  /* dict: int type id -> decode(buffer) */
    PyObject *slow_encode;
    PyObject *slow_decode;
    PyObject *error;     /* SerializationError */
} Codec;

static int Codec_traverse(Codec *self, visitproc visit, void *arg) {
    Py_VISIT(self->typed);
    Py_VISIT(self->encode);
    Py_VISIT(self->decoders);
    Py_VISIT(self->slow_encode);
    Py_VISIT(self->slow_decode);
    Py_VISIT(self->error);
    return 0;
}

static int Codec_clear(Codec *self) {
    Py_CLEAR(self->typed);
    Py_CLEAR(self->encode);
    Py_CLEAR(self->decoders);
    Py_CLEAR(self->slow_encode);
    Py_CLEAR(self->slow_decode);
    Py_CLEAR(self->error);
    return 0;
}

static void Codec_dealloc(Codec *self) {
    PyObject_GC_UnTrack(self);
    Codec_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Codec_init(Codec *self, PyObject *args, PyObject *kwds) {
    PyObject *typed, *encode, *decoders, *slow_encode, *slow_decode, *error;
    if (!PyArg_ParseTuple(args, "O!OO!OOO:Codec", &PyDict_Type, &typed, &encode, &PyDict_Type, &decoders,
                          &slow_encode, &slow_decode, &error)) {
        return -1;
    }
    Py_INCREF(typed);
    Py_XSETREF(self->typed, typed);
    Py_INCREF(encode);
    Py_XSETREF(self->encode, encode);
    Py_INCREF(decoders);
    Py_XSETREF(self->decoders, decoders);
    Py_INCREF(slow_encode);
    Py_XSETREF(self->slow_encode, slow_encode);
    Py_INCREF(slow_decode);
    Py_XSETREF(self->slow_decode, slow_decode);
    Py_INCREF(error);
    Py_XSETREF(self->error, error);
    return 0;
}

/* Raise the error class with "<prefix>: <type>: <message>", chained to the exception being handled. */
static PyObject *wrap_error(Codec *self, const char *prefix) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && PyObject_IsInstance(value, self->error) == 1) {
        PyErr_Restore(type, value, traceback);
        return NULL;
    }
    PyObject *message = PyUnicode_FromFormat("%s: %s: %S", prefix, type ? ((PyTypeObject *)type)->tp_name : "?",
                                             value ? value : Py_None);
    PyObject *error = message ? PyObject_CallOneArg(self->error, message) : NULL;
    Py_XDECREF(message);
    if (error == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    if (value != NULL) {
        if (traceback != NULL) {
            PyException_SetTraceback(value, traceback);
        }
        PyException_SetCause(error, value); /* steals value */
    }
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    Py_DECREF(error);
    return NULL;
}

static PyObject *Codec_encode(Codec *self, PyObject *message) {
    PyObject *tag = PyDict_GetItemWithError(self->typed, (PyObject *)Py_TYPE(message));
    if (tag == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return PyObject_CallOneArg(self->slow_encode, message);
    }
    /* The encoder, not this function, may drop the last reference to the tag (it never does; be safe). */
    Py_INCREF(tag);
    PyObject *body = PyObject_CallOneArg(self->encode, message);
    if (body == NULL || !PyBytes_Check(body)) {
        Py_DECREF(tag);
        Py_XDECREF(body);
        /* The slow path says what went wrong, with the class's name. */
        PyErr_Clear();
        return PyObject_CallOneArg(self->slow_encode, message);
    }
    Py_ssize_t tag_length = PyBytes_GET_SIZE(tag);
    Py_ssize_t body_length = PyBytes_GET_SIZE(body);
    Py_ssize_t data_length = tag_length + body_length;
    Py_ssize_t header_length;
    unsigned char header[6];
    if (data_length <= 0xFF) {
        header[0] = 0xC7;
        header[1] = (unsigned char)data_length;
        header[2] = ATTRS_EXT;
        header_length = 3;
    } else if (data_length <= 0xFFFF) {
        header[0] = 0xC8;
        header[1] = (unsigned char)(data_length >> 8);
        header[2] = (unsigned char)data_length;
        header[3] = ATTRS_EXT;
        header_length = 4;
    } else if (data_length <= 0xFFFFFFFFLL) {
        header[0] = 0xC9;
        header[1] = (unsigned char)(data_length >> 24);
        header[2] = (unsigned char)(data_length >> 16);
        header[3] = (unsigned char)(data_length >> 8);
        header[4] = (unsigned char)data_length;
        header[5] = ATTRS_EXT;
        header_length = 6;
    } else {
        Py_DECREF(tag);
        Py_DECREF(body);
        return PyObject_CallOneArg(self->slow_encode, message);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, header_length + data_length);
    if (out != NULL) {
        char *p = PyBytes_AS_STRING(out);
        memcpy(p, header, header_length);
        memcpy(p + header_length, PyBytes_AS_STRING(tag), tag_length);
        memcpy(p + header_length + tag_length, PyBytes_AS_STRING(body), body_length);
    }
    Py_DECREF(tag);
    Py_DECREF(body);
    return out;
}

static PyObject *Codec_decode(Codec *self, PyObject *data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return PyObject_CallOneArg(self->slow_decode, data);
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    Py_ssize_t start;
    long tag;
    if (n >= 4 && p[0] == 0xC7 && p[2] == ATTRS_EXT && (Py_ssize_t)p[1] + 3 == n) {
        start = 3;
    } else if (n >= 5 && p[0] == 0xC8 && p[3] == ATTRS_EXT && (Py_ssize_t)((p[1] << 8) | p[2]) + 4 == n) {
        start = 4;
    } else {
        goto slow;
    }
    tag = p[start];
    if (tag < 0x80) {
        start += 1;
    } else if (tag == 0xCD && start + 3 <= n) {
        tag = (p[start + 1] << 8) | p[start + 2];
        start += 3;
    } else if (tag == 0xCC && start + 2 <= n) {
        tag = p[start + 1];
        start += 2;
    } else {
        goto slow;
    }
    PyBuffer_Release(&view);
    PyObject *key = PyLong_FromLong(tag);
    if (key == NULL) {
        return NULL;
    }
    PyObject *decode = PyDict_GetItemWithError(self->decoders, key);
    Py_DECREF(key);
    if (decode == NULL) {
        if (PyErr_Occurred()) {
            return NULL;
        }
        return PyObject_CallOneArg(self->slow_decode, data);
    }
    Py_INCREF(decode);
    PyObject *rest = PySequence_GetSlice(data, start, n);
    if (rest == NULL) {
        Py_DECREF(decode);
        return wrap_error(self, "malformed message");
    }
    PyObject *message = PyObject_CallOneArg(decode, rest);
    Py_DECREF(rest);
    Py_DECREF(decode);
    if (message == NULL) {
        return wrap_error(self, "malformed message");
    }
    return message;
slow:
    PyBuffer_Release(&view);
    return PyObject_CallOneArg(self->slow_decode, data);
}

static PyMethodDef Codec_methods[] = {
    {"encode", (PyCFunction)Codec_encode, METH_O, "One message to msgpack bytes."},
    {"decode", (PyCFunction)Codec_decode, METH_O, "One message from a bytes-like object."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CodecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "endpoint._codec.Codec",
    .tp_basicsize = sizeof(Codec),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Codec(typed, encode, decoders, slow_encode, slow_decode, error): the common case in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Codec_init,
    .tp_dealloc = (destructor)Codec_dealloc,
    .tp_traverse = (traverseproc)Codec_traverse,
    .tp_clear = (inquiry)Codec_clear,
    .tp_methods = Codec_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_codec", "The end points' message codec, common case.", -1, NULL,
};

PyMODINIT_FUNC PyInit__codec(void) {
    if (PyType_Ready(&CodecType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&CodecType);
    if (PyModule_AddObject(m, "Codec", (PyObject *)&CodecType) < 0) {
        Py_DECREF(&CodecType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
