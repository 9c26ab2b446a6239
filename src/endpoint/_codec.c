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

/* Where the body of a typed message starts in p[0:n] and its type id, if p holds one whole ext8/ext16 header of ours
 * and a type id up to 0xFFFF: 1; else 0 (the slow path decides what it is). */
static inline int parse_typed(const unsigned char *p, Py_ssize_t n, Py_ssize_t *start_out, long *tag_out) {
    Py_ssize_t start;
    long tag;
    if (n >= 4 && p[0] == 0xC7 && p[2] == ATTRS_EXT && (Py_ssize_t)p[1] + 3 == n) {
        start = 3;
    } else if (n >= 5 && p[0] == 0xC8 && p[3] == ATTRS_EXT && (Py_ssize_t)((p[1] << 8) | p[2]) + 4 == n) {
        start = 4;
    } else {
        return 0;
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
        return 0;
    }
    *start_out = start;
    *tag_out = tag;
    return 1;
}

/* The decoder of a type id (borrowed), or NULL: with an error set if the lookup failed, without if none is known. */
static inline PyObject *decoder_of(Codec *self, long tag) {
    PyObject *key = PyLong_FromLong(tag);
    if (key == NULL) {
        return NULL;
    }
    PyObject *decode = PyDict_GetItemWithError(self->decoders, key);
    Py_DECREF(key);
    return decode;
}

static PyObject *Codec_decode(Codec *self, PyObject *data) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return PyObject_CallOneArg(self->slow_decode, data);
    }
    Py_ssize_t n = view.len;
    Py_ssize_t start;
    long tag;
    int typed = parse_typed((const unsigned char *)view.buf, n, &start, &tag);
    PyBuffer_Release(&view);
    if (!typed) {
        return PyObject_CallOneArg(self->slow_decode, data);
    }
    PyObject *decode = decoder_of(self, tag);
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
}

/* Hand the exception being raised to on_error(exc); NULL only if on_error itself failed. */
static int report_error(PyObject *on_error) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    PyObject *handled = PyObject_CallOneArg(on_error, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (handled == NULL) {
        return -1;
    }
    Py_DECREF(handled);
    return 0;
}

/* Whether core.closed_by_peer is true (-1: the attribute could not be read). */
static int closed_by_peer(PyObject *core) {
    PyObject *closed = PyObject_GetAttrString(core, "closed_by_peer");
    if (closed == NULL) {
        return -1;
    }
    int truth = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    return truth;
}

/* dispatch(view, frames, resolved, inbox, connection, on_frame, on_decoded, on_result, on_error, core): one poll's
 * fragments of an unsealed connection, the common case without a Python frame.
 *
 * frames are (frame offset, frame length, flags) of committed DATA frames in the term view (driver.logbuffer's
 * scan_frames). A whole fragment holding a typed message of ours is decoded here, as decode would; if the
 * listener manager's cache (resolved: class -> (listeners, any async)) has only sync listeners for its class and
 * nothing waits in the connection's inbox, each listener(connection, message) is called here: an exception goes
 * to on_error(exc), a result other than None to on_result(message, result). Any other decoded message goes to
 * on_decoded(message, length) (the core's checks and routing), and every other fragment (fragmented, a chunk,
 * newest-wins or session frame, anything that does not decode here) to on_frame(payload, flags), today's path,
 * which then also says what was wrong. Once the core read the peer's Disconnect, the rest goes to on_frame too. */
static PyObject *Codec_dispatch(Codec *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "dispatch takes 10 arguments");
        return NULL;
    }
    PyObject *view = args[0], *frames = args[1], *resolved = args[2], *inbox = args[3], *connection = args[4];
    PyObject *on_frame = args[5], *on_decoded = args[6], *on_result = args[7], *on_error = args[8], *core = args[9];
    if (!PyList_Check(frames) || !PyDict_Check(resolved)) {
        PyErr_SetString(PyExc_TypeError, "dispatch: frames must be a list and resolved a dict");
        return NULL;
    }
    /* The view's buffer is held only while a header is read, never across a call: a handler may release it. */
    Py_buffer term;
    int fast = 1;
    Py_ssize_t count = PyList_GET_SIZE(frames);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *frame = PyList_GET_ITEM(frames, i);
        if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 3) {
            PyErr_SetString(PyExc_TypeError, "dispatch: a frame must be (offset, length, flags)");
            goto error;
        }
        Py_ssize_t offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(frame, 0));
        Py_ssize_t length = PyLong_AsSsize_t(PyTuple_GET_ITEM(frame, 1));
        long flags = PyLong_AsLong(PyTuple_GET_ITEM(frame, 2));
        if (PyErr_Occurred()) {
            goto error;
        }
        Py_ssize_t begin = offset + 32, end = offset + length;
        Py_ssize_t start;
        long tag;
        int typed = 0;
        if (fast && (flags & 0xC0) == 0xC0) {
            if (PyObject_GetBuffer(view, &term, PyBUF_SIMPLE) < 0) {
                goto error;
            }
            if (offset < 0 || begin > end || end > term.len) {
                PyBuffer_Release(&term);
                PyErr_SetString(PyExc_ValueError, "dispatch: a frame outside the term");
                goto error;
            }
            typed = parse_typed((const unsigned char *)term.buf + begin, end - begin, &start, &tag);
            PyBuffer_Release(&term);
        }
        PyObject *message = NULL;
        if (typed) {
            PyObject *decode = decoder_of(self, tag);
            if (decode == NULL && PyErr_Occurred()) {
                goto error;
            }
            if (decode != NULL) {
                Py_INCREF(decode);
                PyObject *rest = PySequence_GetSlice(view, begin + start, end);
                message = rest ? PyObject_CallOneArg(decode, rest) : NULL;
                Py_XDECREF(rest);
                Py_DECREF(decode);
                if (message == NULL) {
                    PyErr_Clear(); /* today's path decodes it again and says what is wrong */
                }
            }
        }
        if (message == NULL) {
            PyObject *payload = PySequence_GetSlice(view, begin, end);
            if (payload == NULL) {
                goto error;
            }
            PyObject *flags_object = PyTuple_GET_ITEM(frame, 2);
            PyObject *call_args[2] = {payload, flags_object};
            PyObject *result = PyObject_Vectorcall(on_frame, call_args, 2, NULL);
            Py_DECREF(payload);
            if (result == NULL) {
                if (report_error(on_error) < 0) {
                    goto error;
                }
            } else {
                Py_DECREF(result);
            }
            if (fast) {
                int closed = closed_by_peer(core);
                if (closed < 0) {
                    goto error;
                }
                fast = !closed;
            }
            continue;
        }
        PyObject *entry = PyDict_GetItemWithError(resolved, (PyObject *)Py_TYPE(message));
        if (entry == NULL && PyErr_Occurred()) {
            Py_DECREF(message);
            goto error;
        }
        Py_ssize_t waiting = 0;
        if (entry != NULL && PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2 &&
            PyTuple_GET_ITEM(entry, 1) == Py_False && PyTuple_Check(PyTuple_GET_ITEM(entry, 0)) &&
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(entry, 0)) > 0) {
            waiting = PyObject_Size(inbox);
            if (waiting < 0) {
                Py_DECREF(message);
                goto error;
            }
        } else {
            entry = NULL;
        }
        if (entry == NULL || waiting > 0) {
            PyObject *size = PyLong_FromSsize_t(end - begin);
            PyObject *result = NULL;
            if (size != NULL) {
                PyObject *call_args[2] = {message, size};
                result = PyObject_Vectorcall(on_decoded, call_args, 2, NULL);
                Py_DECREF(size);
            }
            Py_DECREF(message);
            if (result == NULL) {
                if (report_error(on_error) < 0) {
                    goto error;
                }
            } else {
                Py_DECREF(result);
            }
            int closed = closed_by_peer(core);
            if (closed < 0) {
                goto error;
            }
            fast = !closed;
            continue;
        }
        PyObject *listeners = PyTuple_GET_ITEM(entry, 0);
        Py_INCREF(listeners); /* a listener may change the listeners (and drop the cache) */
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(listeners); j++) {
            PyObject *call_args[2] = {connection, message};
            PyObject *result = PyObject_Vectorcall(PyTuple_GET_ITEM(listeners, j), call_args, 2, NULL);
            if (result == NULL) {
                if (report_error(on_error) < 0) {
                    Py_DECREF(listeners);
                    Py_DECREF(message);
                    goto error;
                }
                continue;
            }
            if (result != Py_None) {
                PyObject *more[2] = {message, result};
                PyObject *handled = PyObject_Vectorcall(on_result, more, 2, NULL);
                Py_DECREF(result);
                if (handled == NULL) {
                    Py_DECREF(listeners);
                    Py_DECREF(message);
                    goto error;
                }
                Py_DECREF(handled);
            } else {
                Py_DECREF(result);
            }
        }
        Py_DECREF(listeners);
        Py_DECREF(message);
    }
    Py_RETURN_NONE;
error:
    return NULL;
}

static PyMethodDef Codec_methods[] = {
    {"encode", (PyCFunction)Codec_encode, METH_O, "One message to msgpack bytes."},
    {"decode", (PyCFunction)Codec_decode, METH_O, "One message from a bytes-like object."},
    {"dispatch", (PyCFunction)(void (*)(void))Codec_dispatch, METH_FASTCALL,
     "One poll's fragments of an unsealed connection: typed messages decoded and handed to sync listeners here."},
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
