/* Shared pieces of the CPython binding. The binding only converts and validates
 * arguments, releases the GIL and calls the engine (csrc/rlxc.h). */
#ifndef RLXC_BINDINGS_COMMON_H
#define RLXC_BINDINGS_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define PY_ARRAY_UNIQUE_SYMBOL rlxc_ARRAY_API
#ifndef RLXC_BINDINGS_MODULE
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>

#include <unistd.h>
#include "pythread.h"
#include "rlxc.h"

typedef struct {
    PyObject_HEAD
    rlxc_layer layer;
    int busy; /* pipelines computing with this layer right now: fields and weights are frozen */
    long busy_pid; /* the process whose pipelines set `busy` (see layer_forget_parent_runs) */
    PyObject *weakrefs;
    PyObject *views[RLXC_W_COUNT]; /* owners of borrowed weight bytes (set_weight_view) */
} LayerObject;

/* fork() while another thread runs a pipeline leaves the child with that run's freeze on the
 * layer but without the run, which would never end: a child forgets its parent's freezes. */
static inline void layer_forget_parent_runs(LayerObject *l) {
    if (l->busy && l->busy_pid != (long)getpid()) l->busy = 0;
}

typedef struct {
    PyObject_HEAD
    rlxc_pipeline *p;
    PyObject *layers; /* tuple of Layer */
    PyThread_type_lock lock;
    long lock_pid; /* the process in which `lock` is held; 0 when free */
    unsigned long hook_thread; /* the thread running a Python hook of this pipeline's call, or 0 */
    Py_ssize_t kv_views;       /* live kv_cache arrays: a reset may not re-allocate the caches under them */
} PipelineObject;

/* RuntimeError unless the pipeline was initialized. */
int pipeline_ready(PipelineObject *self);
/* Take the pipeline's lock (waiting without the GIL) and freeze its layers; pipeline_leave undoes
 * it. -1 with a RuntimeError from inside a hook of this pipeline's running call (it holds the lock). */
int pipeline_enter(PipelineObject *self);
void pipeline_leave(PipelineObject *self);

extern PyTypeObject Layer_Type;
extern PyTypeObject Pipeline_Type;
extern PyTypeObject Engine_Type;
extern PyMethodDef rlxc_ops_methods[];
int rlxc_layer_type_prepare(void);

/* Enum classes registered by the Python package (NormType, FfnType, Activation, RopeLayout). */
enum { ENUM_NORM, ENUM_FFN, ENUM_ACT, ENUM_ROPE, ENUM_COUNT };
extern PyObject *rlxc_enum_classes[ENUM_COUNT];

/* Argument helpers (args.c). */

/* The array itself (borrowed) if obj is an aligned, native, C-contiguous float32 ndarray with
 * lo <= ndim <= hi; otherwise NULL with a TypeError/ValueError naming `name`. */
PyArrayObject *as_f32(PyObject *obj, const char *name, int lo, int hi);
/* ValueError naming `name` if any element is NaN or infinite. */
int check_finite(PyArrayObject *a, const char *name);
/* A new C-contiguous array of the given shape and type. */
PyArrayObject *new_array(int ndim, const npy_intp *dims, int type);
/* Python int -> C int with a ValueError naming `name` when out of [lo, hi]. */
int int_arg(PyObject *obj, const char *name, long lo, long hi, int *out);
/* ValueError naming `name` unless a's data is aligned for reading rows of type t in place. */
int check_aligned(PyArrayObject *a, rlxc_wtype t, const char *name);
/* A weight type's name ("f32", "q4_k", ... as rlxc_wtype_name) -> rlxc_wtype; -1 with ValueError otherwise. */
int wtype_arg(const char *s, const char *name);
/* "q8" / "f32" (Python str) -> rlxc_act; -1 with a TypeError / ValueError naming `name` otherwise. */
int act_arg(PyObject *obj, const char *name, rlxc_act *out);
/* Python str -> its UTF-8 text (owned by obj); NULL with a TypeError / ValueError naming `name`
 * for other types, text that is not valid Unicode and embedded NUL characters. */
const char *str_arg(PyObject *obj, const char *name);
/* Python real number -> double; TypeError naming `name` for non-numbers; with `finite`, ValueError
 * naming it for NaN, infinity and magnitudes beyond float32 (the engine computes in float). */
int real_arg(PyObject *obj, const char *name, int finite, double *out);

#endif
