/* One training step's statistics, computed where the weights and gradients lie.
 *
 * faultbench.monitor calls record() once per step with the addresses of the
 * weights after the update, their gradients, the weights before it (a copy
 * this call then refreshes), a bit per weight (bit i % 8 of byte i / 8)
 * that is set once the weight gets a nonzero gradient, the step's output
 * row, and the layer bounds.
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
#include <string.h>

/* Sums of squares are taken in float (or double) lanes over blocks of at
 * most BLOCK weights, and in double across blocks. */
#define BLOCK 256

/* Where the compiler has them (gcc or clang on x86-64), hand-written AVX2 and
 * AVX-512 versions of the float body, one chosen at load time by what the
 * processor offers; elsewhere, and for float64, the portable body only. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_BODIES 1
#include <immintrin.h>
#endif

typedef struct {
    double gg, dd, ww, nonzero; /* sums of squares: gradient, update, weights before */
} Sums;

/* The weights from i to end one by one: the few at a layer's edges that do
 * not fill a SIMD block. `seen` has one bit per weight (bit i % 8 of byte
 * i / 8). NaN counts as a nonzero gradient, as in the numpy path. */
#define EDGE(NAME, T)                                                                      \
    static void NAME(const T *weights, const T *grads, T *before, uint8_t *seen,           \
                     int64_t i, int64_t end, Sums *s)                                      \
    {                                                                                      \
        for (; i < end; i++) {                                                             \
            T w = weights[i], g = grads[i], b = before[i];                                 \
            T d = w - b;                                                                   \
            s->gg += (double)g * g;                                                        \
            s->dd += (double)d * d;                                                        \
            s->ww += (double)b * b;                                                        \
            if (g != 0) {                                                                  \
                s->nonzero += 1;                                                           \
                seen[i >> 3] |= (uint8_t)(1u << (i & 7));                                  \
            }                                                                              \
            before[i] = w;                                                                 \
        }                                                                                  \
    }

/* A block of n weights from i, with i a multiple of 8 and n a multiple of
 * 16 (so each 8 weights own one byte of `seen`), n <= BLOCK. The flags go
 * through a byte array so that the main loop vectorizes; eight of them then
 * become one byte of bits with one multiplication. */
#define PORTABLE_BODY(NAME, T)                                                             \
    static void NAME(const T *weights, const T *grads, T *before, uint8_t *seen,           \
                     int64_t i, int64_t n, Sums *s)                                        \
    {                                                                                      \
        T g2 = 0, d2 = 0, w2 = 0;                                                          \
        int32_t count = 0;                                                                 \
        uint8_t nonzero[BLOCK];                                                            \
        _Pragma("omp simd reduction(+ : g2, d2, w2, count)")                               \
        for (int64_t k = 0; k < n; k++) {                                                  \
            T w = weights[i + k], g = grads[i + k], b = before[i + k];                     \
            T d = w - b;                                                                   \
            g2 += g * g;                                                                   \
            d2 += d * d;                                                                   \
            w2 += b * b;                                                                   \
            nonzero[k] = g != 0;                                                           \
            count += g != 0;                                                               \
            before[i + k] = w;                                                             \
        }                                                                                  \
        for (int64_t k = 0; k < n; k += 8) {                                               \
            uint64_t flags = 0; /* byte e holds flag e, whatever the machine's order */    \
            for (int e = 0; e < 8; e++)                                                    \
                flags |= (uint64_t)nonzero[k + e] << (8 * e);                              \
            seen[(i + k) >> 3] |= (uint8_t)((flags * 0x0102040810204080ULL) >> 56);        \
        }                                                                                  \
        s->gg += g2;                                                                       \
        s->dd += d2;                                                                       \
        s->ww += w2;                                                                       \
        s->nonzero += count;                                                               \
    }

typedef void (*body_float_fn)(const float *, const float *, float *, uint8_t *, int64_t,
                              int64_t, Sums *);

EDGE(edge_float, float)
EDGE(edge_double, double)
PORTABLE_BODY(body_float_portable, float)
PORTABLE_BODY(body_double_portable, double)

#ifdef HAVE_X86_BODIES
__attribute__((target("avx2,fma"))) static double sum8(__m256 v)
{
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* Two 8-wide vectors per 16 weights, each sum split over two accumulators so
 * that the additions do not wait on each other. */
__attribute__((target("avx2,fma"))) static void body_float_avx2(const float *w, const float *g,
                                                                float *b, uint8_t *seen,
                                                                int64_t i, int64_t n, Sums *s)
{
    const __m256 zero = _mm256_setzero_ps();
    __m256 g2a = zero, g2b = zero, d2a = zero, d2b = zero, w2a = zero, w2b = zero;
    int count = 0;
    for (int64_t k = i; k < i + n; k += 16) {
        __m256 wa = _mm256_loadu_ps(w + k), wb = _mm256_loadu_ps(w + k + 8);
        __m256 ga = _mm256_loadu_ps(g + k), gb = _mm256_loadu_ps(g + k + 8);
        __m256 ba = _mm256_loadu_ps(b + k), bb = _mm256_loadu_ps(b + k + 8);
        __m256 da = _mm256_sub_ps(wa, ba), db = _mm256_sub_ps(wb, bb);
        g2a = _mm256_fmadd_ps(ga, ga, g2a);
        g2b = _mm256_fmadd_ps(gb, gb, g2b);
        d2a = _mm256_fmadd_ps(da, da, d2a);
        d2b = _mm256_fmadd_ps(db, db, d2b);
        w2a = _mm256_fmadd_ps(ba, ba, w2a);
        w2b = _mm256_fmadd_ps(bb, bb, w2b);
        _mm256_storeu_ps(b + k, wa);
        _mm256_storeu_ps(b + k + 8, wb);
        int ma = _mm256_movemask_ps(_mm256_cmp_ps(ga, zero, _CMP_NEQ_UQ)); /* NaN: nonzero */
        int mb = _mm256_movemask_ps(_mm256_cmp_ps(gb, zero, _CMP_NEQ_UQ));
        seen[k >> 3] |= (uint8_t)ma;
        seen[(k >> 3) + 1] |= (uint8_t)mb;
        count += __builtin_popcount((unsigned)ma) + __builtin_popcount((unsigned)mb);
    }
    s->gg += sum8(_mm256_add_ps(g2a, g2b));
    s->dd += sum8(_mm256_add_ps(d2a, d2b));
    s->ww += sum8(_mm256_add_ps(w2a, w2b));
    s->nonzero += count;
}

/* One 16-wide vector per 16 weights, alternating between two accumulators. */
__attribute__((target("avx512f"))) static void body_float_avx512(const float *w, const float *g,
                                                                 float *b, uint8_t *seen,
                                                                 int64_t i, int64_t n, Sums *s)
{
    const __m512 zero = _mm512_setzero_ps();
    __m512 g2[2] = {zero, zero}, d2[2] = {zero, zero}, w2[2] = {zero, zero};
    int count = 0;
    for (int64_t k = i, a = 0; k < i + n; k += 16, a ^= 1) {
        __m512 vw = _mm512_loadu_ps(w + k), vg = _mm512_loadu_ps(g + k);
        __m512 vb = _mm512_loadu_ps(b + k);
        __m512 d = _mm512_sub_ps(vw, vb);
        g2[a] = _mm512_fmadd_ps(vg, vg, g2[a]);
        d2[a] = _mm512_fmadd_ps(d, d, d2[a]);
        w2[a] = _mm512_fmadd_ps(vb, vb, w2[a]);
        _mm512_storeu_ps(b + k, vw);
        unsigned m = _mm512_cmp_ps_mask(vg, zero, _CMP_NEQ_UQ); /* NaN: nonzero */
        seen[k >> 3] |= (uint8_t)m;
        seen[(k >> 3) + 1] |= (uint8_t)(m >> 8);
        count += __builtin_popcount(m);
    }
    s->gg += _mm512_reduce_add_ps(_mm512_add_ps(g2[0], g2[1]));
    s->dd += _mm512_reduce_add_ps(_mm512_add_ps(d2[0], d2[1]));
    s->ww += _mm512_reduce_add_ps(_mm512_add_ps(w2[0], w2[1]));
    s->nonzero += count;
}
#endif

/* The float bodies, fastest last, and whether this processor runs each. */
typedef struct {
    const char *name;
    body_float_fn fn;
    int (*runs_here)(void);
} Body;

static int always(void) { return 1; }
#ifdef HAVE_X86_BODIES
static int has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int has_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}
#endif

static const Body bodies_built[] = {
    {"portable", body_float_portable, always},
#ifdef HAVE_X86_BODIES
    {"avx2", body_float_avx2, has_avx2},
    {"avx512", body_float_avx512, has_avx512},
#endif
};
#define BODIES_BUILT (sizeof bodies_built / sizeof *bodies_built)

/* The float body in use (see use() below). */
static const Body *body = &bodies_built[0];

/* Per layer: its edges one by one, the rest in SIMD blocks. */
#define STEP_KERNEL(NAME, T, EDGE_FN, BODY)                                                \
    static void NAME(const T *weights, const T *grads, T *before, uint8_t *seen,           \
                     double *out, const int64_t *bounds, Py_ssize_t layers)                \
    {                                                                                      \
        double nonzero = 0;                                                                \
        for (Py_ssize_t j = 0; j < layers; j++) {                                          \
            Sums s = {0, 0, 0, 0};                                                         \
            int64_t i = bounds[j], end = bounds[j + 1];                                    \
            int64_t aligned = (i + 7) & ~(int64_t)7;                                       \
            if (aligned > end)                                                             \
                aligned = end;                                                             \
            EDGE_FN(weights, grads, before, seen, i, aligned, &s);                         \
            for (i = aligned; end - i >= 16;) {                                            \
                int64_t n = (end - i) & ~(int64_t)15;                                      \
                if (n > BLOCK)                                                             \
                    n = BLOCK;                                                             \
                BODY(weights, grads, before, seen, i, n, &s);                              \
                i += n;                                                                    \
            }                                                                              \
            EDGE_FN(weights, grads, before, seen, i, end, &s);                             \
            out[1 + j] = sqrt(s.gg);                                                       \
            out[1 + layers + j] = sqrt(s.dd);                                              \
            out[1 + 2 * layers + j] = sqrt(s.ww);                                          \
            nonzero += s.nonzero;                                                          \
        }                                                                                  \
        out[0] = nonzero;                                                                  \
    }

STEP_KERNEL(record_float, float, edge_float, body->fn)
STEP_KERNEL(record_double, double, edge_double, body_double_portable)

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

/* bodies(): the names of the float bodies this build and processor run, fastest last. */
static PyObject *bodies(PyObject *self, PyObject *unused)
{
    PyObject *names = PyList_New(0);
    for (size_t k = 0; names != NULL && k < BODIES_BUILT; k++) {
        if (bodies_built[k].runs_here()) {
            PyObject *name = PyUnicode_FromString(bodies_built[k].name);
            if (name == NULL || PyList_Append(names, name) < 0)
                Py_CLEAR(names);
            Py_XDECREF(name);
        }
    }
    return names;
}

/* use(name): run record() on that float body (for tests); returns the
 * previous one's name. */
static PyObject *use(PyObject *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL)
        return NULL;
    for (size_t k = 0; k < BODIES_BUILT; k++) {
        if (strcmp(bodies_built[k].name, name) == 0 && bodies_built[k].runs_here()) {
            PyObject *previous = PyUnicode_FromString(body->name);
            if (previous != NULL)
                body = &bodies_built[k];
            return previous;
        }
    }
    PyErr_Format(PyExc_ValueError, "use(%R): not a float body available here", arg);
    return NULL;
}

static PyMethodDef methods[] = {
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL,
     "record(weights, grads, before, seen, out, bounds, layers, wide): one step's statistics."},
    {"inactive", (PyCFunction)(void (*)(void))inactive, METH_FASTCALL,
     "inactive(address, shape, wide): units (last dimension) of an array never > 0."},
    {"bodies", bodies, METH_NOARGS, "bodies(): the float bodies available here, fastest last."},
    {"use", use, METH_O, "use(name): record() runs on that float body; returns the previous."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "faultbench._stepstats",
    "One training step's statistics in one pass (see faultbench.monitor).", -1, methods,
};

PyMODINIT_FUNC PyInit__stepstats(void)
{
    for (size_t k = 0; k < BODIES_BUILT; k++) /* the fastest this processor runs */
        if (bodies_built[k].runs_here())
            body = &bodies_built[k];
    return PyModule_Create(&module);
}
