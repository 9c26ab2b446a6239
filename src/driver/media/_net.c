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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#define SOURCE_CACHE_SIZE 8
#define DESTINATION_CACHE_SIZE 8

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
    {"detach", (PyCFunction)DatagramSocket_detach, METH_NOARGS, detach_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef DatagramSocket_getset[] = {
    {"fd", (getter)DatagramSocket_get_fd, NULL, "The descriptor, or -1 once detached.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
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
    .tp_getset = DatagramSocket_getset,
};

static struct PyModuleDef net_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "driver.media._net",
    .m_doc = "Non-raising, GIL-keeping datagram I/O for the driver's UDP transports.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__net(void)
{
    if (PyType_Ready(&DatagramSocketType) < 0)
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
    return module;
}
