/* batch_walk.c: the header walk of plain (uncompressed v2) batches, a method of _decode. */
#ifndef TOPICLAKE_BATCH_WALK_H
#define TOPICLAKE_BATCH_WALK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

PyObject *walk_plain(PyObject *self, PyObject *args);

#endif
