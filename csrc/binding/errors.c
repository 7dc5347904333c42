/*
 * errors.c -- exception reporting: saving and restoring the current
 * exception, the default exception handler, calling a wheel's handler with
 * a context dict, reporting a callback's error; and pw__one_arg, the
 * one-argument parser several methods share.
 *
 * Owns: nothing shared.  Must not touch: a core's lock (it calls Python:
 * never with the mutex held), a batch.  Ownership and lock order: module.h.
 */
#include "module.h"

/* ------------------------------------------------------------------ */
/* exception reporting                                                 */

/* The raised exception as one object (traceback attached); clears it. */
PyObject *pw__fetch_exc(void) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  if (v && tb)
    PyException_SetTraceback(v, tb);
  Py_XDECREF(t);
  Py_XDECREF(tb);
  return v;
#endif
}

/* Sets exc, stolen, as the raised exception. */
void pw__restore_exc(PyObject *exc) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

PyObject *pw__default_handler_impl(PyObject *context) {
  PyObject *logging = NULL, *logger = NULL, *msg = NULL, *res = NULL, *exc = NULL;
  if (!PyDict_Check(context)) {
    PyErr_SetString(PyExc_TypeError, "context must be a dict");
    return NULL;
  }
  /* A copy: the reprs below run code that could change the caller's dict. */
  if (!(context = PyDict_Copy(context)))
    return NULL;
  PyObject *text = PyDict_GetItemString(context, "message"); /* borrowed */
  msg = text ? PyObject_Str(text) : PyUnicode_FromString("Unhandled error in pywheel");
  if (!msg)
    goto done;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(context, &pos, &key, &value)) {
    if (PyUnicode_Check(key) && (PyUnicode_CompareWithASCIIString(key, "message") == 0 ||
                                 PyUnicode_CompareWithASCIIString(key, "exception") == 0))
      continue;
    PyObject *line = PyUnicode_FromFormat("%U\n%S: %R", msg, key, value);
    if (!line)
      goto done;
    Py_SETREF(msg, line);
  }
  /* strong: importing and getLogger can run code that changes the dict */
  exc = Py_XNewRef(PyDict_GetItemString(context, "exception"));
  if (!(logging = PyImport_ImportModule("logging")))
    goto done;
  if (!(logger = PyObject_CallMethod(logging, "getLogger", "s", "pywheel")))
    goto done;
  PyObject *error = PyObject_GetAttrString(logger, "error");
  if (!error)
    goto done;
  PyObject *a = Py_BuildValue("(sO)", "%s", msg);
  PyObject *kw =
      a ? Py_BuildValue("{s:O}", "exc_info", exc && exc != Py_None ? exc : Py_False) : NULL;
  if (kw)
    res = PyObject_Call(error, a, kw);
  Py_XDECREF(kw);
  Py_XDECREF(a);
  Py_DECREF(error);
done:
  Py_DECREF(context);
  Py_XDECREF(exc);
  Py_XDECREF(logger);
  Py_XDECREF(logging);
  Py_XDECREF(msg);
  return res;
}

/* Sends `context` to the wheel's handler, or to the default one.  A handler
 * that raises is reported through the default handler, and if even that
 * fails, as unraisable.  Never leaves an exception set. */
void pw__call_handler(WheelObject *wheel, PyObject *context) {
  PyObject *res, *h = NULL;
  if (wheel) {
    Py_BEGIN_CRITICAL_SECTION(wheel); /* set_exception_handler may swap it */
    h = Py_XNewRef(wheel->handler);
    Py_END_CRITICAL_SECTION();
  }
  if (h) {
    res = PyObject_CallFunctionObjArgs(h, (PyObject *)wheel, context, NULL);
    Py_DECREF(h);
    if (res) {
      Py_DECREF(res);
      return;
    }
    PyObject *exc = pw__fetch_exc();
    PyObject *ctx2 =
        Py_BuildValue("{s:s,s:O,s:O}", "message", "Unhandled error in exception handler",
                      "exception", exc ? exc : Py_None, "context", context);
    Py_XDECREF(exc);
    if (ctx2) {
      res = pw__default_handler_impl(ctx2);
      Py_DECREF(ctx2);
    }
  } else {
    res = pw__default_handler_impl(context);
  }
  if (res)
    Py_DECREF(res);
  else
    PyErr_WriteUnraisable(context);
}

/* Reports the exception raised by handle h's callback; clears it. */
void pw__report_callback_error(core *c, WheelObject *owner, HandleObject *h) {
  core_lock(c);
  c->errors++;
  core_unlock(c);
  PyObject *exc = pw__fetch_exc();
  PyObject *ctx = Py_BuildValue("{s:s,s:O,s:O}", "message", "Exception in timer callback",
                                "exception", exc ? exc : Py_None, "handle", (PyObject *)h);
  Py_XDECREF(exc);
  if (!ctx) {
    PyErr_WriteUnraisable((PyObject *)h);
    return;
  }
  pw__call_handler(owner, ctx);
  Py_DECREF(ctx);
}

/* Parses the one argument of a method that also takes it by keyword, as
 * asyncio's and the stubs' signatures say (advance(seconds=1.0)). */
PyObject *pw__one_arg(const char *fname, const char *kwname, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw == 1 &&
      (nargs == 1 || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), kwname) == 0))
    return args[0];
  if (nkw && nargs + nkw == 1)
    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname,
                 PyTuple_GET_ITEM(kwnames, 0));
  else
    PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument (%zd given)", fname,
                 nargs + nkw);
  return NULL;
}
