/* One training step's statistics, computed where the weights and gradients lie.
 *
 * faultbench.monitor calls record() once per step with the addresses of the
 * weights after the update, their gradients, the weights before it (a copy
 * this call then refreshes), a byte per weight that is set once the weight
 * gets a nonzero gradient, the step's output row, and the layer bounds.
 * It writes, per layer, the norms of the gradient, of the update and of the
 * weights before it, plus the count of nonzero gradients. inactive() counts
 * the units of one ReLU output that are 0 on the whole batch, as soon as the
 * output exists, so the monitor need not keep it.
 *
 * Why C: on a small model a step is a fraction of a millisecond, and doing
 * this with torch or numpy calls (or copying the tensors for later) slows
 * training by 10% or more, mostly by evicting torch's code and data from the
 * caches. One pass over data that is still in cache costs a few percent.
 *
 * The addresses come from tensors and arrays the monitor owns and keeps
 * alive; nothing here checks them. NaN counts as a nonzero gradient, as in
 * the numpy path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

/* Sums of squares are taken in T over blocks of BLOCK weights (so they run
 * in SIMD lanes) and in double across blocks. */
#define BLOCK 256

/* On x86-64 Linux (gcc or clang), also compile an AVX2 version, chosen at
 * load time on processors that have it; elsewhere, the baseline only. */
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#define VERSIONS __attribute__((target_clones("avx2", "default")))
#else
#define VERSIONS
#endif

#define STEP_KERNEL(NAME, T)                                                               \
    VERSIONS static void NAME(const T *weights, const T *grads, T *before, uint8_t *seen,  \
                     double *out, const int64_t *bounds, Py_ssize_t layers)                \
    {                                                                                      \
        double nonzero = 0;                                                                \
        for (Py_ssize_t j = 0; j < layers; j++) {                                          \
            double gg = 0, dd = 0, ww = 0;                                                 \
            for (int64_t start = bounds[j]; start < bounds[j + 1]; start += BLOCK) {       \
                int64_t end = start + BLOCK < bounds[j + 1] ? start + BLOCK : bounds[j + 1]; \
                T g2 = 0, d2 = 0, w2 = 0;                                                  \
                int32_t count = 0;                                                         \
                _Pragma("omp simd reduction(+ : g2, d2, w2, count)")                       \
                for (int64_t i = start; i < end; i++) {                                    \
                    T w = weights[i], g = grads[i], b = before[i];                         \
                    T d = w - b;                                                           \
                    g2 += g * g;                                                           \
                    d2 += d * d;                                                           \
                    w2 += b * b;                                                           \
                    count += g != 0; /* NaN is nonzero */                                  \
                    before[i] = w;                                                         \
                }                                                                          \
                gg += g2;                                                                  \
                dd += d2;                                                                  \
                ww += w2;                                                                  \
                nonzero += count;                                                          \
                if (count)                                                                 \
                    for (int64_t i = start; i < end; i++)                                  \
                        seen[i] |= grads[i] != 0;                                          \
            }                                                                              \
            out[1 + j] = sqrt(gg);                                                         \
            out[1 + layers + j] = sqrt(dd);                                                \
            out[1 + 2 * layers + j] = sqrt(ww);                                            \
        }                                                                                  \
        out[0] = nonzero;                                                                  \
    }

STEP_KERNEL(record_float, float)
STEP_KERNEL(record_double, double)

#define INACTIVE_KERNEL(NAME, T)                                                           \
    static Py_ssize_t NAME(const T *x, Py_ssize_t rows, Py_ssize_t units)                  \
    {                                                                                      \
        Py_ssize_t inactive = 0;                                                           \
        for (Py_ssize_t j = 0; j < units; j++) {                                           \
            Py_ssize_t i = 0;                                                              \
            while (i < rows && !(x[i * units + j] > 0)) /* NaN is not > 0 */               \
                i++;                                                                       \
            inactive += i == rows;                                                         \
        }                                                                                  \
        return inactive;                                                                   \
    }

INACTIVE_KERNEL(inactive_float, float)
INACTIVE_KERNEL(inactive_double, double)

/* record() takes `addresses` nonzero addresses, then `sizes` counts >= 0,
 * then a flag that is true for float64 data and false for float32.
 * Returns 0, or -1 with a Python exception set. */
static int parse(const char *name, PyObject *const *args, Py_ssize_t nargs, int addresses,
                 int sizes, void **at, Py_ssize_t *size, int *wide)
{
    if (nargs != addresses + sizes + 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes %d arguments, got %zd", name,
                     addresses + sizes + 1, nargs);
        return -1;
    }
    for (int k = 0; k < addresses; k++) {
        at[k] = PyLong_AsVoidPtr(args[k]);
        if (at[k] == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s() argument %d is a null address", name, k);
            return -1;
        }
    }
    for (int k = 0; k < sizes; k++) {
        size[k] = PyLong_AsSsize_t(args[addresses + k]);
        if (size[k] < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s() argument %d must be >= 0", name,
                             addresses + k);
            return -1;
        }
    }
    *wide = PyObject_IsTrue(args[addresses + sizes]);
    return *wide < 0 ? -1 : 0;
}

/* inactive(address, shape, wide): how many of the units (the last dimension
 * of a C-contiguous array of that shape) are never > 0; -1 for an empty array.
 * It takes the shape itself: asking torch for sizes costs more than this. */
static PyObject *inactive(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) < 1) {
        PyErr_SetString(PyExc_TypeError, "inactive() takes an address, a non-empty shape tuple "
                                         "and a flag");
        return NULL;
    }
    void *at = PyLong_AsVoidPtr(args[0]);
    if (at == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "inactive() argument 0 is a null address");
        return NULL;
    }
    Py_ssize_t dims = PyTuple_GET_SIZE(args[1]), rows = 1, units = 0;
    for (Py_ssize_t k = 0; k < dims; k++) {
        Py_ssize_t size = PyLong_AsSsize_t(PyTuple_GET_ITEM(args[1], k));
        if (size < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "inactive() shape sizes must be >= 0");
            return NULL;
        }
        if (k + 1 < dims)
            rows *= size;
        else
            units = size;
    }
    int wide = PyObject_IsTrue(args[2]);
    if (wide < 0)
        return NULL;
    if (rows == 0 || units == 0)
        return PyLong_FromLong(-1);
    return PyLong_FromSsize_t(wide ? inactive_double(at, rows, units)
                                   : inactive_float(at, rows, units));
}

/* record(weights, grads, before, seen, out, bounds, layers, wide): one step's
 * statistics (see the top of this file). */
static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    void *at[6];
    Py_ssize_t layers;
    int wide;
    if (parse("record", args, nargs, 6, 1, at, &layers, &wide) < 0)
        return NULL;
    if (wide)
        record_double(at[0], at[1], at[2], at[3], at[4], at[5], layers);
    else
        record_float(at[0], at[1], at[2], at[3], at[4], at[5], layers);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL,
     "record(weights, grads, before, seen, out, bounds, layers, wide): one step's statistics."},
    {"inactive", (PyCFunction)(void (*)(void))inactive, METH_FASTCALL,
     "inactive(address, shape, wide): units (last dimension) of an array never > 0."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "faultbench._stepstats",
    "One training step's statistics in one pass (see faultbench.monitor).", -1, methods,
};

PyMODINIT_FUNC PyInit__stepstats(void) { return PyModule_Create(&module); }
