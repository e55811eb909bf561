/* horovod_torus._native: the numpy API's per-call check and small flat all-reduce in C.
 *
 * Why: on a host with more ranks than cores every microsecond of Python between two MPI calls costs several
 * (the other ranks spin in MPI meanwhile). Measured on 4 ranks on 2 cores (docs/notes/mpi_transport.md): a
 * bare 8-byte MPI_Allreduce took 8.3 us; the check and the flat call from Python 24 us; the same two calls
 * from one C function 13.5 us.
 *
 * Handles cross the boundary as Fortran integers (mpi4py's py2f(), MPI_*_f2c here), so the module works with
 * any MPI library mpi4py was built against; it is compiled with that library's mpicc (setup.py). Every MPI
 * call runs with the GIL released. Buffers come through the buffer protocol (numpy arrays).
 *
 * check(comm, both, reduced, tests) -> (status, request)
 * check_flat(comm, both, reduced, tests, send, recv, datatype, op) -> (status, request)
 *   both: int64 [2K], the check's send vector (horovod_torus.signature.extremes), reduced: int64 [2K] out.
 *   The check is MPI_Iallreduce(both -> reduced, MPI_MAX) on comm, then up to `tests` MPI_Test calls
 *   (tests < 0, no deadline: one blocking MPI_Allreduce, as horovod_torus.mpi.TorusComm.verify makes it).
 *   status 0: the check completed and every rank passed the same words (reduced == both); check_flat then
 *             ran MPI_Allreduce(send -> recv, datatype, op) on comm (send is recv: MPI_IN_PLACE).
 *   status 1: the check is still open after `tests` tests: `request` is its Fortran handle (the caller
 *             waits for it under the call's deadline, MPI_Request_f2c / mpi4py Request.f2py); no data moved.
 *   status 2: the check completed and the words differ (the caller names the difference); no data moved.
 *   An MPI error (with MPI_ERRORS_RETURN, mpi4py's default) raises RuntimeError naming the MPI error string;
 *   send and recv that overlap without being the same buffer raise ValueError before any MPI call.
 * library_version() -> str: MPI_Get_library_version() of the linked MPI (horovod_torus.mpi compares it with
 *   mpi4py's and does not use this module when they differ).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <mpi.h>
#include <string.h>

static PyObject *mpi_error(int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    PyErr_Format(PyExc_RuntimeError, "%s failed: %s (MPI error code %d)", what, text, rc);
    return NULL;
}

/* The check: returns 0, 1 or 2 (see above), or -1 with *rc set. Called without the GIL. */
static int run_check(MPI_Comm comm, const void *both, void *reduced, int words, long tests, MPI_Request *req,
                     int *rc)
{
    int done = 0;
    if (tests < 0) { /* no deadline: the blocking call, as the Python path makes it (MPI does not match a
                        blocking collective with another rank's non-blocking one) */
        *rc = MPI_Allreduce(both, reduced, words, MPI_INT64_T, MPI_MAX, comm);
        if (*rc != MPI_SUCCESS)
            return -1;
        return memcmp(both, reduced, (size_t)words * 8) == 0 ? 0 : 2;
    }
    *rc = MPI_Iallreduce(both, reduced, words, MPI_INT64_T, MPI_MAX, comm, req);
    if (*rc != MPI_SUCCESS)
        return -1;
    for (long i = 0; i < tests && !done; i++) {
        *rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (*rc != MPI_SUCCESS)
            return -1;
    }
    if (!done)
        return 1;
    return memcmp(both, reduced, (size_t)words * 8) == 0 ? 0 : 2;
}

static int check_words(Py_buffer *both, Py_buffer *reduced)
{
    if (both->len != reduced->len || both->len % 16 != 0 || both->len == 0) {
        PyErr_Format(PyExc_ValueError, "check vectors must be int64 of one even length, got %zd and %zd bytes",
                     both->len, reduced->len);
        return -1;
    }
    return 0;
}

static PyObject *native_check(PyObject *self, PyObject *args)
{
    int fcomm;
    long tests;
    Py_buffer both, reduced;
    if (!PyArg_ParseTuple(args, "iy*w*l", &fcomm, &both, &reduced, &tests))
        return NULL;
    PyObject *result = NULL;
    if (check_words(&both, &reduced) == 0) {
        MPI_Request req = MPI_REQUEST_NULL;
        int rc = MPI_SUCCESS, status;
        MPI_Comm comm = MPI_Comm_f2c(fcomm);
        Py_BEGIN_ALLOW_THREADS
        status = run_check(comm, both.buf, reduced.buf, (int)(both.len / 8), tests, &req, &rc);
        Py_END_ALLOW_THREADS
        if (status < 0)
            mpi_error(rc, "the torus call's check (MPI_Iallreduce)");
        else
            result = Py_BuildValue("ii", status, status == 1 ? (int)MPI_Request_c2f(req) : 0);
    }
    PyBuffer_Release(&both);
    PyBuffer_Release(&reduced);
    return result;
}

static PyObject *native_check_flat(PyObject *self, PyObject *args)
{
    int fcomm, ftype, fop;
    long tests;
    Py_buffer both, reduced, send, recv;
    if (!PyArg_ParseTuple(args, "iy*w*ly*w*ii", &fcomm, &both, &reduced, &tests, &send, &recv, &ftype, &fop))
        return NULL;
    PyObject *result = NULL;
    MPI_Datatype type = MPI_Type_f2c(ftype);
    int size = 0;
    if (check_words(&both, &reduced) != 0) {
    } else if (MPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0 || send.len != recv.len
               || send.len % size != 0 || send.len / size > 0x7fffffff) {
        PyErr_Format(PyExc_ValueError, "flat all-reduce buffers of %zd and %zd bytes do not fit the datatype "
                     "(%d bytes per element, at most 2**31-1 elements)", send.len, recv.len, size);
    } else if (send.buf != recv.buf && (const char *)send.buf < (const char *)recv.buf + recv.len
               && (const char *)recv.buf < (const char *)send.buf + send.len) {
        PyErr_SetString(PyExc_ValueError, "send and receive buffers overlap without being the same buffer "
                        "(MPI forbids it): pass the same array for in place, or separate arrays");
    } else {
        MPI_Request req = MPI_REQUEST_NULL;
        int rc = MPI_SUCCESS, status;
        MPI_Comm comm = MPI_Comm_f2c(fcomm);
        const void *src = send.buf == recv.buf ? MPI_IN_PLACE : send.buf;
        Py_BEGIN_ALLOW_THREADS
        status = run_check(comm, both.buf, reduced.buf, (int)(both.len / 8), tests, &req, &rc);
        if (status == 0) {
            rc = MPI_Allreduce(src, recv.buf, (int)(recv.len / size), type, MPI_Op_f2c(fop), comm);
            if (rc != MPI_SUCCESS)
                status = -2;
        }
        Py_END_ALLOW_THREADS
        if (status < 0)
            mpi_error(rc, status == -1 ? "the torus call's check (MPI_Iallreduce)" : "the flat MPI_Allreduce");
        else
            result = Py_BuildValue("ii", status, status == 1 ? (int)MPI_Request_c2f(req) : 0);
    }
    PyBuffer_Release(&both);
    PyBuffer_Release(&reduced);
    PyBuffer_Release(&send);
    PyBuffer_Release(&recv);
    return result;
}

static PyObject *native_library_version(PyObject *self, PyObject *args)
{
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS)
        len = 0;
    return PyUnicode_DecodeUTF8(text, len, "replace");
}

static PyMethodDef methods[] = {
    {"library_version", native_library_version, METH_NOARGS,
     "MPI_Get_library_version() of the MPI library this module was linked against (mpi4py's must be the same)."},
    {"check", native_check, METH_VARARGS,
     "check(comm_f, both, reduced, tests) -> (status, request_f): the call's check (see the module source)."},
    {"check_flat", native_check_flat, METH_VARARGS,
     "check_flat(comm_f, both, reduced, tests, send, recv, datatype_f, op_f) -> (status, request_f): the "
     "check, then on agreement MPI_Allreduce(send -> recv) (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "horovod_torus._native",
                                    "The numpy API's per-call check and small flat all-reduce in C.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
