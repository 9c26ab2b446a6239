/*
 * The send side's feedback in C: status messages (SMs) that a send endpoint's
 * batched receive applies to its publications without a Python frame.
 *
 * Included by _net.c (it uses CounterRef, same_address and source_address), and
 * kept apart from it: the receive side's images live there, the publications'
 * feedback here.
 *
 * One FeedbackSlot per network publication holds the state an SM changes: the
 * time of its last SM (the conductor's connection timeout reads it), the flow
 * control's state (unicast/max: the furthest position and the time of the last
 * SM; min: a dict of FlowReceiver by receiver id), and where the sender limit
 * and the log's connected flag are. Python's flow control and publication read
 * and write the same fields, so either path may take any SM.
 *
 * The native path takes only the common case and leaves everything else to the
 * Python path, untouched: the SM must be well formed (what classify() accepts),
 * without the SETUP flag, for a publication registered here whose Python side
 * has said the next plain SM changes nothing but times, positions and the limit
 * (``native``: it sends no SETUP; and it has receivers and is not at end of
 * stream, both of which live here, written by Python: a flag the conductor
 * clears while the sender sets another could not be kept in step); with
 * min flow control the receiver must already be known; on a dynamic
 * (control-mode=dynamic) channel the source address must already be a
 * destination (of the publication if it is private, else of the channel), whose
 * time is then refreshed. Nothing is taken before every check has passed.
 */

#define FEEDBACK_SM_LENGTH 36
#define FEEDBACK_SEND_SETUP_FLAG 0x80
#define FEEDBACK_NONE 0          /* a flow control the native path does not know: every SM goes to Python */
#define FEEDBACK_MAX_POSITION 1  /* unicast and max multicast: the fastest receiver sets the limit */
#define FEEDBACK_MIN 2           /* min multicast: the slowest known receiver bounds it */

/* ---- FlowReceiver: one receiver of min multicast flow control ---- */

typedef struct {
    PyObject_HEAD
    long long last_position, limit, time_of_last_sm_ns;
} FlowReceiver;

static PyTypeObject FlowReceiverType;

static int
FlowReceiver_init(FlowReceiver *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"last_position", "limit", "time_of_last_sm_ns", NULL};
    return PyArg_ParseTupleAndKeywords(args, kwds, "LLL", kwlist, &self->last_position, &self->limit,
                                       &self->time_of_last_sm_ns)
               ? 0
               : -1;
}

static PyMemberDef FlowReceiver_members[] = {
    {"last_position", T_LONGLONG, offsetof(FlowReceiver, last_position), 0, "The furthest position it reported."},
    {"limit", T_LONGLONG, offsetof(FlowReceiver, limit), 0, "Its latest SM's position + window."},
    {"time_of_last_sm_ns", T_LONGLONG, offsetof(FlowReceiver, time_of_last_sm_ns), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FlowReceiverType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.FlowReceiver",
    .tp_doc = PyDoc_STR("FlowReceiver(last_position, limit, time_of_last_sm_ns): a receiver min flow control knows."),
    .tp_basicsize = sizeof(FlowReceiver),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FlowReceiver_init,
    .tp_members = FlowReceiver_members,
};

/* ---- FeedbackSlot: what a status message changes in one publication ---- */

typedef struct {
    PyObject_HEAD
    int kind;                  /* FEEDBACK_* */
    int native;                /* set by Python: the next plain SM may be applied here (no SETUP is being sent) */
    int has_receivers;         /* the publication's: a receiver answers (set by Python only) */
    int end_of_stream;         /* the publication's: it is ending (set by Python only) */
    int bound;                 /* bind() gave the publication's identity and counters */
    int32_t session_id, stream_id, initial_term_id;
    int position_bits;
    long long last_sm_ns;      /* the publication's time of its last SM (any SM) */
    long long last_position;   /* FEEDBACK_MAX_POSITION: the furthest position reported */
    long long flow_sm_ns;      /* FEEDBACK_MAX_POSITION: the time of the last SM flow control saw */
    Py_ssize_t group_min_size; /* FEEDBACK_MIN: the limit holds still below this many receivers */
    PyObject *receivers;       /* FEEDBACK_MIN: dict receiver id -> FlowReceiver (else NULL) */
    PyObject *seen;            /* a private publication's dynamic destinations: dict address -> last SM (or NULL) */
    CounterRef sender_limit;
    PyObject *metadata;        /* AtomicBuffer of the log's metadata */
    Py_ssize_t connected_offset;
} FeedbackSlot;

static PyTypeObject FeedbackSlotType;

static int
FeedbackSlot_init(FeedbackSlot *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"kind", "group_min_size", NULL};
    int kind;
    Py_ssize_t group_min_size = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|n", kwlist, &kind, &group_min_size))
        return -1;
    if (kind < FEEDBACK_NONE || kind > FEEDBACK_MIN) {
        PyErr_Format(PyExc_ValueError, "unknown flow control kind %d", kind);
        return -1;
    }
    self->kind = kind;
    self->group_min_size = group_min_size;
    if (kind == FEEDBACK_MIN && self->receivers == NULL) {
        self->receivers = PyDict_New();
        if (self->receivers == NULL)
            return -1;
    }
    return 0;
}

static int
FeedbackSlot_traverse(FeedbackSlot *self, visitproc visit, void *arg)
{
    Py_VISIT(self->receivers);
    Py_VISIT(self->seen);
    Py_VISIT(self->metadata);
    Py_VISIT(self->sender_limit.buffer);
    return 0;
}

static int
FeedbackSlot_clear(FeedbackSlot *self)
{
    Py_CLEAR(self->receivers);
    Py_CLEAR(self->seen);
    Py_CLEAR(self->metadata);
    Py_CLEAR(self->sender_limit.buffer);
    self->bound = 0;
    return 0;
}

static void
FeedbackSlot_dealloc(FeedbackSlot *self)
{
    PyObject_GC_UnTrack(self);
    FeedbackSlot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyDoc_STRVAR(FeedbackSlot_bind_doc,
"bind(session_id, stream_id, initial_term_id, position_bits, sender_limit, connected, /) -> None\n\n"
"The publication this slot is for: its ids, the sender limit counter's location and\n"
"the (metadata, offset) of the log's connected flag.");

static PyObject *
FeedbackSlot_bind(FeedbackSlot *self, PyObject *args)
{
    int session_id, stream_id, initial_term_id, position_bits;
    PyObject *sender_limit, *metadata;
    Py_ssize_t connected_offset;
    if (!PyArg_ParseTuple(args, "iiiiO(On)", &session_id, &stream_id, &initial_term_id, &position_bits,
                          &sender_limit, &metadata, &connected_offset))
        return NULL;
    if (position_bits < 0 || position_bits > 31) {
        PyErr_Format(PyExc_ValueError, "position_bits %d out of range", position_bits);
        return NULL;
    }
    if (!PyObject_TypeCheck(metadata, AtomicBuffer_Type)) {
        PyErr_SetString(PyExc_TypeError, "connected: not an AtomicBuffer");
        return NULL;
    }
    if (buffer_check((AtomicBuffer *)metadata, connected_offset, 4, 1) < 0)
        return NULL;
    if (counter_ref(sender_limit, &self->sender_limit, "sender_limit") < 0)
        return NULL;
    Py_INCREF(metadata);
    Py_XSETREF(self->metadata, metadata);
    self->connected_offset = connected_offset;
    self->session_id = session_id;
    self->stream_id = stream_id;
    self->initial_term_id = initial_term_id;
    self->position_bits = position_bits;
    self->bound = 1;
    Py_RETURN_NONE;
}

static PyObject *
FeedbackSlot_get_receivers(FeedbackSlot *self, void *Py_UNUSED(closure))
{
    if (self->receivers == NULL)
        Py_RETURN_NONE;
    return Py_NewRef(self->receivers);
}

static PyObject *
FeedbackSlot_get_native(FeedbackSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->native);
}

static int
FeedbackSlot_set_native(FeedbackSlot *self, PyObject *value, void *Py_UNUSED(closure))
{
    int truth = value == NULL ? 0 : PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    self->native = truth;
    return 0;
}

static PyObject *
FeedbackSlot_get_has_receivers(FeedbackSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->has_receivers);
}

static int
FeedbackSlot_set_has_receivers(FeedbackSlot *self, PyObject *value, void *Py_UNUSED(closure))
{
    int truth = value == NULL ? 0 : PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    self->has_receivers = truth;
    return 0;
}

static PyObject *
FeedbackSlot_get_end_of_stream(FeedbackSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->end_of_stream);
}

static int
FeedbackSlot_set_end_of_stream(FeedbackSlot *self, PyObject *value, void *Py_UNUSED(closure))
{
    int truth = value == NULL ? 0 : PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    self->end_of_stream = truth;
    return 0;
}

static PyMethodDef FeedbackSlot_methods[] = {
    {"bind", (PyCFunction)FeedbackSlot_bind, METH_VARARGS, FeedbackSlot_bind_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef FeedbackSlot_members[] = {
    {"kind", T_INT, offsetof(FeedbackSlot, kind), READONLY, "FEEDBACK_NONE, _MAX_POSITION or _MIN."},
    {"session_id", T_INT, offsetof(FeedbackSlot, session_id), READONLY, NULL},
    {"stream_id", T_INT, offsetof(FeedbackSlot, stream_id), READONLY, NULL},
    {"last_sm_ns", T_LONGLONG, offsetof(FeedbackSlot, last_sm_ns), 0, "The publication's time of its last SM."},
    {"last_position", T_LONGLONG, offsetof(FeedbackSlot, last_position), 0,
     "Unicast/max flow control: the furthest position reported."},
    {"flow_sm_ns", T_LONGLONG, offsetof(FeedbackSlot, flow_sm_ns), 0,
     "Unicast/max flow control: the time of the last SM it saw."},
    {"group_min_size", T_PYSSIZET, offsetof(FeedbackSlot, group_min_size), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef FeedbackSlot_getset[] = {
    {"receivers", (getter)FeedbackSlot_get_receivers, NULL, "Min flow control: receiver id -> FlowReceiver.", NULL},
    {"native", (getter)FeedbackSlot_get_native, (setter)FeedbackSlot_set_native,
     "The next plain SM may be applied natively (set by the publication's sender thread).", NULL},
    {"has_receivers", (getter)FeedbackSlot_get_has_receivers, (setter)FeedbackSlot_set_has_receivers,
     "The publication's has_receivers: SMs are applied natively only while it holds.", NULL},
    {"end_of_stream", (getter)FeedbackSlot_get_end_of_stream, (setter)FeedbackSlot_set_end_of_stream,
     "The publication's is_end_of_stream: SMs then wake its sender, in Python.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FeedbackSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.FeedbackSlot",
    .tp_doc = PyDoc_STR("FeedbackSlot(kind, group_min_size=0): what a status message changes in a publication."),
    .tp_basicsize = sizeof(FeedbackSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FeedbackSlot_init,
    .tp_dealloc = (destructor)FeedbackSlot_dealloc,
    .tp_traverse = (traverseproc)FeedbackSlot_traverse,
    .tp_clear = (inquiry)FeedbackSlot_clear,
    .tp_methods = FeedbackSlot_methods,
    .tp_members = FeedbackSlot_members,
    .tp_getset = FeedbackSlot_getset,
};

/* ---- FeedbackRoutes: a send endpoint's publications, by (session, stream) ---- */

typedef struct {
    PyObject_HEAD
    PyObject *slots;           /* dict: (session << 32 | stream) -> FeedbackSlot */
    PyObject *shared_seen;     /* dynamic channels: the shared destinations, dict address -> last SM; else NULL */
    CounterRef status_messages;
} FeedbackRoutes;

static PyTypeObject FeedbackRoutesType;

static int
FeedbackRoutes_init(FeedbackRoutes *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"status_messages", "shared_destinations", NULL};
    PyObject *status_messages, *shared = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &status_messages, &shared))
        return -1;
    if (shared != Py_None && !PyDict_CheckExact(shared)) {
        PyErr_SetString(PyExc_TypeError, "shared_destinations must be a dict or None");
        return -1;
    }
    if (counter_ref(status_messages, &self->status_messages, "status_messages") < 0)
        return -1;
    PyObject *slots = PyDict_New();
    if (slots == NULL)
        return -1;
    Py_XSETREF(self->slots, slots);
    Py_XSETREF(self->shared_seen, shared == Py_None ? NULL : Py_NewRef(shared));
    return 0;
}

static int
FeedbackRoutes_traverse(FeedbackRoutes *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slots);
    Py_VISIT(self->shared_seen);
    Py_VISIT(self->status_messages.buffer);
    return 0;
}

static int
FeedbackRoutes_clear(FeedbackRoutes *self)
{
    Py_CLEAR(self->slots);
    Py_CLEAR(self->shared_seen);
    Py_CLEAR(self->status_messages.buffer);
    return 0;
}

static void
FeedbackRoutes_dealloc(FeedbackRoutes *self)
{
    PyObject_GC_UnTrack(self);
    FeedbackRoutes_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
FeedbackRoutes_add(FeedbackRoutes *self, PyObject *args)
{
    PyObject *slot, *seen = Py_None;
    if (!PyArg_ParseTuple(args, "O!|O", &FeedbackSlotType, &slot, &seen))
        return NULL;
    if (seen != Py_None && !PyDict_CheckExact(seen)) {
        PyErr_SetString(PyExc_TypeError, "a private publication's destinations must be a dict or None");
        return NULL;
    }
    FeedbackSlot *s = (FeedbackSlot *)slot;
    if (!s->bound) {
        PyErr_SetString(PyExc_ValueError, "the slot is not bound to a publication");
        return NULL;
    }
    if (self->slots == NULL)
        return PyErr_Format(PyExc_ValueError, "cleared");
    PyObject *key = PyLong_FromUnsignedLongLong(route_key(s->session_id, s->stream_id));
    if (key == NULL)
        return NULL;
    int failed = PyDict_SetItem(self->slots, key, slot);
    Py_DECREF(key);
    if (failed)
        return NULL;
    Py_XSETREF(s->seen, seen == Py_None ? NULL : Py_NewRef(seen));
    Py_RETURN_NONE;
}

static PyObject *
FeedbackRoutes_remove(FeedbackRoutes *self, PyObject *slot)
{
    if (!PyObject_TypeCheck(slot, &FeedbackSlotType)) {
        PyErr_SetString(PyExc_TypeError, "not a FeedbackSlot");
        return NULL;
    }
    if (self->slots == NULL)
        Py_RETURN_NONE;
    FeedbackSlot *s = (FeedbackSlot *)slot;
    PyObject *key = PyLong_FromUnsignedLongLong(route_key(s->session_id, s->stream_id));
    if (key == NULL)
        return NULL;
    int dropped = route_drop(self->slots, key, slot);
    Py_DECREF(key);
    if (dropped < 0)
        return NULL;
    Py_RETURN_NONE;
}

static Py_ssize_t
FeedbackRoutes_length(FeedbackRoutes *self)
{
    return self->slots == NULL ? 0 : PyDict_Size(self->slots);
}

static PySequenceMethods FeedbackRoutes_sequence = {
    .sq_length = (lenfunc)FeedbackRoutes_length,
};

static PyMethodDef FeedbackRoutes_methods[] = {
    {"add", (PyCFunction)FeedbackRoutes_add, METH_VARARGS,
     "add(slot, destinations=None): route the SMs of the slot's (session, stream) to it (``destinations``: a "
     "private publication's dynamic destinations)."},
    {"remove", (PyCFunction)FeedbackRoutes_remove, METH_O, "Stop routing to the slot (no-op if another is routed)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FeedbackRoutesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.FeedbackRoutes",
    .tp_doc = PyDoc_STR("FeedbackRoutes(status_messages, shared_destinations=None): a send endpoint's publications."),
    .tp_basicsize = sizeof(FeedbackRoutes),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FeedbackRoutes_init,
    .tp_dealloc = (destructor)FeedbackRoutes_dealloc,
    .tp_traverse = (traverseproc)FeedbackRoutes_traverse,
    .tp_clear = (inquiry)FeedbackRoutes_clear,
    .tp_methods = FeedbackRoutes_methods,
    .tp_as_sequence = &FeedbackRoutes_sequence,
};

/* ---- the native status message ---- */

/* Apply one datagram as a status message if it is the common case: 1 when applied, 0 when it goes to Python
 * (nothing changed), -1 with an error set. */
static int
feedback_status_message(DatagramSocket *sock, FeedbackRoutes *routes, const unsigned char *p, Py_ssize_t length,
                        const struct sockaddr_storage *from, socklen_t from_length, long long now_ns)
{
    int32_t frame_length, session_id, stream_id, term_id, term_offset, window;
    int64_t receiver_id;
    if (routes->slots == NULL || length < FEEDBACK_SM_LENGTH)
        return 0;
    memcpy(&frame_length, p, 4);
    /* classify()'s checks for an SM; anything it would reject is counted by the Python path */
    if (p[4] != 0 || frame_length < FEEDBACK_SM_LENGTH || frame_length > length || (p[5] & FEEDBACK_SEND_SETUP_FLAG))
        return 0;
    memcpy(&session_id, p + 8, 4);
    memcpy(&stream_id, p + 12, 4);
    memcpy(&term_id, p + 16, 4);
    memcpy(&term_offset, p + 20, 4);
    memcpy(&window, p + 24, 4);
    memcpy(&receiver_id, p + 28, 8);
    PyObject *key = PyLong_FromUnsignedLongLong(route_key(session_id, stream_id));
    if (key == NULL)
        return -1;
    PyObject *found = PyDict_GetItemWithError(routes->slots, key);
    Py_DECREF(key);
    if (found == NULL)
        return PyErr_Occurred() ? -1 : 0;
    FeedbackSlot *slot = (FeedbackSlot *)found;
    if (!slot->native || !slot->has_receivers || slot->end_of_stream || !slot->bound || slot->kind == FEEDBACK_NONE)
        return 0;
    int64_t *limit_address = counter_address(&slot->sender_limit);
    AtomicBuffer *metadata = (AtomicBuffer *)slot->metadata;
    if (limit_address == NULL || metadata == NULL || !metadata->has_view)
        return 0;
    Py_INCREF(slot);
    int result = 0;
    FlowReceiver *receiver = NULL;
    PyObject *address = NULL, *seen = NULL;
    if (slot->kind == FEEDBACK_MIN) {
        PyObject *id = PyLong_FromLongLong(receiver_id);
        if (id == NULL)
            goto fail;
        PyObject *known = PyDict_GetItemWithError(slot->receivers, id);
        Py_DECREF(id);
        if (known == NULL) {
            if (PyErr_Occurred())
                goto fail;
            goto done; /* a new receiver: Python's */
        }
        if (!PyObject_TypeCheck(known, &FlowReceiverType))
            goto done;
        receiver = (FlowReceiver *)Py_NewRef(known);
    }
    if (routes->shared_seen != NULL) { /* a dynamic channel: the address must be a destination already */
        seen = slot->seen != NULL ? slot->seen : routes->shared_seen;
        address = source_address(sock, from, from_length);
        if (address == NULL)
            goto fail;
        int known = address == Py_None ? 0 : PyDict_Contains(seen, address);
        if (known < 0)
            goto fail;
        if (!known)
            goto done;
    }
    /* every check passed: apply it, as SendChannelEndpoint._on_status_message and the publication would */
    if (address != NULL) {
        PyObject *time = PyLong_FromLongLong(now_ns);
        if (time == NULL)
            goto fail;
        int failed = PyDict_SetItem(seen, address, time);
        Py_DECREF(time);
        if (failed)
            goto fail;
    }
    counter_add(&routes->status_messages, 1);
    slot->last_sm_ns = now_ns;
    int32_t terms = (int32_t)((uint32_t)term_id - (uint32_t)slot->initial_term_id);
    long long position = (long long)terms * (1LL << slot->position_bits) + term_offset;
    long long limit = position + window;
    long long current = __atomic_load_n(limit_address, __ATOMIC_ACQUIRE);
    long long proposed = current;
    if (slot->kind == FEEDBACK_MAX_POSITION) {
        if (position > slot->last_position)
            slot->last_position = position;
        slot->flow_sm_ns = now_ns;
        if (limit > current)
            proposed = limit;
    }
    else {
        if (position > receiver->last_position)
            receiver->last_position = position;
        receiver->limit = limit; /* the latest SM's, not the furthest (1.15.1) */
        receiver->time_of_last_sm_ns = now_ns;
        Py_ssize_t count = PyDict_Size(slot->receivers);
        if (count >= slot->group_min_size) {
            if (count > 1) {
                Py_ssize_t at = 0;
                PyObject *k, *value;
                while (PyDict_Next(slot->receivers, &at, &k, &value)) {
                    if (PyObject_TypeCheck(value, &FlowReceiverType) && ((FlowReceiver *)value)->limit < limit)
                        limit = ((FlowReceiver *)value)->limit;
                }
            }
            if (limit > current)
                proposed = limit;
        }
    }
    if (proposed != current)
        __atomic_store_n(limit_address, proposed, __ATOMIC_RELEASE);
    __atomic_store_n((int32_t *)(metadata->base + slot->connected_offset), 1, __ATOMIC_RELEASE);
    result = 1;
    goto done;
fail:
    result = -1;
done:
    Py_XDECREF(address);
    Py_XDECREF(receiver);
    Py_DECREF(slot);
    return result;
}

/* Ready the feedback types and add them to ``module``; -1 on error. */
static int
feedback_add_types(PyObject *module)
{
    if (PyType_Ready(&FlowReceiverType) < 0 || PyType_Ready(&FeedbackSlotType) < 0 ||
        PyType_Ready(&FeedbackRoutesType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "FlowReceiver", (PyObject *)&FlowReceiverType) < 0 ||
        PyModule_AddObjectRef(module, "FeedbackSlot", (PyObject *)&FeedbackSlotType) < 0 ||
        PyModule_AddObjectRef(module, "FeedbackRoutes", (PyObject *)&FeedbackRoutesType) < 0 ||
        PyModule_AddIntConstant(module, "FEEDBACK_NONE", FEEDBACK_NONE) < 0 ||
        PyModule_AddIntConstant(module, "FEEDBACK_MAX_POSITION", FEEDBACK_MAX_POSITION) < 0 ||
        PyModule_AddIntConstant(module, "FEEDBACK_MIN", FEEDBACK_MIN) < 0)
        return -1;
    return 0;
}
