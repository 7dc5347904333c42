/*
 * module.c -- pywheel._core, the module: its functions table, multi-phase
 * init (module_exec creates the five heap types from their specs), the
 * module state's traverse/clear, and PyInit__core.
 *
 * Owns: pw__moddef and modstate's lifetime.  Must not touch: a core or a
 * handle; the types' behaviour lives in handle.c, wheel.c and manual.c.
 * Ownership, lock order and the free-threading notes: module.h.
 */
#include "module.h"

static PyMethodDef module_methods[] = {
    {"_shutdown", pw__mod_shutdown, METH_O, "atexit hook: close every wheel, wait out a grace."},
    {"_after_fork_child", pw__mod_after_fork_child, METH_NOARGS, NULL},
    {"_fail_alloc_after", pw__mod_fail_alloc_after, METH_O,
     "Test hook: make the n-th next handle allocation fail (0 disables)."},
    {"_batch_live", pw__mod_batch_live, METH_O,
     "Test hook: (kept count, scanned count) of a wheel's unstarted batch entries."},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *m) {
  /* fork and exit are process-wide, and so are the wheel threads: one
   * interpreter owns them.  (3.12+ says so with Py_mod_multiple_interpreters.) */
  if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
    PyErr_SetString(PyExc_ImportError, "pywheel._core cannot be loaded in a subinterpreter");
    return -1;
  }
  static pw_once atfork_once = PW_ONCE_INIT;
  pw_call_once(&atfork_once, pw__register_atfork);
  modstate *st = PyModule_GetState(m);
  st->handle_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pw__handle_spec, NULL);
  if (!st->handle_type || PyModule_AddType(m, st->handle_type) < 0)
    return -1;
  st->wheel_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pw__wheel_spec, NULL);
  if (!st->wheel_type || PyModule_AddType(m, st->wheel_type) < 0)
    return -1;
  st->manual_type =
      (PyTypeObject *)PyType_FromModuleAndSpec(m, &pw__manual_spec, (PyObject *)st->wheel_type);
  if (!st->manual_type || PyModule_AddType(m, st->manual_type) < 0)
    return -1;
  st->loop_timers_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pw__loop_timers_spec, NULL);
  if (!st->loop_timers_type || PyModule_AddType(m, st->loop_timers_type) < 0)
    return -1;
  st->loop_soon_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pw__loop_soon_spec, NULL);
  if (!st->loop_soon_type || PyModule_AddType(m, st->loop_soon_type) < 0)
    return -1;
  return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg) {
  modstate *st = PyModule_GetState(m);
  Py_VISIT(st->handle_type);
  Py_VISIT(st->wheel_type);
  Py_VISIT(st->manual_type);
  Py_VISIT(st->loop_timers_type);
  Py_VISIT(st->loop_soon_type);
  return 0;
}

static int module_clear(PyObject *m) {
  modstate *st = PyModule_GetState(m);
  Py_CLEAR(st->handle_type);
  Py_CLEAR(st->wheel_type);
  Py_CLEAR(st->manual_type);
  Py_CLEAR(st->loop_timers_type);
  Py_CLEAR(st->loop_soon_type);
  return 0;
}

static void module_free(void *m) { module_clear(m); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#ifdef PW_FREE_THREADED
    /* True by module.h's rule: the core's lock where the GIL would be. */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

PyModuleDef pw__moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pywheel._core",
    .m_doc = "The C timing wheel, its native driver thread, and the Python binding.",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void) { return PyModuleDef_Init(&pw__moddef); }
