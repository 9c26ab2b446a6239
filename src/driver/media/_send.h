/*
 * The sender's common case natively (included by _net.c, after DatagramSocket and the counter helpers).
 *
 * A SendSlot is the send-side state of one network publication that both paths share: the time of its last
 * datagram, whether a flow-control stall is being tracked, and whether the Python path must visit it (``python``:
 * a SETUP due, resends pending, end of stream, flow control that works when idle, spies standing in for
 * receivers; set by whoever changes that, cleared by the Python path when nothing of it is left). Bound to its
 * endpoint's DatagramSocket and the very list of destinations it sends to (mutated in place by the endpoint),
 * it can be sent natively.
 *
 * ``send_publications`` takes the due publications of one sender duty cycle and, for each bound slot not
 * flagged for Python, reads its term from the sender position up to the sender limit (at most one MTU per
 * datagram, MAX_DATAGRAMS per publication, a PAD ending a datagram with only its header sent: Aeron's
 * TermScanner), or, with nothing to send, a heartbeat when one is due; every datagram of every publication goes
 * out in sendmmsg batches per socket, straight from the term's memory. Positions, times and counters are
 * committed after the batch, exactly as NetworkPublication._send_data/_heartbeat_check do: a datagram the kernel
 * refuses (EAGAIN, ENOBUFS) stops its publication there (the rest of its datagrams are not sent, the position
 * stays before it, one short send counted). Whatever else goes wrong (a destination that is not a numeric
 * address, more destinations than a slot caches, an unusual send error) leaves the publication to Python, whose
 * path reports it as it always has.
 *
 * Segmentation offload: a publication's consecutive datagrams to its one destination that are of one length (the
 * last of a run may be shorter) lie back to back in the term, so they go as one message that the kernel cuts
 * into those very datagrams (UDP_SEGMENT, Linux's UDP GSO): the same datagrams reach the wire (or, over loopback,
 * the receiving socket), for one pass through the sending stack instead of one each. A kernel or device that
 * refuses it (EINVAL, EIO, ENOPROTOOPT, EOPNOTSUPP on a segmented message) turns it off for that socket, and the
 * datagrams go one by one from the next cycle on (nothing is counted as refused).
 */
#define SEND_MAX_DATAGRAMS 64 /* per publication per duty cycle: network_publication.MAX_DATAGRAMS_PER_CYCLE */
#define SEND_MAX_DESTINATIONS 16 /* more and the Python path sends it */
#define SEND_LANES 4             /* sockets batched at once in one call */
#define SEND_LANE_LENGTH 64      /* messages per sendmmsg */
#define SEND_SEGMENTS_MAX 64     /* datagrams in one segmented message (the kernel's UDP_MAX_SEGMENTS) */
#define SEND_SEGMENTED_BYTES_MAX 60000 /* and bytes (one IP packet's worth, headers aside) */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#define HEARTBEAT_FLAGS_BYTE 0xC0 /* BEGIN | END */
#define HDR_TYPE_DATA_VALUE 1
/* A whole message alone in its datagram with this reserved value asks for no tail probe after it (ours: an end point's
 * keepalive, which the next keepalive follows anyway): driver.logbuffer.frame.QUIET_RESERVED_VALUE. */
#define QUIET_RESERVED_VALUE 0x65626f72702d6f6eLL

typedef struct {
    PyObject *tuple; /* owned; compared by identity */
    struct sockaddr_storage addr;
    socklen_t length;
} SendDestination;

typedef struct {
    PyObject_HEAD
    PyObject *socket;       /* DatagramSocket or None (unbound) */
    PyObject *destinations; /* list of address tuples or None */
    int all_destinations;   /* a datagram counts as sent when every destination took it (else: when the first did) */
    PyObject *terms[3];
    CounterRef sender_position, sender_limit, bytes_sent, heartbeats_sent, short_sends, flow_control_limits;
    int32_t session_id, stream_id, initial_term_id;
    int position_bits;
    long long term_length;
    long long mtu;
    long long heartbeat_interval_ns;
    long long last_send_ns; /* time of the last datagram or heartbeat */
    long long probe_ns;     /* a tail probe: one heartbeat this long after data, whatever the interval (0: none) */
    char probe_pending;     /* data went since the last heartbeat: the probe is due at last_send_ns + probe_ns */
    char track_limits;      /* data was sent since the window last closed: a stall is counted once */
    char python;            /* the Python path must visit it */
    SendDestination cache[SEND_MAX_DESTINATIONS];
    int cached;
} SendSlot;

static PyTypeObject SendSlotType;

/* How long after the last send an idle publication heartbeats: the tail probe's wait once after data (a receiver
 * whose copy of the last datagrams was lost learns of them from it and asks again), else the interval. */
static inline long long
heartbeat_wait(const SendSlot *slot)
{
    return slot->probe_pending && slot->probe_ns < slot->heartbeat_interval_ns ? slot->probe_ns
                                                                               : slot->heartbeat_interval_ns;
}

static void
send_slot_forget_destinations(SendSlot *self)
{
    for (int i = 0; i < SEND_MAX_DESTINATIONS; i++)
        Py_CLEAR(self->cache[i].tuple);
    self->cached = 0;
}

static int
SendSlot_traverse(SendSlot *self, visitproc visit, void *arg)
{
    Py_VISIT(self->socket);
    Py_VISIT(self->destinations);
    for (int i = 0; i < 3; i++)
        Py_VISIT(self->terms[i]);
    for (int i = 0; i < SEND_MAX_DESTINATIONS; i++)
        Py_VISIT(self->cache[i].tuple);
    return 0;
}

static int
SendSlot_clear(SendSlot *self)
{
    Py_CLEAR(self->socket);
    Py_CLEAR(self->destinations);
    for (int i = 0; i < 3; i++)
        Py_CLEAR(self->terms[i]);
    Py_CLEAR(self->sender_position.buffer);
    Py_CLEAR(self->sender_limit.buffer);
    Py_CLEAR(self->bytes_sent.buffer);
    Py_CLEAR(self->heartbeats_sent.buffer);
    Py_CLEAR(self->short_sends.buffer);
    Py_CLEAR(self->flow_control_limits.buffer);
    send_slot_forget_destinations(self);
    return 0;
}

static void
SendSlot_dealloc(SendSlot *self)
{
    PyObject_GC_UnTrack(self);
    SendSlot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
SendSlot_init(SendSlot *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"terms", "session_id", "stream_id", "initial_term_id", "position_bits", "mtu",
                             "sender_position", "sender_limit", "bytes_sent", "heartbeats_sent", "short_sends",
                             "sender_flow_control_limits", "heartbeat_interval_ns", "last_send_ns", NULL};
    PyObject *terms, *position, *limit, *bytes, *heartbeats, *shorts, *limits;
    int session_id, stream_id, initial_term_id, position_bits, mtu;
    long long interval, last;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OiiiiiOOOOOOLL", kwlist, &terms, &session_id, &stream_id,
                                     &initial_term_id, &position_bits, &mtu, &position, &limit, &bytes,
                                     &heartbeats, &shorts, &limits, &interval, &last))
        return -1;
    if (position_bits < 16 || position_bits > 30 || mtu < 64 || interval <= 0) {
        PyErr_SetString(PyExc_ValueError, "position_bits must be a term length's, mtu at least 64, interval > 0");
        return -1;
    }
    PyObject *fast = PySequence_Fast(terms, "terms must be a sequence of 3 AtomicBuffers");
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "terms must be 3 AtomicBuffers");
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *term = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_TypeCheck(term, AtomicBuffer_Type) ||
            ((AtomicBuffer *)term)->capacity < ((Py_ssize_t)1 << position_bits)) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "terms must be AtomicBuffers of the term length");
            return -1;
        }
        Py_XSETREF(self->terms[i], Py_NewRef(term));
    }
    Py_DECREF(fast);
    if (counter_ref(position, &self->sender_position, "sender_position") < 0 ||
        counter_ref(limit, &self->sender_limit, "sender_limit") < 0 ||
        counter_ref(bytes, &self->bytes_sent, "bytes_sent") < 0 ||
        counter_ref(heartbeats, &self->heartbeats_sent, "heartbeats_sent") < 0 ||
        counter_ref(shorts, &self->short_sends, "short_sends") < 0 ||
        counter_ref(limits, &self->flow_control_limits, "sender_flow_control_limits") < 0)
        return -1;
    self->session_id = session_id;
    self->stream_id = stream_id;
    self->initial_term_id = initial_term_id;
    self->position_bits = position_bits;
    self->term_length = 1LL << position_bits;
    self->mtu = mtu;
    self->heartbeat_interval_ns = interval;
    self->last_send_ns = last;
    self->probe_ns = 0;
    self->probe_pending = 0;
    self->track_limits = 0;
    self->python = 1;
    self->all_destinations = 0;
    Py_XSETREF(self->socket, Py_NewRef(Py_None));
    Py_XSETREF(self->destinations, Py_NewRef(Py_None));
    send_slot_forget_destinations(self);
    return 0;
}

PyDoc_STRVAR(SendSlot_bind_doc,
"bind(socket, destinations, all_destinations, /) -> None\n\n"
"Send natively through ``socket`` (a DatagramSocket) to the address tuples in the list\n"
"``destinations`` (read at every send: its owner adds and removes in place). With\n"
"``all_destinations`` a datagram counts as sent only when every destination took it\n"
"(DynamicDestinations.send), else when the first did (SendChannelEndpoint.send).\n"
"``bind(None, None, False)`` unbinds: the Python path sends.");

static PyObject *
SendSlot_bind(SendSlot *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 3, "bind"))
        return NULL;
    PyObject *socket = args[0], *destinations = args[1];
    if (socket != Py_None && !PyObject_TypeCheck(socket, &DatagramSocketType)) {
        PyErr_SetString(PyExc_TypeError, "socket must be a DatagramSocket or None");
        return NULL;
    }
    if (destinations != Py_None && !PyList_Check(destinations)) {
        PyErr_SetString(PyExc_TypeError, "destinations must be a list or None");
        return NULL;
    }
    int all = PyObject_IsTrue(args[2]);
    if (all < 0)
        return NULL;
    Py_XSETREF(self->socket, Py_NewRef(socket));
    Py_XSETREF(self->destinations, Py_NewRef(destinations));
    self->all_destinations = all;
    send_slot_forget_destinations(self);
    Py_RETURN_NONE;
}

static PyObject *
SendSlot_get_bound(SendSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->socket != Py_None && self->destinations != Py_None);
}

static PyMethodDef SendSlot_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))SendSlot_bind, METH_FASTCALL, SendSlot_bind_doc},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef SendSlot_members[] = {
    {"last_send_ns", T_LONGLONG, offsetof(SendSlot, last_send_ns), 0, "Time of the last datagram or heartbeat."},
    {"track_limits", T_BOOL, offsetof(SendSlot, track_limits), 0, "Data sent since the window last closed."},
    {"python", T_BOOL, offsetof(SendSlot, python), 0, "The Python path must visit this publication."},
    {"heartbeat_interval_ns", T_LONGLONG, offsetof(SendSlot, heartbeat_interval_ns), 0, "Idle heartbeat interval."},
    {"probe_ns", T_LONGLONG, offsetof(SendSlot, probe_ns), 0, "Tail probe: a heartbeat this long after data (0: none)."},
    {"probe_pending", T_BOOL, offsetof(SendSlot, probe_pending), 0, "Data went since the last heartbeat."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef SendSlot_getset[] = {
    {"bound", (getter)SendSlot_get_bound, NULL, "A socket and destinations are given.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SendSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.SendSlot",
    .tp_doc = PyDoc_STR("The send-side state of one network publication, shared by the Python and native paths."),
    .tp_basicsize = sizeof(SendSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)SendSlot_init,
    .tp_dealloc = (destructor)SendSlot_dealloc,
    .tp_traverse = (traverseproc)SendSlot_traverse,
    .tp_clear = (inquiry)SendSlot_clear,
    .tp_methods = SendSlot_methods,
    .tp_members = SendSlot_members,
    .tp_getset = SendSlot_getset,
};

/* Refresh the slot's parsed destinations from its list; the count, or -1 when the Python path must send (more than
 * it caches, or an address that is not numeric in the socket's family). */
static int
send_slot_destinations(SendSlot *self, int family)
{
    PyObject *list = self->destinations;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (n > SEND_MAX_DESTINATIONS)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        SendDestination *d = &self->cache[i];
        if (d->tuple == item)
            continue;
        Py_CLEAR(d->tuple);
        if (!parse_any_address(item, &d->addr, &d->length) || d->addr.ss_family != family) {
            self->cached = (int)i;
            return -1;
        }
        d->tuple = Py_NewRef(item);
    }
    for (int i = (int)n; i < self->cached; i++)
        Py_CLEAR(self->cache[i].tuple);
    self->cached = (int)n;
    return (int)n;
}

/* One publication's part of a call: what it queued, committed once its datagrams have left. */
typedef struct {
    SendSlot *slot;
    Py_ssize_t index;        /* in the agenda */
    int count;               /* data datagrams queued */
    int failed_at;           /* first datagram refused (count when none) */
    int hard_error;          /* refused for a reason other than a full socket: Python looks again */
    int heartbeat;           /* a heartbeat queued instead of data */
    int unsegment;           /* refused only because segmented: sent again one by one next cycle, not a short send */
    int first_loud;          /* first datagram queued that is not a quiet message alone (count when none) */
    int64_t ends[SEND_MAX_DATAGRAMS];  /* sender position after each datagram */
    int32_t lengths[SEND_MAX_DATAGRAMS];
    char frame[DATA_HEADER_LENGTH];
} SendState;

typedef struct {
    int state;
    int datagram;
    int decides;
} SendTag;

typedef struct {
    DatagramSocket *socket; /* borrowed: its slots hold it for the call */
    int fd;
    int count;
    struct mmsghdr messages[SEND_LANE_LENGTH];
    struct iovec vectors[SEND_LANE_LENGTH];
    SendTag tags[SEND_LANE_LENGTH];
    int segments[SEND_LANE_LENGTH];       /* datagrams in each message (more than 1: segmented) */
    size_t segment_length[SEND_LANE_LENGTH];
    union {
        char bytes[CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } controls[SEND_LANE_LENGTH];
} SendLane;

/* One call's working memory, allocated per call: nothing in it is shared with another thread's call (an allocation
 * may run a finalizer, and with it let another thread take the GIL). */
typedef struct {
    SendState *states;
    SendLane lanes[SEND_LANES];
    int lanes_used;
    Py_ssize_t *python; /* agenda indices left to Python */
    Py_ssize_t python_count;
} SendCall;

/* Send a lane's messages; a refused one marks its publication (the rest of its datagrams are dropped from the
 * batch, the position stays before it). */
static void
send_lane_flush(SendLane *lane, SendState *send_states)
{
    int done = 0;
    while (done < lane->count) {
        int n = sendmmsg(lane->fd, lane->messages + done, (unsigned int)(lane->count - done), MSG_DONTWAIT);
        if (n > 0) {
            for (int i = done; i < done + n; i++)
                if (lane->segments[i] > 1)
                    lane->socket->segmented_sends++;
            done += n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        int error = n < 0 ? errno : EAGAIN;
        SendTag *tag = &lane->tags[done];
        SendState *state = &send_states[tag->state];
        int segmented = lane->segments[done] > 1;
        done++;
        if (!tag->decides)
            continue; /* as the Python path: only a deciding destination's refusal stops the publication */
        if (tag->datagram < state->failed_at)
            state->failed_at = tag->datagram;
        if (segmented && (error == EINVAL || error == EIO || error == ENOPROTOOPT || error == EOPNOTSUPP)) {
            lane->socket->no_segmentation = 1; /* this kernel or device does not segment: one by one from now */
            state->unsegment = 1;
        } else if (error != EAGAIN && error != EWOULDBLOCK && error != ENOBUFS) {
            state->hard_error = 1;
        }
        /* drop this publication's later datagrams from what is left */
        int keep = done;
        for (int i = done; i < lane->count; i++) {
            SendTag *t = &lane->tags[i];
            if (t->state == tag->state && t->datagram > state->failed_at)
                continue;
            if (keep != i) {
                lane->messages[keep] = lane->messages[i];
                lane->vectors[keep] = lane->vectors[i];
                lane->messages[keep].msg_hdr.msg_iov = &lane->vectors[keep];
                lane->tags[keep] = *t;
                lane->segments[keep] = lane->segments[i];
                lane->segment_length[keep] = lane->segment_length[i];
                if (lane->messages[keep].msg_hdr.msg_control != NULL) {
                    memcpy(&lane->controls[keep], &lane->controls[i], sizeof(lane->controls[keep]));
                    lane->messages[keep].msg_hdr.msg_control = lane->controls[keep].bytes;
                }
            }
            keep++;
        }
        lane->count = keep;
    }
    lane->count = 0;
}

static SendLane *
send_lane_for(SendCall *call, DatagramSocket *socket)
{
    int fd = socket->fd;
    for (int i = 0; i < call->lanes_used; i++)
        if (call->lanes[i].fd == fd)
            return &call->lanes[i];
    if (call->lanes_used == SEND_LANES) {
        for (int i = 0; i < SEND_LANES; i++)
            send_lane_flush(&call->lanes[i], call->states);
        call->lanes_used = 0;
    }
    SendLane *lane = &call->lanes[call->lanes_used++];
    lane->socket = socket;
    lane->fd = fd;
    lane->count = 0;
    return lane;
}

/* Add a datagram to the lane's last message when the kernel can cut it back out (see the top): the same
 * publication, one destination, right after the message's bytes in memory, no longer than its segments, and the
 * message's last segment full. 1 if added. */
static int
send_segment(SendLane *lane, SendSlot *slot, int state_index, char *data, size_t length)
{
    if (slot->cached != 1 || lane->count == 0 || lane->socket->no_segmentation)
        return 0;
    int m = lane->count - 1;
    struct iovec *vector = &lane->vectors[m];
    size_t segment = lane->segment_length[m];
    if (lane->tags[m].state != state_index || (char *)vector->iov_base + vector->iov_len != data ||
        length > segment || vector->iov_len % segment != 0 || lane->segments[m] >= SEND_SEGMENTS_MAX ||
        vector->iov_len + length > SEND_SEGMENTED_BYTES_MAX)
        return 0;
    if (lane->segments[m] == 1) {
        struct msghdr *header = &lane->messages[m].msg_hdr;
        memset(&lane->controls[m], 0, sizeof(lane->controls[m]));
        header->msg_control = lane->controls[m].bytes;
        header->msg_controllen = sizeof(lane->controls[m].bytes);
        struct cmsghdr *control = CMSG_FIRSTHDR(header);
        control->cmsg_level = SOL_UDP;
        control->cmsg_type = UDP_SEGMENT;
        control->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t size = (uint16_t)segment;
        memcpy(CMSG_DATA(control), &size, sizeof(size));
    }
    vector->iov_len += length;
    lane->segments[m]++;
    return 1;
}

/* Queue one datagram to every destination of the slot. */
static void
send_queue(SendCall *call, SendLane *lane, SendSlot *slot, int state_index, int datagram, char *data, size_t length)
{
    if (send_segment(lane, slot, state_index, data, length))
        return;
    for (int d = 0; d < slot->cached; d++) {
        if (lane->count == SEND_LANE_LENGTH)
            send_lane_flush(lane, call->states);
        int m = lane->count++;
        lane->vectors[m].iov_base = data;
        lane->vectors[m].iov_len = length;
        memset(&lane->messages[m], 0, sizeof(lane->messages[m]));
        lane->messages[m].msg_hdr.msg_name = &slot->cache[d].addr;
        lane->messages[m].msg_hdr.msg_namelen = slot->cache[d].length;
        lane->messages[m].msg_hdr.msg_iov = &lane->vectors[m];
        lane->messages[m].msg_hdr.msg_iovlen = 1;
        lane->tags[m].state = state_index;
        lane->tags[m].datagram = datagram;
        lane->tags[m].decides = slot->all_destinations || d == 0;
        lane->segments[m] = 1;
        lane->segment_length[m] = length;
    }
}

/* The datagram of ``length`` bytes at ``offset`` is one whole message whose reserved value asks for no tail probe. */
static int
send_quiet(const AtomicBuffer *term, long long offset, long long length)
{
    const char *frame = term->base + offset;
    int32_t frame_length;
    int64_t reserved;
    memcpy(&frame_length, frame, 4);
    memcpy(&reserved, frame + 24, 8);
    return reserved == QUIET_RESERVED_VALUE && (((long long)frame_length + 31) & ~31LL) == length &&
           (unsigned char)frame[5] == HEARTBEAT_FLAGS_BYTE;
}

/* Aeron's TermScanner, as term_scan_for_availability: (available, padding) from ``offset`` within ``max_length``. */
static void
send_scan(AtomicBuffer *term, long long offset, long long max_length, long long *available_out, long long *padding_out)
{
    long long limit = term->capacity - offset;
    if (max_length < limit)
        limit = max_length;
    long long available = 0, padding = 0;
    while (limit > 0 && offset + available + 8 <= term->capacity) {
        int64_t word = __atomic_load_n((int64_t *)(term->base + offset + available), __ATOMIC_ACQUIRE);
        int32_t length = (int32_t)(word & 0xFFFFFFFF);
        if (length <= 0)
            break;
        long long aligned = ((long long)length + 31) & ~31LL;
        if (((uint64_t)word >> 48) == 0) { /* PAD */
            padding = aligned - 32;
            aligned = 32;
        }
        available += aligned;
        if (available > limit) {
            available -= aligned;
            padding = 0;
            break;
        }
        if (padding != 0 || available >= limit)
            break;
    }
    *available_out = available;
    *padding_out = padding;
}

PyDoc_STRVAR(send_publications_doc,
"send_publications(slots, due, start, now_ns, deadlines, /) -> (bytes, python)\n\n"
"Send for the publications at indices ``due`` of ``slots`` (visited from ``due[start]`` on,\n"
"round robin): data from each sender position up to its sender limit, else a heartbeat\n"
"when one is due, all in sendmmsg batches per socket; sender positions, times and\n"
"counters updated as the Python path does, and each one's next deadline (its next\n"
"heartbeat) written into ``deadlines`` (the agenda's int64 array) at its index.\n"
"Returns the bytes sent and the indices the Python path must visit (None when none).\n"
"The indices in ``due`` are distinct (an agenda's).");

static PyObject *
send_publications(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 5, "send_publications"))
        return NULL;
    PyObject *slots = args[0], *due = args[1];
    if (!PyList_Check(slots) || !PyList_Check(due)) {
        PyErr_SetString(PyExc_TypeError, "slots and due must be lists");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    long long now_ns = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer deadlines;
    if (PyObject_GetBuffer(args[4], &deadlines, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return NULL;
    if (deadlines.itemsize != 8 || deadlines.format == NULL || strcmp(deadlines.format, "q") != 0) {
        PyBuffer_Release(&deadlines);
        PyErr_SetString(PyExc_TypeError, "deadlines must be an int64 ('q') array");
        return NULL;
    }
    int64_t *deadline = (int64_t *)deadlines.buf;
    Py_ssize_t deadline_count = deadlines.len / 8;
    Py_ssize_t n = PyList_GET_SIZE(due), slot_count = PyList_GET_SIZE(slots);
    /* Check everything first: past this point nothing allocates a Python object until the sends are committed. */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(due, i);
        Py_ssize_t index = PyLong_AsSsize_t(item);
        if (index == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&deadlines);
            return NULL;
        }
        if (index < 0 || index >= slot_count || index >= deadline_count) {
            PyBuffer_Release(&deadlines);
            return PyErr_Format(PyExc_IndexError, "due index %zd out of range", index);
        }
        if (!PyObject_TypeCheck(PyList_GET_ITEM(slots, index), &SendSlotType)) {
            PyBuffer_Release(&deadlines);
            PyErr_SetString(PyExc_TypeError, "slots must hold SendSlots");
            return NULL;
        }
    }
    SendCall *call = PyMem_Malloc(sizeof(SendCall));
    SendState *states_memory = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(SendState));
    Py_ssize_t *python_memory = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (call == NULL || states_memory == NULL || python_memory == NULL) {
        PyMem_Free(call);
        PyMem_Free(states_memory);
        PyMem_Free(python_memory);
        PyBuffer_Release(&deadlines);
        return PyErr_NoMemory();
    }
    if (n)
        start = ((start % n) + n) % n;
    call->states = states_memory;
    call->lanes_used = 0;
    call->python = python_memory;
    call->python_count = 0;
    SendState *send_states = call->states;
    int states = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyList_GET_ITEM(due, (start + i) % n));
        SendSlot *slot = (SendSlot *)PyList_GET_ITEM(slots, index);
        int fd = -1;
        int family = AF_INET;
        DatagramSocket *sock = NULL;
        if (!slot->python && slot->socket != Py_None && slot->destinations != Py_None) {
            sock = (DatagramSocket *)slot->socket;
            fd = sock->fd;
            family = sock->family;
        }
        if (fd < 0 || send_slot_destinations(slot, family) < 0) {
            call->python[call->python_count++] = index;
            continue;
        }
        int64_t *position_address = counter_address(&slot->sender_position);
        int64_t *limit_address = counter_address(&slot->sender_limit);
        if (position_address == NULL || limit_address == NULL)
            continue; /* closed under us: nothing more to send */
        SendState *state = &send_states[states];
        state->slot = slot;
        state->index = index;
        state->count = 0;
        state->failed_at = SEND_MAX_DATAGRAMS;
        state->hard_error = 0;
        state->heartbeat = 0;
        state->unsegment = 0;
        state->first_loud = SEND_MAX_DATAGRAMS;
        int64_t position = __atomic_load_n(position_address, __ATOMIC_ACQUIRE);
        int64_t window = __atomic_load_n(limit_address, __ATOMIC_ACQUIRE) - position;
        long long mask = slot->term_length - 1;
        SendLane *lane = NULL;
        if (window <= 0) {
            if (slot->track_limits) {
                slot->track_limits = 0;
                counter_add(&slot->flow_control_limits, 1);
            }
        } else {
            while (state->count < SEND_MAX_DATAGRAMS) {
                AtomicBuffer *term = (AtomicBuffer *)slot->terms[(position >> slot->position_bits) % 3];
                if (!term->has_view)
                    break;
                long long offset = position & mask, available, padding;
                send_scan(term, offset, window < slot->mtu ? window : slot->mtu, &available, &padding);
                if (available <= 0)
                    break;
                if (state->first_loud == SEND_MAX_DATAGRAMS && !send_quiet(term, offset, available))
                    state->first_loud = state->count;
                if (lane == NULL)
                    lane = send_lane_for(call, sock);
                send_queue(call, lane, slot, states, state->count, term->base + offset, (size_t)available);
                position += available + padding;
                window -= available + padding;
                state->ends[state->count] = position;
                state->lengths[state->count] = (int32_t)available;
                state->count++;
                if (window <= 0)
                    break;
            }
        }
        if (state->count == 0 && now_ns - slot->last_send_ns > heartbeat_wait(slot)) {
            int32_t zero = 0, session = slot->session_id, stream = slot->stream_id;
            int32_t term_offset = (int32_t)(position & mask);
            int32_t term_id = (int32_t)(uint32_t)((uint64_t)(position >> slot->position_bits) +
                                                  (uint32_t)slot->initial_term_id);
            uint16_t type = HDR_TYPE_DATA_VALUE;
            int64_t reserved = 0;
            char *frame = state->frame;
            memcpy(frame, &zero, 4);
            frame[4] = 0;
            frame[5] = (char)HEARTBEAT_FLAGS_BYTE;
            memcpy(frame + 6, &type, 2);
            memcpy(frame + 8, &term_offset, 4);
            memcpy(frame + 12, &session, 4);
            memcpy(frame + 16, &stream, 4);
            memcpy(frame + 20, &term_id, 4);
            memcpy(frame + 24, &reserved, 8);
            state->heartbeat = 1;
            if (lane == NULL)
                lane = send_lane_for(call, sock);
            send_queue(call, lane, slot, states, 0, frame, DATA_HEADER_LENGTH);
        }
        if (state->count == 0 && !state->heartbeat) {
            /* nothing to send: its next visit is its next heartbeat (or a frame the watch sees) */
            deadline[index] = slot->last_send_ns + heartbeat_wait(slot) + 1;
            continue;
        }
        states++;
    }
    for (int i = 0; i < call->lanes_used; i++)
        send_lane_flush(&call->lanes[i], send_states);
    long long total = 0;
    for (int i = 0; i < states; i++) {
        SendState *state = &send_states[i];
        SendSlot *slot = state->slot;
        if (state->heartbeat) {
            if (state->hard_error) {
                /* left as it was: the Python path sends it again and reports what the socket says */
            } else if (state->failed_at == 0) {
                counter_add(&slot->short_sends, 1);
                slot->last_send_ns = now_ns;
            } else {
                counter_add(&slot->heartbeats_sent, 1);
                total += DATA_HEADER_LENGTH;
                slot->last_send_ns = now_ns;
                slot->probe_pending = 0;
            }
        } else {
            int sent = state->failed_at < state->count ? state->failed_at : state->count;
            long long bytes = 0;
            for (int d = 0; d < sent; d++)
                bytes += state->lengths[d];
            if (sent < state->count && !state->hard_error && !state->unsegment)
                counter_add(&slot->short_sends, 1);
            if (bytes) {
                slot->last_send_ns = now_ns;
                if (state->first_loud < sent) /* else only quiet messages went: a probe owed before stays owed */
                    slot->probe_pending = slot->probe_ns > 0;
                slot->track_limits = 1;
                counter_store(&slot->sender_position, state->ends[sent - 1]);
                counter_add(&slot->bytes_sent, bytes);
                total += bytes;
            }
        }
        deadline[state->index] = slot->last_send_ns + heartbeat_wait(slot) + 1;
        if (state->hard_error)
            call->python[call->python_count++] = state->index;
    }
    PyBuffer_Release(&deadlines);
    PyObject *python = NULL;
    if (call->python_count) {
        python = PyList_New(call->python_count);
        for (Py_ssize_t i = 0; python != NULL && i < call->python_count; i++) {
            PyObject *item = PyLong_FromSsize_t(call->python[i]);
            if (item == NULL)
                Py_CLEAR(python);
            else
                PyList_SET_ITEM(python, i, item);
        }
    }
    int failed = call->python_count && python == NULL;
    PyMem_Free(call->python);
    PyMem_Free(call->states);
    PyMem_Free(call);
    if (failed)
        return NULL;
    if (python == NULL)
        return Py_BuildValue("LO", total, Py_None);
    return Py_BuildValue("LN", total, python);
}
