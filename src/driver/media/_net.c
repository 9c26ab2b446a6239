/*
 * Datagram I/O for the driver's non-blocking UDP sockets, without the costs of
 * the socket module on the hot path:
 *
 *  - nothing waiting is an ordinary return value (None), not a raised and
 *    caught BlockingIOError (about 2-3 us per empty poll in CPython);
 *  - the GIL is kept: the sockets never block, so releasing it only invites
 *    another thread to take it and keeps this one waiting for its turn;
 *  - source addresses are returned as the same tuples the socket module gives,
 *    ``(host, port)`` for IPv4 and ``(host, port, flowinfo, scope_id)`` for IPv6,
 *    but a datagram from an address seen recently returns the cached tuple;
 *  - destination tuples are converted once and remembered (by identity, then
 *    by value).
 *
 * A DatagramSocket does not own its descriptor: the Python socket does, and
 * whoever closes that calls ``detach()`` first so that a reused descriptor
 * number is never read from.
 *
 * The receiver's common case runs here too (``receive_batch``): one recvmmsg
 * call reads up to BATCH datagrams, and a DATA/PAD datagram (or heartbeat) for
 * an image registered in an ImageRoutes, from the image's known source, is
 * checked and inserted into its term here (ImageSlot: the flow-control window,
 * the high-water mark, an in-order rebuild, end of stream). Everything else
 * (SETUP, RTTM, data of unknown streams or from a new source address, control
 * frames) is copied into the caller's buffer and handed to its Python handler
 * one datagram at a time, as recvfrom_into would have.
 */
#define _GNU_SOURCE /* recvmmsg */
#include "../concurrent/_atomic_buffer.h"
#include "../logbuffer/_rebuild.h"
#include "../wire/_data_check.h"
#include <structmember.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define SOURCE_CACHE_SIZE 8
#define DESTINATION_CACHE_SIZE 8
#define BATCH 16                 /* datagrams per recvmmsg call */
#define BATCH_SLOT_LENGTH 65536  /* the largest UDP payload fits (a longer one is truncated, as recvfrom_into) */
#define DATA_HEADER_LENGTH 32
#define EOS_FLAG 0x20
#define SM_LENGTH 36
#define HDR_TYPE_SM 3
#define NEVER_NS (1LL << 62)
#define SM_TIMER_GRANULARITY_NS 10000000LL /* a pass over a routes' images at most this often: a status message is
                                               sent up to this late (its timeout is 200 ms to seconds), and a pass
                                               costs one look at every image */

typedef struct {
    char *buffers;  /* BATCH slots of BATCH_SLOT_LENGTH (malloc'd: pages are touched only as datagrams use them) */
    struct mmsghdr messages[BATCH];
    struct iovec vectors[BATCH];
    struct sockaddr_storage addresses[BATCH];
} Batch;

typedef struct {
    struct sockaddr_storage addr;
    socklen_t length;
    PyObject *tuple; /* owned */
} CachedAddress;

typedef struct {
    PyObject_HEAD
    int fd;
    int family;
    CachedAddress sources[SOURCE_CACHE_SIZE];
    int source_next;                /* round-robin replacement */
    CachedAddress destinations[DESTINATION_CACHE_SIZE];
    int destination_next;
    Batch *batch;                   /* receive_batch's buffers, made on first use */
    char no_segmentation;           /* the kernel refused a segmented send (UDP_SEGMENT): send datagrams one by one */
    long long segmented_sends;      /* segmented messages the kernel took (send_publications) */
} DatagramSocket;

static PyTypeObject DatagramSocketType;

static void
clear_cache(CachedAddress *cache, int size)
{
    for (int i = 0; i < size; i++) {
        Py_CLEAR(cache[i].tuple);
        cache[i].length = 0;
    }
}

static int
DatagramSocket_init(DatagramSocket *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fd", "family", NULL};
    int fd, family;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ii", kwlist, &fd, &family))
        return -1;
    if (family != AF_INET && family != AF_INET6) {
        PyErr_Format(PyExc_ValueError, "family must be AF_INET or AF_INET6, got %d", family);
        return -1;
    }
    clear_cache(self->sources, SOURCE_CACHE_SIZE);
    clear_cache(self->destinations, DESTINATION_CACHE_SIZE);
    self->fd = fd;
    self->family = family;
    self->source_next = 0;
    self->destination_next = 0;
    return 0;
}

static int
DatagramSocket_traverse(DatagramSocket *self, visitproc visit, void *arg)
{
    for (int i = 0; i < SOURCE_CACHE_SIZE; i++)
        Py_VISIT(self->sources[i].tuple);
    for (int i = 0; i < DESTINATION_CACHE_SIZE; i++)
        Py_VISIT(self->destinations[i].tuple);
    return 0;
}

static int
DatagramSocket_clear(DatagramSocket *self)
{
    clear_cache(self->sources, SOURCE_CACHE_SIZE);
    clear_cache(self->destinations, DESTINATION_CACHE_SIZE);
    return 0;
}

static void
DatagramSocket_dealloc(DatagramSocket *self)
{
    PyObject_GC_UnTrack(self);
    DatagramSocket_clear(self);
    if (self->batch != NULL) {
        free(self->batch->buffers);
        free(self->batch);
        self->batch = NULL;
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The socket module's tuple for an address. */
static PyObject *
make_address(const struct sockaddr_storage *addr, socklen_t length)
{
    char text[INET6_ADDRSTRLEN];
    if (addr->ss_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)addr;
        if (inet_ntop(AF_INET, &in4->sin_addr, text, sizeof(text)) == NULL)
            return PyErr_SetFromErrno(PyExc_OSError);
        return Py_BuildValue("(si)", text, (int)ntohs(in4->sin_port));
    }
    if (addr->ss_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) == NULL)
            return PyErr_SetFromErrno(PyExc_OSError);
        return Py_BuildValue("(siII)", text, (int)ntohs(in6->sin6_port),
                             (unsigned int)ntohl(in6->sin6_flowinfo), (unsigned int)in6->sin6_scope_id);
    }
    Py_RETURN_NONE; /* unbound or unknown family, as the socket module gives for an empty address */
}

static int
same_address(const struct sockaddr_storage *a, const struct sockaddr_storage *b, socklen_t length)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
        return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
        return x->sin6_port == y->sin6_port && x->sin6_flowinfo == y->sin6_flowinfo &&
               x->sin6_scope_id == y->sin6_scope_id &&
               memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
    }
    return memcmp(a, b, length) == 0;
}

static PyObject *
source_address(DatagramSocket *self, const struct sockaddr_storage *addr, socklen_t length)
{
    for (int i = 0; i < SOURCE_CACHE_SIZE; i++) {
        CachedAddress *entry = &self->sources[i];
        if (entry->tuple != NULL && entry->length == length && same_address(&entry->addr, addr, length)) {
            Py_INCREF(entry->tuple);
            return entry->tuple;
        }
    }
    PyObject *tuple = make_address(addr, length);
    if (tuple == NULL || tuple == Py_None)
        return tuple;
    CachedAddress *entry = &self->sources[self->source_next];
    self->source_next = (self->source_next + 1) % SOURCE_CACHE_SIZE;
    Py_XSETREF(entry->tuple, Py_NewRef(tuple));
    memcpy(&entry->addr, addr, length);
    entry->length = length;
    return tuple;
}

static int
check_open(DatagramSocket *self)
{
    if (self->fd < 0) {
        errno = EBADF;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(recvfrom_into_doc,
"recvfrom_into(buffer, /) -> (length, address) | None\n\n"
"Receive one datagram into ``buffer`` (a longer one is truncated to it, as\n"
"socket.recvfrom_into does). None when nothing is waiting (EAGAIN); any other\n"
"failure raises OSError with its errno.");

static PyObject *
DatagramSocket_recvfrom_into(DatagramSocket *self, PyObject *arg)
{
    Py_buffer view;
    struct sockaddr_storage addr;
    socklen_t addr_length;
    ssize_t n;
    if (check_open(self) < 0)
        return NULL;
    if (PyObject_GetBuffer(arg, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    for (;;) {
        addr_length = sizeof(addr);
        memset(&addr, 0, sizeof(addr.ss_family));
        n = recvfrom(self->fd, view.buf, (size_t)view.len, MSG_DONTWAIT, (struct sockaddr *)&addr, &addr_length);
        if (n >= 0)
            break;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            continue;
        }
        PyBuffer_Release(&view);
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyBuffer_Release(&view);
    PyObject *address = source_address(self, &addr, addr_length);
    if (address == NULL)
        return NULL;
    PyObject *length = PyLong_FromSsize_t(n);
    if (length == NULL) {
        Py_DECREF(address);
        return NULL;
    }
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(address);
        Py_DECREF(length);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, length);
    PyTuple_SET_ITEM(result, 1, address);
    return result;
}

/* Fill ``addr`` from an address tuple; 1 on success, 0 when the host is not a numeric
 * address of this socket's family (the caller falls back to the socket module), -1 on error. */
static int
parse_destination(DatagramSocket *self, PyObject *address, struct sockaddr_storage *addr, socklen_t *length)
{
    const char *host;
    int port;
    unsigned int flowinfo = 0, scope_id = 0;
    if (!PyTuple_Check(address)) {
        PyErr_Format(PyExc_TypeError, "address must be a tuple, not %.100s", Py_TYPE(address)->tp_name);
        return -1;
    }
    memset(addr, 0, sizeof(*addr));
    if (self->family == AF_INET) {
        if (!PyArg_ParseTuple(address, "si;AF_INET address must be a (host, port) tuple", &host, &port))
            return -1;
        if (port < 0 || port > 65535) {
            PyErr_SetString(PyExc_OverflowError, "port must be 0-65535.");
            return -1;
        }
        struct sockaddr_in *in4 = (struct sockaddr_in *)addr;
        if (inet_pton(AF_INET, host, &in4->sin_addr) != 1)
            return 0;
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *length = sizeof(*in4);
        return 1;
    }
    if (!PyArg_ParseTuple(address, "si|II;AF_INET6 address must be a (host, port[, flowinfo[, scope_id]]) tuple",
                          &host, &port, &flowinfo, &scope_id))
        return -1;
    if (port < 0 || port > 65535) {
        PyErr_SetString(PyExc_OverflowError, "port must be 0-65535.");
        return -1;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)addr;
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
        return 0;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    in6->sin6_flowinfo = htonl(flowinfo);
    in6->sin6_scope_id = scope_id;
    *length = sizeof(*in6);
    return 1;
}

/* The cached entry for a destination tuple, converting and caching it on a miss;
 * NULL with no error set when the host is not numeric. */
static CachedAddress *
destination(DatagramSocket *self, PyObject *address)
{
    for (int i = 0; i < DESTINATION_CACHE_SIZE; i++) {
        if (self->destinations[i].tuple == address)
            return &self->destinations[i];
    }
    for (int i = 0; i < DESTINATION_CACHE_SIZE; i++) {
        PyObject *cached = self->destinations[i].tuple;
        if (cached == NULL)
            continue;
        int equal = PyObject_RichCompareBool(cached, address, Py_EQ);
        if (equal < 0)
            return NULL;
        if (equal)
            return &self->destinations[i];
    }
    struct sockaddr_storage addr;
    socklen_t length = 0;
    int parsed = parse_destination(self, address, &addr, &length);
    if (parsed <= 0)
        return NULL;
    CachedAddress *entry = &self->destinations[self->destination_next];
    self->destination_next = (self->destination_next + 1) % DESTINATION_CACHE_SIZE;
    Py_INCREF(address);
    Py_XSETREF(entry->tuple, address);
    memcpy(&entry->addr, &addr, length);
    entry->length = length;
    return entry;
}

PyDoc_STRVAR(sendto_doc,
"sendto(data, address, /) -> int\n\n"
"Send one datagram. Returns the bytes sent; -1 when the kernel would block\n"
"(EAGAIN, ENOBUFS); -2 when ``address`` names a host that is not a numeric\n"
"address of the socket's family (send it with the socket module instead).\n"
"Any other failure raises OSError with its errno.");

static PyObject *
DatagramSocket_sendto(DatagramSocket *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    ssize_t n;
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "sendto expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    if (check_open(self) < 0)
        return NULL;
    CachedAddress *entry = destination(self, args[1]);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyLong_FromLong(-2);
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    for (;;) {
        n = sendto(self->fd, view.buf, (size_t)view.len, MSG_DONTWAIT, (struct sockaddr *)&entry->addr,
                   entry->length);
        if (n >= 0)
            break;
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
            continue;
        }
        PyBuffer_Release(&view);
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
            return PyLong_FromLong(-1);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(n);
}

/* ---- images: the receive side's state of one (session, stream), shared by Python and the batch ---- */

/* One int64 counter value: its AtomicBuffer (owned) and offset. */
typedef struct {
    PyObject *buffer;
    Py_ssize_t offset;
} CounterRef;

/* From a counter's ``location()``: (AtomicBuffer, offset); 0, or -1 with an error set. */
static int
counter_ref(PyObject *location, CounterRef *out, const char *name)
{
    PyObject *buffer;
    Py_ssize_t offset;
    if (!PyTuple_Check(location) || !PyArg_ParseTuple(location, "On", &buffer, &offset)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a counter's location: (AtomicBuffer, offset)", name);
        return -1;
    }
    if (!PyObject_TypeCheck(buffer, AtomicBuffer_Type)) {
        PyErr_Format(PyExc_TypeError, "%s: not an AtomicBuffer", name);
        return -1;
    }
    if (buffer_check((AtomicBuffer *)buffer, offset, 8, 1) < 0)
        return -1;
    Py_INCREF(buffer);
    Py_XSETREF(out->buffer, buffer);
    out->offset = offset;
    return 0;
}

static inline int64_t *
counter_address(const CounterRef *c)
{
    AtomicBuffer *b = (AtomicBuffer *)c->buffer;
    return (b != NULL && b->has_view) ? (int64_t *)(b->base + c->offset) : NULL;
}

static inline void
counter_add(const CounterRef *c, int64_t delta)
{
    int64_t *address = counter_address(c);
    if (address != NULL)
        __atomic_fetch_add(address, delta, __ATOMIC_SEQ_CST);
}

static inline void
counter_store(const CounterRef *c, int64_t value)
{
    int64_t *address = counter_address(c);
    if (address != NULL)
        __atomic_store_n(address, value, __ATOMIC_RELEASE);
}

/* ---- ImageJournal ----
 * The images a receiver wrote data into, in order: a ring of image ids (their registration ids) and how many were
 * ever written. A reader keeps the count it has read up to and asks for what came since; one that fell more than
 * the ring behind is told so and looks at every image instead. One writer (the receiver's thread); the count is
 * stored with release after the id and loaded with acquire, and loaded again after the ids are copied, so a reader
 * on another thread never takes an id the writer overwrote meanwhile for one it wrote. */
typedef struct {
    PyObject_HEAD
    int64_t *ids;
    int64_t mask;
    int64_t written;
} ImageJournal;

static PyTypeObject ImageJournalType;

static inline void
journal_append(ImageJournal *j, int64_t id)
{
    int64_t n = __atomic_load_n(&j->written, __ATOMIC_RELAXED);
    __atomic_store_n(&j->ids[n & j->mask], id, __ATOMIC_RELAXED);
    __atomic_store_n(&j->written, n + 1, __ATOMIC_RELEASE);
}

static int
ImageJournal_init(ImageJournal *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"capacity", NULL};
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kwlist, &capacity))
        return -1;
    if (capacity < 2 || capacity > (1 << 24) || (capacity & (capacity - 1)) != 0) {
        PyErr_SetString(PyExc_ValueError, "capacity must be a power of two from 2 to 2**24");
        return -1;
    }
    int64_t *ids = PyMem_Calloc((size_t)capacity, sizeof(int64_t));
    if (ids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyMem_Free(self->ids);
    self->ids = ids;
    self->mask = capacity - 1;
    self->written = 0;
    return 0;
}

static void
ImageJournal_dealloc(ImageJournal *self)
{
    PyMem_Free(self->ids);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ImageJournal_append(ImageJournal *self, PyObject *arg)
{
    long long id = PyLong_AsLongLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    if (self->ids == NULL) {
        PyErr_SetString(PyExc_ValueError, "journal not initialised");
        return NULL;
    }
    journal_append(self, id);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(ImageJournal_since_doc,
"since(count, /) -> (count, ids | None)\n\n"
"The ids written after the first ``count`` (a run of one id told once), and the count now; None instead of the\n"
"ids when more than the capacity came since (or ``count`` is not one this journal gave): look at every image.");

static PyObject *
ImageJournal_since(ImageJournal *self, PyObject *arg)
{
    long long cursor = PyLong_AsLongLong(arg);
    if (cursor == -1 && PyErr_Occurred())
        return NULL;
    int64_t end = __atomic_load_n(&self->written, __ATOMIC_ACQUIRE);
    int64_t capacity = self->mask + 1;
    if (self->ids == NULL || cursor > end || end - cursor > capacity)
        return Py_BuildValue("(LO)", (long long)end, Py_None);
    PyObject *ids = PyList_New(0);
    if (ids == NULL)
        return NULL;
    int64_t last = 0;
    for (int64_t i = cursor; i < end; i++) {
        int64_t id = __atomic_load_n(&self->ids[i & self->mask], __ATOMIC_RELAXED);
        if (i > cursor && id == last)
            continue;
        last = id;
        PyObject *value = PyLong_FromLongLong(id);
        if (value == NULL || PyList_Append(ids, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(ids);
            return NULL;
        }
        Py_DECREF(value);
    }
    if (__atomic_load_n(&self->written, __ATOMIC_ACQUIRE) - cursor > capacity) { /* lapped while copying */
        Py_DECREF(ids);
        return Py_BuildValue("(LO)", (long long)end, Py_None);
    }
    PyObject *result = Py_BuildValue("(LN)", (long long)end, ids);
    return result;
}

static PyObject *
ImageJournal_get_written(ImageJournal *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(__atomic_load_n(&self->written, __ATOMIC_ACQUIRE));
}

static PyMethodDef ImageJournal_methods[] = {
    {"append", (PyCFunction)ImageJournal_append, METH_O, "Note that the image with this id was written to."},
    {"since", (PyCFunction)ImageJournal_since, METH_O, ImageJournal_since_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ImageJournal_getset[] = {
    {"written", (getter)ImageJournal_get_written, NULL, "How many ids were ever written.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ImageJournalType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.ImageJournal",
    .tp_doc = PyDoc_STR("The images a receiver wrote data into, in order, for readers that look only at those."),
    .tp_basicsize = sizeof(ImageJournal),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ImageJournal_init,
    .tp_dealloc = (destructor)ImageJournal_dealloc,
    .tp_methods = ImageJournal_methods,
    .tp_getset = ImageJournal_getset,
};

typedef struct {
    PyObject_HEAD
    PyObject *terms[3];        /* AtomicBuffer */
    PyObject *metadata;        /* AtomicBuffer */
    Py_ssize_t eos_offset;     /* the end-of-stream position in the metadata */
    CounterRef hwm_counter, rebuild_counter, heartbeats, under_runs, over_runs;
    PyObject *wake;            /* called when data leaves the rebuild behind the high-water mark */
    int32_t session_id, stream_id, initial_term_id;
    int position_bits;
    long long term_length;
    long long hwm, rebuild, last_sm_position, window_limit, time_of_last_packet_ns;
    int end_of_stream;
    struct sockaddr_storage source;
    socklen_t source_length;   /* 0: no numeric source known, every datagram goes to Python */
    /* status messages: when the next is due, the timer's state, and where they go */
    long long sm_due_ns, sm_trigger_position, time_of_last_sm_ns, sm_timeout_ns, clean_position, receiver_id;
    int window;
    int native_sm;             /* set by Python: a static window, not rejected (its SMs may be sent from here) */
    int routed;                /* held by routes that send status messages */
    CounterRef sms_sent;
    CounterRef *subscribers;   /* PyMem; each holds its buffer */
    Py_ssize_t subscriber_count;
    struct sockaddr_storage control;
    socklen_t control_length;  /* 0: not numeric, its SMs go from Python */
    PyObject *journal;         /* ImageJournal told of each insert of data, or NULL */
    int64_t journal_id;
} ImageSlot;

static PyTypeObject ImageSlotType;

/* Bumped whenever a slot may have become timed natively other than by being routed (native_sm set, a control
 * address given): every routes object then looks at its slots again rather than trust its earliest due. */
static unsigned long timing_changes = 0;

static int
ImageSlot_traverse(ImageSlot *self, visitproc visit, void *arg)
{
    for (int i = 0; i < 3; i++)
        Py_VISIT(self->terms[i]);
    Py_VISIT(self->metadata);
    Py_VISIT(self->wake);
    Py_VISIT(self->journal);
    return 0;
}

static void
clear_subscribers(ImageSlot *self)
{
    for (Py_ssize_t i = 0; i < self->subscriber_count; i++)
        Py_CLEAR(self->subscribers[i].buffer);
    PyMem_Free(self->subscribers);
    self->subscribers = NULL;
    self->subscriber_count = 0;
}

static int
ImageSlot_clear(ImageSlot *self)
{
    for (int i = 0; i < 3; i++)
        Py_CLEAR(self->terms[i]);
    Py_CLEAR(self->metadata);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->journal);
    Py_CLEAR(self->hwm_counter.buffer);
    Py_CLEAR(self->rebuild_counter.buffer);
    Py_CLEAR(self->heartbeats.buffer);
    Py_CLEAR(self->under_runs.buffer);
    Py_CLEAR(self->over_runs.buffer);
    Py_CLEAR(self->sms_sent.buffer);
    clear_subscribers(self);
    return 0;
}

static void
ImageSlot_dealloc(ImageSlot *self)
{
    PyObject_GC_UnTrack(self);
    ImageSlot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ``(host, port[, flowinfo, scope_id])`` with a numeric host into ``addr``; 1, or 0 when it is not numeric. */
static int
parse_any_address(PyObject *address, struct sockaddr_storage *addr, socklen_t *length)
{
    const char *host;
    int port;
    unsigned int flowinfo = 0, scope_id = 0;
    if (!PyTuple_Check(address) || !PyArg_ParseTuple(address, "si|II", &host, &port, &flowinfo, &scope_id)) {
        PyErr_Clear();
        return 0;
    }
    if (port < 0 || port > 65535)
        return 0;
    memset(addr, 0, sizeof(*addr));
    struct sockaddr_in *in4 = (struct sockaddr_in *)addr;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        *length = sizeof(*in4);
        return 1;
    }
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)addr;
    if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        in6->sin6_flowinfo = htonl(flowinfo);
        in6->sin6_scope_id = scope_id;
        *length = sizeof(*in6);
        return 1;
    }
    return 0;
}

static int
ImageSlot_init(ImageSlot *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"terms", "metadata", "eos_offset", "session_id", "stream_id", "initial_term_id",
                             "position_bits", "hwm_position", "rebuild_position", "heartbeats", "under_runs",
                             "over_runs", "position", "window_limit", "now_ns", "status_messages_sent",
                             "status_message_timeout_ns", "receiver_id", NULL};
    PyObject *terms, *metadata, *hwm, *rebuild, *heartbeats, *under, *over, *sms_sent;
    Py_ssize_t eos_offset;
    int session_id, stream_id, initial_term_id, position_bits;
    long long position, window_limit, now_ns, sm_timeout_ns, receiver_id;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOniiiiOOOOOLLLOLL", kwlist, &terms, &metadata, &eos_offset,
                                     &session_id, &stream_id, &initial_term_id, &position_bits, &hwm, &rebuild,
                                     &heartbeats, &under, &over, &position, &window_limit, &now_ns, &sms_sent,
                                     &sm_timeout_ns, &receiver_id))
        return -1;
    if (window_limit < position || window_limit - position > INT32_MAX || sm_timeout_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "window_limit must be within a window of position, the timeout positive");
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
    if (position_bits < 16 || position_bits > 30) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "position_bits %d is not a term length's", position_bits);
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
        Py_INCREF(term);
        Py_XSETREF(self->terms[i], term);
    }
    Py_DECREF(fast);
    if (!PyObject_TypeCheck(metadata, AtomicBuffer_Type)) {
        PyErr_SetString(PyExc_TypeError, "metadata must be an AtomicBuffer");
        return -1;
    }
    if (buffer_check((AtomicBuffer *)metadata, eos_offset, 8, 1) < 0)
        return -1;
    Py_INCREF(metadata);
    Py_XSETREF(self->metadata, metadata);
    if (counter_ref(hwm, &self->hwm_counter, "hwm_position") < 0 ||
        counter_ref(rebuild, &self->rebuild_counter, "rebuild_position") < 0 ||
        counter_ref(heartbeats, &self->heartbeats, "heartbeats") < 0 ||
        counter_ref(under, &self->under_runs, "under_runs") < 0 ||
        counter_ref(over, &self->over_runs, "over_runs") < 0 ||
        counter_ref(sms_sent, &self->sms_sent, "status_messages_sent") < 0)
        return -1;
    self->eos_offset = eos_offset;
    self->session_id = session_id;
    self->stream_id = stream_id;
    self->initial_term_id = initial_term_id;
    self->position_bits = position_bits;
    self->term_length = 1LL << position_bits;
    self->hwm = self->rebuild = self->last_sm_position = position;
    self->window_limit = window_limit;
    self->time_of_last_packet_ns = now_ns;
    self->end_of_stream = 0;
    self->source_length = 0;
    self->window = (int)(window_limit - position);
    self->sm_timeout_ns = sm_timeout_ns;
    self->time_of_last_sm_ns = now_ns - sm_timeout_ns - 1; /* due at once */
    self->sm_due_ns = self->time_of_last_sm_ns + sm_timeout_ns;
    self->sm_trigger_position = position + (self->window >> 2);
    self->clean_position = position;
    self->receiver_id = receiver_id;
    self->native_sm = 0;
    self->routed = 0;
    self->control_length = 0;
    clear_subscribers(self);
    Py_XSETREF(self->wake, Py_NewRef(Py_None));
    counter_store(&self->hwm_counter, position);
    counter_store(&self->rebuild_counter, position);
    return 0;
}

/* Insert one checked DATA/PAD datagram (or heartbeat) of ``length`` bytes covering ``covered`` bytes of term (more
 * than ``length`` when it ends in a PAD frame, of which only the header travels: what data_datagram_check returns),
 * as driver.core.publication_image.PublicationImage.insert_packet describes; the bytes taken (0 when outside the
 * window), or -1 with an error set (its wake raised). */
static Py_ssize_t
slot_insert(ImageSlot *s, int32_t term_id, int32_t term_offset, const char *packet, Py_ssize_t length,
            long long covered, long long now_ns)
{
    int64_t terms_ahead = (int32_t)((uint32_t)term_id - (uint32_t)s->initial_term_id);
    int64_t position = terms_ahead * ((int64_t)1 << s->position_bits) + term_offset;
    int32_t first_word;
    memcpy(&first_word, packet, 4);
    int heartbeat = length == DATA_HEADER_LENGTH && first_word == 0;
    int64_t proposed = heartbeat ? position : position + length;
    int in_order = 0, needs_scan = 0;
    if (position < s->last_sm_position) {
        counter_add(&s->under_runs, 1);
        return 0;
    }
    if (proposed > s->window_limit) {
        counter_add(&s->over_runs, 1);
        return 0;
    }
    if (heartbeat) {
        counter_add(&s->heartbeats, 1);
        if ((packet[5] & EOS_FLAG) && !s->end_of_stream) {
            s->end_of_stream = 1;
            AtomicBuffer *metadata = (AtomicBuffer *)s->metadata;
            if (metadata->has_view)
                __atomic_store_n((int64_t *)(metadata->base + s->eos_offset), position, __ATOMIC_RELEASE);
        }
    } else {
        int64_t term_count = position >> s->position_bits; /* arithmetic: floor for a position before the start */
        int index = (int)(((term_count % 3) + 3) % 3);
        AtomicBuffer *term = (AtomicBuffer *)s->terms[index];
        if (!term->has_view || term_offset < 0 || (Py_ssize_t)term_offset > term->capacity - length)
            return 0;
        int inserted = rebuild_insert(term->base + term_offset, packet, (size_t)length);
        /* Data that continues a complete rebuild (no gap open): the rebuild follows it at once, with no loss scan,
         * over the whole of a PAD frame it ends with (to the end of the term), as the loss scan would step.
         * The high-water mark stays at the bytes received (Aeron's), so the rebuild may then be ahead of it. */
        in_order = inserted && position == s->rebuild && s->rebuild >= s->hwm;
        /* A repair landing where the rebuild stopped: the scan can move it on now (an image with a gap is
         * otherwise tracked only at its NAK and status-message deadlines). */
        needs_scan = inserted && position == s->rebuild && s->rebuild < s->hwm;
        if (inserted && s->journal != NULL)
            journal_append((ImageJournal *)s->journal, s->journal_id);
    }
    s->time_of_last_packet_ns = now_ns;
    if (proposed > s->hwm) {
        s->hwm = proposed;
        counter_store(&s->hwm_counter, proposed);
        if (in_order) {
            int64_t rebuilt = position + (covered > length ? covered : length);
            s->rebuild = rebuilt;
            counter_store(&s->rebuild_counter, rebuilt);
        } else if (proposed > s->rebuild) { /* (a heartbeat within a stepped-over pad: no) */
            needs_scan = 1;
        }
    }
    if (needs_scan && s->wake != Py_None) {
        PyObject *result = PyObject_CallNoArgs(s->wake);
        if (result == NULL)
            return -1;
        Py_DECREF(result);
    }
    return length;
}

PyDoc_STRVAR(ImageSlot_insert_doc,
"insert(term_id, term_offset, packet, length, now_ns, /) -> int\n\n"
"Insert a checked DATA/PAD datagram or heartbeat (driver.wire.datagram.validate_data_datagram passed);\n"
"the bytes taken, 0 when it falls outside the window (counted).");

static PyObject *
ImageSlot_insert(ImageSlot *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 5, "insert"))
        return NULL;
    long term_id = PyLong_AsLong(args[0]);
    long term_offset = PyLong_AsLong(args[1]);
    Py_ssize_t length = PyLong_AsSsize_t(args[3]);
    long long now_ns = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (length < DATA_HEADER_LENGTH || length > view.len || term_id < INT32_MIN || term_id > INT32_MAX ||
        term_offset < 0 || term_offset >= self->term_length) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "not a checked datagram: %zd bytes at term offset %ld", length, term_offset);
        return NULL;
    }
    long covered = data_datagram_check(view.buf, length, self->term_length);
    Py_ssize_t taken = slot_insert(self, (int32_t)term_id, (int32_t)term_offset, view.buf, length,
                                   covered > 0 ? covered : length, now_ns);
    PyBuffer_Release(&view);
    return taken < 0 ? NULL : PyLong_FromSsize_t(taken);
}

PyDoc_STRVAR(ImageSlot_set_source_doc,
"set_source(address, /) -> None\n\nThe address the image's datagrams come from: only those take the batch's\n"
"native path (a datagram from elsewhere goes to Python, which may follow it).");

static PyObject *
ImageSlot_set_source(ImageSlot *self, PyObject *address)
{
    if (!parse_any_address(address, &self->source, &self->source_length))
        self->source_length = 0;
    Py_RETURN_NONE;
}

/* Zero the term behind ``position`` (at most to the end of the clean position's term), as
 * PublicationImage._clean_buffer_to describes: a term is clean before the sender reuses it. */
static void
slot_clean_to(ImageSlot *s, long long position)
{
    long long clean = s->clean_position;
    if (position <= clean)
        return;
    long long mask = s->term_length - 1;
    long long term_offset = clean & mask;
    long long length = position - clean;
    if (length > s->term_length - term_offset)
        length = s->term_length - term_offset;
    int64_t term_count = clean >> s->position_bits;
    AtomicBuffer *term = (AtomicBuffer *)s->terms[((term_count % 3) + 3) % 3];
    if (term->has_view)
        memset(term->base + term_offset, 0, (size_t)length);
    s->clean_position = clean + length;
}

static PyObject *
ImageSlot_clean_to(ImageSlot *self, PyObject *arg)
{
    long long position = PyLong_AsLongLong(arg);
    if (position == -1 && PyErr_Occurred())
        return NULL;
    slot_clean_to(self, position);
    Py_RETURN_NONE;
}

static PyObject *
ImageSlot_set_control(ImageSlot *self, PyObject *address)
{
    if (!parse_any_address(address, &self->control, &self->control_length))
        self->control_length = 0;
    timing_changes++;
    Py_RETURN_NONE;
}

static PyObject *
ImageSlot_set_subscribers(ImageSlot *self, PyObject *locations)
{
    PyObject *fast = PySequence_Fast(locations, "subscribers must be a sequence of counter locations");
    if (fast == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    CounterRef *refs = count ? PyMem_Calloc((size_t)count, sizeof(CounterRef)) : NULL;
    if (count && refs == NULL) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (counter_ref(PySequence_Fast_GET_ITEM(fast, i), &refs[i], "subscriber position") < 0) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_CLEAR(refs[j].buffer);
            PyMem_Free(refs);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    clear_subscribers(self);
    self->subscribers = refs;
    self->subscriber_count = count;
    Py_RETURN_NONE;
}

static inline int
slot_timed_natively(const ImageSlot *s)
{
    return s->native_sm && s->routed && s->control_length > 0;
}

static PyObject *
ImageSlot_get_native_sm(ImageSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->native_sm);
}

static int
ImageSlot_set_native_sm(ImageSlot *self, PyObject *value, void *Py_UNUSED(closure))
{
    int truth = value == NULL ? -1 : PyObject_IsTrue(value);
    if (truth < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "native_sm cannot be deleted");
        return -1;
    }
    self->native_sm = truth;
    timing_changes++;
    return 0;
}

static PyObject *
ImageSlot_get_timed_natively(ImageSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(slot_timed_natively(self));
}

static PyObject *
ImageSlot_get_end_of_stream(ImageSlot *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->end_of_stream);
}

static PyObject *
ImageSlot_get_wake(ImageSlot *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->wake);
}

static int
ImageSlot_set_wake(ImageSlot *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL || (value != Py_None && !PyCallable_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "wake must be callable or None");
        return -1;
    }
    Py_XSETREF(self->wake, Py_NewRef(value));
    return 0;
}

static PyObject *
ImageSlot_set_journal(ImageSlot *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!nargs_ok(nargs, 2, "set_journal"))
        return NULL;
    if (args[0] != Py_None && !PyObject_TypeCheck(args[0], &ImageJournalType)) {
        PyErr_SetString(PyExc_TypeError, "set_journal(journal: ImageJournal | None, id: int)");
        return NULL;
    }
    long long id = PyLong_AsLongLong(args[1]);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    Py_XSETREF(self->journal, args[0] == Py_None ? NULL : Py_NewRef(args[0]));
    self->journal_id = id;
    Py_RETURN_NONE;
}

static PyObject *
ImageSlot_note_written(ImageSlot *self, PyObject *Py_UNUSED(unused))
{
    if (self->journal != NULL)
        journal_append((ImageJournal *)self->journal, self->journal_id);
    Py_RETURN_NONE;
}

static PyMethodDef ImageSlot_methods[] = {
    {"set_journal", (PyCFunction)(void (*)(void))ImageSlot_set_journal, METH_FASTCALL,
     "set_journal(journal, id, /): tell ``journal`` (an ImageJournal, or None) ``id`` at each insert of data."},
    {"note_written", (PyCFunction)ImageSlot_note_written, METH_NOARGS,
     "Tell the journal this image was written to other than by an insert (a gap padded over)."},
    {"insert", (PyCFunction)(void (*)(void))ImageSlot_insert, METH_FASTCALL, ImageSlot_insert_doc},
    {"set_source", (PyCFunction)ImageSlot_set_source, METH_O, ImageSlot_set_source_doc},
    {"set_control", (PyCFunction)ImageSlot_set_control, METH_O,
     "Where status messages go (a numeric address; any other keeps them in Python)."},
    {"set_subscribers", (PyCFunction)ImageSlot_set_subscribers, METH_O,
     "The subscribers' position counters, as locations: the slowest one is what a status message reports."},
    {"clean_to", (PyCFunction)ImageSlot_clean_to, METH_O,
     "Zero the term behind a position (up to the end of the term it is cleaning)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef ImageSlot_members[] = {
    {"session_id", T_INT, offsetof(ImageSlot, session_id), READONLY, NULL},
    {"stream_id", T_INT, offsetof(ImageSlot, stream_id), READONLY, NULL},
    {"hwm", T_LONGLONG, offsetof(ImageSlot, hwm), READONLY, "The high-water mark: the end of the furthest data."},
    {"rebuild", T_LONGLONG, offsetof(ImageSlot, rebuild), 0, "Where the rebuild is complete up to."},
    {"last_sm_position", T_LONGLONG, offsetof(ImageSlot, last_sm_position), 0, "The last status message's."},
    {"window_limit", T_LONGLONG, offsetof(ImageSlot, window_limit), 0, "Data ending beyond this is an over-run."},
    {"time_of_last_packet_ns", T_LONGLONG, offsetof(ImageSlot, time_of_last_packet_ns), READONLY, NULL},
    {"sm_due_ns", T_LONGLONG, offsetof(ImageSlot, sm_due_ns), 0, "A status message is due after this."},
    {"sm_trigger_position", T_LONGLONG, offsetof(ImageSlot, sm_trigger_position), 0,
     "A status message is due once the slowest subscriber passes this."},
    {"time_of_last_sm_ns", T_LONGLONG, offsetof(ImageSlot, time_of_last_sm_ns), 0, NULL},
    {"clean_position", T_LONGLONG, offsetof(ImageSlot, clean_position), READONLY, NULL},
    {"window", T_INT, offsetof(ImageSlot, window), 0, "The receiver window status messages carry."},
    {NULL},
};

static PyGetSetDef ImageSlot_getset[] = {
    {"end_of_stream", (getter)ImageSlot_get_end_of_stream, NULL, "An end-of-stream heartbeat came.", NULL},
    {"wake", (getter)ImageSlot_get_wake, (setter)ImageSlot_set_wake, "Called when a rebuild needs tracking.", NULL},
    {"native_sm", (getter)ImageSlot_get_native_sm, (setter)ImageSlot_set_native_sm,
     "Its status messages may be sent natively when due (a static window, not rejected).", NULL},
    {"timed_natively", (getter)ImageSlot_get_timed_natively, NULL,
     "Its status-message timer runs natively (routes that send hold it, native_sm, a numeric control address).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ImageSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.ImageSlot",
    .tp_doc = PyDoc_STR("The receive side's state of one image: its terms, window, high-water mark and rebuild."),
    .tp_basicsize = sizeof(ImageSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ImageSlot_init,
    .tp_dealloc = (destructor)ImageSlot_dealloc,
    .tp_traverse = (traverseproc)ImageSlot_traverse,
    .tp_clear = (inquiry)ImageSlot_clear,
    .tp_methods = ImageSlot_methods,
    .tp_members = ImageSlot_members,
    .tp_getset = ImageSlot_getset,
};

/* The key both route tables (images by stream, publications by stream) file a slot under. */
static inline unsigned long long
route_key(int32_t session_id, int32_t stream_id)
{
    return ((unsigned long long)(uint32_t)session_id << 32) | (uint32_t)stream_id;
}

/* Drop ``slot`` from a route table under ``key`` if it is the one routed there: 1 dropped, 0 another (or none)
 * is routed there, -1 an error is set. */
static int
route_drop(PyObject *slots, PyObject *key, PyObject *slot)
{
    PyObject *known = PyDict_GetItemWithError(slots, key);
    if (known == slot)
        return PyDict_DelItem(slots, key) < 0 ? -1 : 1;
    return PyErr_Occurred() ? -1 : 0;
}

#include "_feedback.h" /* the send side's status messages (FeedbackSlot, FeedbackRoutes) */

/* ---- routes: the images a receive endpoint's batch inserts into, by (session, stream) ---- */

typedef struct {
    PyObject_HEAD
    PyObject *slots;           /* dict: (session << 32 | stream) -> ImageSlot */
    CounterRef invalid_packets;
    CounterRef short_sends;
    int sends_status_messages; /* its images' due status messages are sent natively (no faults on send) */
    long long next_sm_ns;      /* no slot's status message is due before this (a lower bound) */
    unsigned long timing_seen; /* timing_changes when next_sm_ns was found */
    PyObject *feedback;        /* a send endpoint's FeedbackRoutes: status messages applied natively (or NULL) */
} ImageRoutes;

static PyTypeObject ImageRoutesType;

static int
ImageRoutes_init(ImageRoutes *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"invalid_packets", "short_sends", "status_messages", NULL};
    PyObject *invalid, *short_sends;
    int status_messages;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOp", kwlist, &invalid, &short_sends, &status_messages))
        return -1;
    if (counter_ref(invalid, &self->invalid_packets, "invalid_packets") < 0 ||
        counter_ref(short_sends, &self->short_sends, "short_sends") < 0)
        return -1;
    self->sends_status_messages = status_messages;
    self->next_sm_ns = 0;
    PyObject *slots = PyDict_New();
    if (slots == NULL)
        return -1;
    Py_XSETREF(self->slots, slots);
    return 0;
}

static int
ImageRoutes_traverse(ImageRoutes *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slots);
    Py_VISIT(self->feedback);
    return 0;
}

static int
ImageRoutes_clear(ImageRoutes *self)
{
    Py_CLEAR(self->slots);
    Py_CLEAR(self->feedback);
    Py_CLEAR(self->invalid_packets.buffer);
    Py_CLEAR(self->short_sends.buffer);
    return 0;
}

static void
ImageRoutes_dealloc(ImageRoutes *self)
{
    PyObject_GC_UnTrack(self);
    ImageRoutes_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
slot_key_object(PyObject *slot)
{
    if (!PyObject_TypeCheck(slot, &ImageSlotType)) {
        PyErr_SetString(PyExc_TypeError, "not an ImageSlot");
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(route_key(((ImageSlot *)slot)->session_id, ((ImageSlot *)slot)->stream_id));
}

static PyObject *
ImageRoutes_add(ImageRoutes *self, PyObject *slot)
{
    PyObject *key = slot_key_object(slot);
    if (key == NULL || self->slots == NULL) {
        Py_XDECREF(key);
        return NULL;
    }
    int failed = PyDict_SetItem(self->slots, key, slot);
    Py_DECREF(key);
    if (failed)
        return NULL;
    ImageSlot *image = (ImageSlot *)slot;
    image->routed = self->sends_status_messages;
    if (image->sm_due_ns < self->next_sm_ns)
        self->next_sm_ns = image->sm_due_ns;
    Py_RETURN_NONE;
}

static PyObject *
ImageRoutes_remove(ImageRoutes *self, PyObject *slot)
{
    PyObject *key = slot_key_object(slot);
    if (key == NULL || self->slots == NULL) {
        Py_XDECREF(key);
        return NULL;
    }
    int dropped = route_drop(self->slots, key, slot);
    Py_DECREF(key);
    if (dropped < 0)
        return NULL;
    if (dropped)
        ((ImageSlot *)slot)->routed = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t
ImageRoutes_length(ImageRoutes *self)
{
    return self->slots == NULL ? 0 : PyDict_Size(self->slots);
}

static PySequenceMethods ImageRoutes_sequence = {
    .sq_length = (lenfunc)ImageRoutes_length,
};

static PyMethodDef ImageRoutes_methods[] = {
    {"add", (PyCFunction)ImageRoutes_add, METH_O, "Route the data of the slot's (session, stream) to it."},
    {"remove", (PyCFunction)ImageRoutes_remove, METH_O, "Stop routing to the slot (no-op if another is routed)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *
ImageRoutes_get_feedback(ImageRoutes *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->feedback != NULL ? self->feedback : Py_None);
}

static int
ImageRoutes_set_feedback(ImageRoutes *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value != NULL && value != Py_None && !PyObject_TypeCheck(value, &FeedbackRoutesType)) {
        PyErr_SetString(PyExc_TypeError, "feedback must be a FeedbackRoutes or None");
        return -1;
    }
    Py_XSETREF(self->feedback, value == NULL || value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

static PyGetSetDef ImageRoutes_getset[] = {
    {"feedback", (getter)ImageRoutes_get_feedback, (setter)ImageRoutes_set_feedback,
     "A send endpoint's FeedbackRoutes: the batch applies their common status messages natively.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ImageRoutesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.ImageRoutes",
    .tp_doc = PyDoc_STR("ImageRoutes(invalid_packets): the images a receive endpoint's batch inserts into."),
    .tp_basicsize = sizeof(ImageRoutes),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ImageRoutes_init,
    .tp_dealloc = (destructor)ImageRoutes_dealloc,
    .tp_traverse = (traverseproc)ImageRoutes_traverse,
    .tp_clear = (inquiry)ImageRoutes_clear,
    .tp_methods = ImageRoutes_methods,
    .tp_getset = ImageRoutes_getset,
    .tp_as_sequence = &ImageRoutes_sequence,
};

/* The slot a datagram (a checked common header of DATA/PAD) goes to natively, with a reference; NULL when none
 * (or on error, with an error set). */
static ImageSlot *
route(ImageRoutes *routes, const unsigned char *p, const struct sockaddr_storage *from, socklen_t from_length)
{
    int32_t session_id, stream_id;
    memcpy(&session_id, p + 12, 4);
    memcpy(&stream_id, p + 16, 4);
    PyObject *key = PyLong_FromUnsignedLongLong(route_key(session_id, stream_id));
    if (key == NULL)
        return NULL;
    PyObject *slot = PyDict_GetItemWithError(routes->slots, key);
    Py_DECREF(key);
    if (slot == NULL)
        return NULL;
    ImageSlot *image = (ImageSlot *)slot;
    if (image->source_length == 0 || image->source_length != from_length ||
        !same_address(&image->source, from, from_length))
        return NULL;
    Py_INCREF(slot);
    return image;
}

static Batch *
batch_of(DatagramSocket *self)
{
    if (self->batch != NULL)
        return self->batch;
    Batch *batch = calloc(1, sizeof(Batch));
    if (batch == NULL)
        return (Batch *)PyErr_NoMemory();
    batch->buffers = malloc((size_t)BATCH * BATCH_SLOT_LENGTH);
    if (batch->buffers == NULL) {
        free(batch);
        return (Batch *)PyErr_NoMemory();
    }
    for (int i = 0; i < BATCH; i++) {
        batch->vectors[i].iov_base = batch->buffers + (size_t)i * BATCH_SLOT_LENGTH;
        batch->vectors[i].iov_len = BATCH_SLOT_LENGTH;
        batch->messages[i].msg_hdr.msg_iov = &batch->vectors[i];
        batch->messages[i].msg_hdr.msg_iovlen = 1;
        batch->messages[i].msg_hdr.msg_name = &batch->addresses[i];
    }
    self->batch = batch;
    return batch;
}

PyDoc_STRVAR(receive_batch_doc,
"receive_batch(routes, buffer, now_ns, limit, handler, /) -> (datagrams, bytes)\n\n"
"Read up to ``limit`` datagrams, BATCH per system call. A DATA/PAD datagram for an\n"
"image in ``routes`` from its source is checked (a malformed one counted in routes'\n"
"invalid_packets) and inserted; any other is copied into ``buffer`` and given to\n"
"``handler(length, address)``. Stops when nothing is waiting (or ECONNREFUSED, an\n"
"ICMP error for an earlier send); any other failure raises OSError.");

static PyObject *
DatagramSocket_receive_batch(DatagramSocket *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "receive_batch expected 5 arguments, got %zd", nargs);
        return NULL;
    }
    if (check_open(self) < 0)
        return NULL;
    if (!PyObject_TypeCheck(args[0], &ImageRoutesType) || ((ImageRoutes *)args[0])->slots == NULL) {
        PyErr_SetString(PyExc_TypeError, "receive_batch takes an ImageRoutes first");
        return NULL;
    }
    ImageRoutes *routes = (ImageRoutes *)args[0];
    long long now_ns = PyLong_AsLongLong(args[2]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *handler = args[4];
    Batch *batch = batch_of(self);
    if (batch == NULL)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t count = 0;
    long long bytes = 0;
    while (count < limit) {
        int want = limit - count < BATCH ? (int)(limit - count) : BATCH;
        for (int i = 0; i < want; i++) {
            batch->messages[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_storage);
            batch->messages[i].msg_hdr.msg_flags = 0;
            batch->messages[i].msg_len = 0;
        }
        int n = recvmmsg(self->fd, batch->messages, (unsigned int)want, MSG_DONTWAIT, NULL);
        if (n < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    goto error;
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED)
                break;
            PyErr_SetFromErrno(PyExc_OSError);
            goto error;
        }
        for (int i = 0; i < n; i++) {
            const unsigned char *p = (const unsigned char *)batch->vectors[i].iov_base;
            Py_ssize_t length = (Py_ssize_t)batch->messages[i].msg_len;
            socklen_t from_length = batch->messages[i].msg_hdr.msg_namelen;
            count++;
            bytes += length;
            int32_t frame_length = 0;
            uint16_t type = 0xffff;
            if (length >= DATA_HEADER_LENGTH) {
                memcpy(&frame_length, p, 4);
                memcpy(&type, p + 6, 2);
            }
            ImageSlot *image = NULL;
            if (length >= DATA_HEADER_LENGTH && !(length & 31) && p[4] == 0 && frame_length >= 0 && type <= 1) {
                image = route(routes, p, &batch->addresses[i], from_length);
                if (image == NULL && PyErr_Occurred())
                    goto error;
            }
            if (image != NULL) {
                Py_ssize_t taken = 0;
                long covered = data_datagram_check(p, length, image->term_length);
                if (covered < 0) {
                    counter_add(&routes->invalid_packets, 1);
                } else {
                    int32_t term_id, term_offset;
                    memcpy(&term_offset, p + 8, 4);
                    memcpy(&term_id, p + 20, 4);
                    taken = slot_insert(image, term_id, term_offset, (const char *)p, length, covered, now_ns);
                }
                Py_DECREF(image);
                if (taken < 0)
                    goto error;
                continue;
            }
            if (type == HDR_TYPE_SM && routes->feedback != NULL) {
                int applied = feedback_status_message(self, (FeedbackRoutes *)routes->feedback, p, length,
                                                      &batch->addresses[i], from_length, now_ns);
                if (applied < 0)
                    goto error;
                if (applied)
                    continue;
            }
            Py_ssize_t copied = length < view.len ? length : view.len;
            memcpy(view.buf, p, (size_t)copied);
            PyObject *address = source_address(self, &batch->addresses[i], from_length);
            if (address == NULL)
                goto error;
            PyObject *result = PyObject_CallFunction(handler, "nN", copied, address);
            if (result == NULL)
                goto error;
            Py_DECREF(result);
            if (self->fd < 0) /* the handler closed the socket */
                goto done;
        }
        if (n < want)
            break;
    }
done:
    PyBuffer_Release(&view);
    return Py_BuildValue("nL", count, bytes);
error:
    PyBuffer_Release(&view);
    return NULL;
}

/* The least and greatest of an image's subscriber positions (its rebuild position where one is unmapped, or
 * when it has none). */
static inline void
subscriber_bounds(const ImageSlot *s, long long *min_position, long long *max_position)
{
    long long least = s->rebuild, greatest = s->rebuild;
    for (Py_ssize_t i = 0; i < s->subscriber_count; i++) {
        int64_t *address = counter_address(&s->subscribers[i]);
        long long value_now = address != NULL ? __atomic_load_n(address, __ATOMIC_ACQUIRE) : s->rebuild;
        if (i == 0 || value_now < least)
            least = value_now;
        if (i == 0 || value_now > greatest)
            greatest = value_now;
    }
    *min_position = least;
    *max_position = greatest;
}

/* Send the frames gathered so far (sendmmsg); a datagram the kernel refuses is counted as a short send and not
 * retried (the image's next status message repeats it). */
static void
flush_status_messages(int fd, struct mmsghdr *messages, int count, const CounterRef *short_sends)
{
    int done = 0;
    while (done < count) {
        int n = sendmmsg(fd, messages + done, (unsigned int)(count - done), MSG_DONTWAIT);
        if (n > 0) {
            done += n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        counter_add(short_sends, 1);
        done++;
    }
}

PyDoc_STRVAR(send_status_messages_doc,
"send_status_messages(routes, now_ns, /) -> int\n\n"
"Send the status messages that are due of the images in ``routes`` whose timer runs\n"
"natively (``ImageSlot.timed_natively``) and that are quiet: rebuild complete, no\n"
"subscriber ahead of it. Each carries the slowest subscriber's position and the\n"
"window, as PublicationImage.send_status_message writes it, after the term behind it\n"
"is cleaned; batched with sendmmsg. Returns how many were sent. A routes object that\n"
"does not send status messages, or a time before the earliest due, costs a comparison;\n"
"a pass over the images runs at most every 10 ms (a status message may leave that late).");

/* The due status messages of ``routes`` from ``self`` (see send_status_messages_doc): how many were sent. */
static long
status_messages_send(DatagramSocket *self, ImageRoutes *routes, long long now_ns)
{
    if (!routes->sends_status_messages || self->fd < 0 ||
        (now_ns <= routes->next_sm_ns && routes->timing_seen == timing_changes))
        return 0;
    routes->timing_seen = timing_changes;
    char frames[BATCH][SM_LENGTH];
    struct iovec vectors[BATCH];
    struct mmsghdr messages[BATCH];
    int pending = 0;
    long sent = 0;
    long long next = NEVER_NS;
    Py_ssize_t position_in_dict = 0;
    PyObject *key, *value;
    while (PyDict_Next(routes->slots, &position_in_dict, &key, &value)) {
        ImageSlot *s = (ImageSlot *)value;
        if (!slot_timed_natively(s))
            continue;
        if (now_ns <= s->sm_due_ns) {
            if (s->sm_due_ns < next)
                next = s->sm_due_ns;
            continue;
        }
        long long min_position, max_position;
        subscriber_bounds(s, &min_position, &max_position);
        if (s->rebuild < s->hwm || max_position > s->rebuild) {
            next = now_ns; /* not quiet: Python's tracking has it (every cycle while a gap is open); look next pass */
            continue;
        }
        slot_clean_to(s, min_position - s->term_length);
        long long window = s->window;
        int32_t term_id = (int32_t)(uint32_t)((uint64_t)(min_position >> s->position_bits) + (uint32_t)s->initial_term_id);
        int32_t term_offset = (int32_t)(min_position & (s->term_length - 1));
        char *frame = frames[pending];
        int32_t frame_length = SM_LENGTH, window32 = (int32_t)window;
        uint16_t type = HDR_TYPE_SM;
        int64_t receiver_id = s->receiver_id;
        memcpy(frame, &frame_length, 4);
        frame[4] = 0;  /* version */
        frame[5] = 0;  /* flags */
        memcpy(frame + 6, &type, 2);
        memcpy(frame + 8, &s->session_id, 4);
        memcpy(frame + 12, &s->stream_id, 4);
        memcpy(frame + 16, &term_id, 4);
        memcpy(frame + 20, &term_offset, 4);
        memcpy(frame + 24, &window32, 4);
        memcpy(frame + 28, &receiver_id, 8);
        vectors[pending].iov_base = frame;
        vectors[pending].iov_len = SM_LENGTH;
        memset(&messages[pending], 0, sizeof(messages[pending]));
        messages[pending].msg_hdr.msg_name = &s->control;
        messages[pending].msg_hdr.msg_namelen = s->control_length;
        messages[pending].msg_hdr.msg_iov = &vectors[pending];
        messages[pending].msg_hdr.msg_iovlen = 1;
        pending++;
        counter_add(&s->sms_sent, 1);
        s->window_limit = min_position + window;
        s->time_of_last_sm_ns = now_ns;
        s->last_sm_position = min_position;
        s->sm_trigger_position = min_position + (window >> 2);
        s->sm_due_ns = now_ns + s->sm_timeout_ns;
        if (s->sm_due_ns < next)
            next = s->sm_due_ns;
        sent++;
        if (pending == BATCH) {
            flush_status_messages(self->fd, messages, pending, &routes->short_sends);
            pending = 0;
        }
    }
    if (pending)
        flush_status_messages(self->fd, messages, pending, &routes->short_sends);
    routes->next_sm_ns = next > now_ns + SM_TIMER_GRANULARITY_NS ? next : now_ns + SM_TIMER_GRANULARITY_NS;
    return sent;
}

static int
is_routes(PyObject *routes)
{
    return PyObject_TypeCheck(routes, &ImageRoutesType) && ((ImageRoutes *)routes)->slots != NULL;
}

static PyObject *
DatagramSocket_send_status_messages(DatagramSocket *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "send_status_messages expected 2 arguments, got %zd", nargs);
        return NULL;
    }
    if (!is_routes(args[0])) {
        PyErr_SetString(PyExc_TypeError, "send_status_messages takes an ImageRoutes first");
        return NULL;
    }
    long long now_ns = PyLong_AsLongLong(args[1]);
    if (now_ns == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLong(status_messages_send(self, (ImageRoutes *)args[0], now_ns));
}

PyDoc_STRVAR(send_all_status_messages_doc,
"send_all_status_messages(pairs, now_ns, /) -> int\n\n"
"DatagramSocket.send_status_messages for each (socket, routes) of the tuple ``pairs``\n"
"(a receiver's endpoints), in one call: one with nothing due costs a comparison.");

static PyObject *
send_all_status_messages(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "send_all_status_messages takes a tuple of (socket, routes) and now_ns");
        return NULL;
    }
    long long now_ns = PyLong_AsLongLong(args[1]);
    if (now_ns == -1 && PyErr_Occurred())
        return NULL;
    PyObject *pairs = args[0];
    long sent = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pairs); i++) {
        PyObject *pair = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyObject_TypeCheck(PyTuple_GET_ITEM(pair, 0), &DatagramSocketType) ||
            !is_routes(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_Format(PyExc_TypeError, "pair %zd must be (DatagramSocket, ImageRoutes)", i);
            return NULL;
        }
        sent += status_messages_send((DatagramSocket *)PyTuple_GET_ITEM(pair, 0),
                                     (ImageRoutes *)PyTuple_GET_ITEM(pair, 1), now_ns);
    }
    return PyLong_FromLong(sent);
}

PyDoc_STRVAR(detach_doc, "detach() -> None\n\nForget the descriptor (its owner is about to close it); later calls raise EBADF.");

static PyObject *
DatagramSocket_detach(DatagramSocket *self, PyObject *Py_UNUSED(ignored))
{
    self->fd = -1;
    Py_RETURN_NONE;
}

static PyObject *
DatagramSocket_get_fd(DatagramSocket *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->fd);
}

static PyMethodDef DatagramSocket_methods[] = {
    {"recvfrom_into", (PyCFunction)DatagramSocket_recvfrom_into, METH_O, recvfrom_into_doc},
    {"sendto", (PyCFunction)(void (*)(void))DatagramSocket_sendto, METH_FASTCALL, sendto_doc},
    {"receive_batch", (PyCFunction)(void (*)(void))DatagramSocket_receive_batch, METH_FASTCALL, receive_batch_doc},
    {"send_status_messages", (PyCFunction)(void (*)(void))DatagramSocket_send_status_messages, METH_FASTCALL,
     send_status_messages_doc},
    {"detach", (PyCFunction)DatagramSocket_detach, METH_NOARGS, detach_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef DatagramSocket_getset[] = {
    {"fd", (getter)DatagramSocket_get_fd, NULL, "The descriptor, or -1 once detached.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef DatagramSocket_members[] = {
    {"no_segmentation", T_BOOL, offsetof(DatagramSocket, no_segmentation), 0,
     "send_publications sends datagrams one by one, not segmented (set once the kernel refuses UDP_SEGMENT)."},
    {"segmented_sends", T_LONGLONG, offsetof(DatagramSocket, segmented_sends), READONLY,
     "Messages of several datagrams send_publications handed the kernel to cut (UDP_SEGMENT)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject DatagramSocketType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "driver.media._net.DatagramSocket",
    .tp_doc = PyDoc_STR("DatagramSocket(fd, family): non-raising, GIL-keeping datagram I/O on a non-blocking socket."),
    .tp_basicsize = sizeof(DatagramSocket),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DatagramSocket_init,
    .tp_dealloc = (destructor)DatagramSocket_dealloc,
    .tp_traverse = (traverseproc)DatagramSocket_traverse,
    .tp_clear = (inquiry)DatagramSocket_clear,
    .tp_methods = DatagramSocket_methods,
    .tp_members = DatagramSocket_members,
    .tp_getset = DatagramSocket_getset,
};


PyDoc_STRVAR(slots_to_track_doc,
"slots_to_track(slots, indices, now_ns, /) -> list[int]\n\n"
"Of ``indices`` (into ``slots``, a list of ImageSlot), those whose image's tracking has\n"
"something to do: PublicationImage.track_rebuild's quiet test failed (a rebuild behind\n"
"the high-water mark, a subscriber ahead of the rebuild or past the status-message\n"
"trigger, the status message due and not timed natively). A subscriber moving within\n"
"its window needs no tracking: waking only the others keeps the receiver's per-message\n"
"work native (a quiet image's due status message leaves from send_status_messages).");

static PyObject *
slots_to_track(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "slots_to_track expected 3 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *slots = args[0], *indices = args[1];
    if (!PyList_Check(slots) || !PyList_Check(indices)) {
        PyErr_SetString(PyExc_TypeError, "slots_to_track takes a list of slots and a list of indices");
        return NULL;
    }
    long long now_ns = PyLong_AsLongLong(args[2]);
    if (now_ns == -1 && PyErr_Occurred())
        return NULL;
    PyObject *due = PyList_New(0);
    if (due == NULL)
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(slots);
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(indices); k++) {
        PyObject *item = PyList_GET_ITEM(indices, k);
        Py_ssize_t i = PyLong_AsSsize_t(item);
        if (i == -1 && PyErr_Occurred())
            goto fail;
        if (i < 0 || i >= count) {
            PyErr_SetString(PyExc_IndexError, "slots_to_track: index out of range");
            goto fail;
        }
        PyObject *object = PyList_GET_ITEM(slots, i);
        if (!PyObject_TypeCheck(object, &ImageSlotType)) {
            PyErr_SetString(PyExc_TypeError, "slots_to_track takes ImageSlot objects");
            goto fail;
        }
        ImageSlot *s = (ImageSlot *)object;
        long long min_position, max_position;
        subscriber_bounds(s, &min_position, &max_position);
        /* A due status message of a quiet image whose timer runs natively leaves from send_status_messages. */
        if (s->rebuild >= s->hwm && max_position <= s->rebuild && min_position <= s->sm_trigger_position &&
            (now_ns <= s->sm_due_ns || slot_timed_natively(s)))
            continue;
        if (PyList_Append(due, item) < 0)
            goto fail;
    }
    return due;
fail:
    Py_DECREF(due);
    return NULL;
}

/* ---- the sender's common case: a separate file ---- */
#include "_send.h"

static PyMethodDef net_functions[] = {
    {"send_publications", (PyCFunction)(void (*)(void))send_publications, METH_FASTCALL, send_publications_doc},
    {"slots_to_track", (PyCFunction)(void (*)(void))slots_to_track, METH_FASTCALL, slots_to_track_doc},
    {"send_all_status_messages", (PyCFunction)(void (*)(void))send_all_status_messages, METH_FASTCALL,
     send_all_status_messages_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef net_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "driver.media._net",
    .m_doc = "Non-raising, GIL-keeping datagram I/O for the driver's UDP transports.",
    .m_size = -1,
    .m_methods = net_functions,
};

PyMODINIT_FUNC
PyInit__net(void)
{
    if (import_atomic_buffer() < 0)
        return NULL;
    if (PyType_Ready(&DatagramSocketType) < 0 || PyType_Ready(&ImageSlotType) < 0 ||
        PyType_Ready(&ImageJournalType) < 0 ||
        PyType_Ready(&ImageRoutesType) < 0 || PyType_Ready(&SendSlotType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&net_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&DatagramSocketType);
    if (PyModule_AddObject(module, "DatagramSocket", (PyObject *)&DatagramSocketType) < 0) {
        Py_DECREF(&DatagramSocketType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "ImageSlot", (PyObject *)&ImageSlotType) < 0 ||
        PyModule_AddObjectRef(module, "ImageJournal", (PyObject *)&ImageJournalType) < 0 ||
        PyModule_AddObjectRef(module, "ImageRoutes", (PyObject *)&ImageRoutesType) < 0 ||
        feedback_add_types(module) < 0 ||
        PyModule_AddObjectRef(module, "SendSlot", (PyObject *)&SendSlotType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    PyObject *quiet = PyLong_FromLongLong(QUIET_RESERVED_VALUE);
    if (quiet == NULL || PyModule_AddObject(module, "QUIET_RESERVED_VALUE", quiet) < 0) {
        Py_XDECREF(quiet);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
