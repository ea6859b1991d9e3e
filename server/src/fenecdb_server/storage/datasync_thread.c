/* An fdatasync that runs on a thread of its own, with no Python and no GIL in that thread.

   The loop asks for one with `submit(fd)` and goes on; the thread runs fdatasync and bumps an
   eventfd the loop watches; the loop then collects the result with `reap(False)`. A thread that
   cannot wait for the loop collects it with `reap(True)`, which waits with the GIL released.
   One fdatasync is in flight at a time (the log's leader step, log.py). The object offers what
   `kernel_aio.Ring` names, so the log and the loop (http/durable.py) use either the same way.

   Why a thread of C and not of Python: a Python thread needs the GIL back to say it is done,
   and a busy loop gives it up only at the interpreter's switch interval (5 ms). Why not only
   the kernel's AIO (kernel_aio.py): the kernel runs an AIO fdatasync on a worker bound to the
   CPU that submitted it, the loop's own, while this thread may run on another CPU. The numbers
   are in sync_thread.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running;    /* the thread was started and not yet joined */
    int stopping;   /* close() asked the thread to end */
    int wanted;     /* the descriptor to fdatasync next, -1 for none */
    int in_flight;  /* submitted and not yet reaped */
    int done;       /* the fdatasync submitted has returned */
    int result;     /* its result: 0, or a negative errno */
    int eventfd;
} DatasyncThread;

static void *syncer(void *arg) {
    DatasyncThread *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stopping && s->wanted < 0)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping)
            break;
        int fd = s->wanted;
        s->wanted = -1;
        pthread_mutex_unlock(&s->mu);
        int r;
        do {
            r = fdatasync(fd) == 0 ? 0 : -errno;
        } while (r == -EINTR);
        pthread_mutex_lock(&s->mu);
        s->result = r;
        s->done = 1;
        pthread_cond_broadcast(&s->cv);
        uint64_t one = 1;
        while (write(s->eventfd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static PyObject *new_(PyTypeObject *type, PyObject *args, PyObject *kw) {
    DatasyncThread *s = (DatasyncThread *)type->tp_alloc(type, 0);
    if (s != NULL) {
        s->eventfd = -1;  /* nothing to close until init made it */
        s->wanted = -1;
    }
    return (PyObject *)s;
}

static int init(DatasyncThread *s, PyObject *args, PyObject *kw) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", names))
        return -1;
    if (s->running) {
        PyErr_SetString(PyExc_RuntimeError, "the thread is running already");
        return -1;
    }
    s->wanted = -1;
    s->eventfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->eventfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int err = pthread_create(&s->thread, NULL, syncer, s);
    if (err != 0) {
        close(s->eventfd);
        s->eventfd = -1;
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    s->running = 1;
    return 0;
}

static PyObject *submit(DatasyncThread *s, PyObject *arg) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (!s->running) {
        PyErr_SetString(PyExc_ValueError, "the thread is closed");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (s->in_flight) {
        pthread_mutex_unlock(&s->mu);
        PyErr_SetString(PyExc_RuntimeError, "an fdatasync is in flight already");
        return NULL;
    }
    s->wanted = (int)fd;
    s->in_flight = 1;
    s->done = 0;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    Py_RETURN_NONE;
}

static PyObject *reap(DatasyncThread *s, PyObject *args, PyObject *kw) {
    static char *names[] = {"block", NULL};
    int block = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "p", names, &block))
        return NULL;
    int got = 0, result = 0;
    if (block) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&s->mu);
        while (s->in_flight && !s->done)
            pthread_cond_wait(&s->cv, &s->mu);
        Py_END_ALLOW_THREADS
    } else {
        pthread_mutex_lock(&s->mu);
    }
    if (s->in_flight && s->done) {
        got = 1;
        result = s->result;
        s->in_flight = 0;
        s->done = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (!got)
        Py_RETURN_NONE;
    return PyLong_FromLong(result);
}

static PyObject *fileno_(DatasyncThread *s, PyObject *unused) {
    return PyLong_FromLong(s->eventfd);
}

static PyObject *clear(DatasyncThread *s, PyObject *unused) {
    uint64_t value;
    if (s->eventfd >= 0) {
        while (read(s->eventfd, &value, sizeof value) < 0 && errno == EINTR) {
        }
    }
    Py_RETURN_NONE;
}

static PyObject *in_flight(DatasyncThread *s, void *unused) {
    return PyBool_FromLong(s->in_flight);
}

static void stop(DatasyncThread *s) {
    /* waits for an fdatasync in flight, ends the thread and frees the eventfd */
    if (s->running) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&s->mu);
        while (s->in_flight && !s->done)
            pthread_cond_wait(&s->cv, &s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        Py_END_ALLOW_THREADS
        s->running = 0;
        s->in_flight = 0;
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
    }
    if (s->eventfd >= 0) {
        close(s->eventfd);
        s->eventfd = -1;
    }
}

static PyObject *close_(DatasyncThread *s, PyObject *unused) {
    stop(s);
    Py_RETURN_NONE;
}

static void dealloc(DatasyncThread *s) {
    stop(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMethodDef methods[] = {
    {"submit", (PyCFunction)submit, METH_O, "Start an fdatasync of the descriptor; one at a time."},
    {"reap", (PyCFunction)(void (*)(void))reap, METH_VARARGS | METH_KEYWORDS,
     "reap(block): the fdatasync's result (0 or a negative errno) once it is over, else None."},
    {"fileno", (PyCFunction)fileno_, METH_NOARGS, "The eventfd, readable once an fdatasync is over."},
    {"clear", (PyCFunction)clear, METH_NOARGS, "Read the eventfd down to zero."},
    {"close", (PyCFunction)close_, METH_NOARGS, "Wait for an fdatasync in flight, then end the thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef getset[] = {
    {"in_flight", (getter)in_flight, NULL, "Submitted and not yet reaped.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DatasyncThreadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fenecdb_server.storage._datasync_thread.DatasyncThread",
    .tp_doc = "One thread running fdatasyncs for the loop, told through an eventfd.",
    .tp_basicsize = sizeof(DatasyncThread),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = new_,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_methods = methods,
    .tp_getset = getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_datasync_thread", "fdatasync on a thread without the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__datasync_thread(void) {
    if (PyType_Ready(&DatasyncThreadType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&DatasyncThreadType);
    if (PyModule_AddObject(m, "DatasyncThread", (PyObject *)&DatasyncThreadType) < 0) {
        Py_DECREF(&DatasyncThreadType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
