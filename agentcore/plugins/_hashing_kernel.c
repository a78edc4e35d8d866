/*
 * The compiled kernel of the built-in ``hashing-v1`` embedder (optional).
 *
 * ``embed_rows`` computes, for each row (text) of a batch, exactly what
 * ``HashingEmbedder._embed_batch``'s numpy path computes before normalisation: the
 * row's features (each kept stem's features in text order, then the pair features
 * of consecutive kept stems), counted once per distinct hash with the signed weight
 * of its first occurrence times the float32 tf factor of its repeats, bucketed by
 * ``(hash >> 1) % dimension``; each bucket sums its values in float64 from 0.0 in
 * ascending hash order (as numpy's bincount did over features sorted by hash), and
 * the row is the float32 of those sums. ``stem_ids`` looks each token up in the
 * vocabulary's dict.
 *
 * Only the CPython C API and the buffer protocol: building needs a C compiler and
 * nothing else. Built with IEEE semantics (no fast-math, no contraction).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t MIX_A = 0x9E3779B97F4A7C15ULL;
static const uint64_t MIX_B = 0x632BE59BD9B4E019ULL;
static const uint64_t MIX_C = 0xBF58476D1CE4E5B9ULL;

/* _mix of hashing_embedder.py: uint64 wrapping arithmetic. */
static inline uint64_t mix(uint64_t left, uint64_t right) {
    uint64_t value = left * MIX_A + (right ^ MIX_B);
    value ^= value >> 31;
    value *= MIX_C;
    value ^= value >> 29;
    return value;
}

typedef struct {
    uint64_t hash;
    float value;
} Item;

/* ---- buffers ------------------------------------------------------------------ */

/* The buffer of ``obj`` as a C-contiguous array of one scalar kind: ``kind`` is 'i'
 * (signed), 'u' (unsigned) or 'f' (floating point), of ``size`` bytes per item. */
static int get_array(PyObject *obj, Py_buffer *view, const char *name, char kind, Py_ssize_t size,
                     int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a contiguous%s array", name,
                     writable ? " writable" : "");
        return -1;
    }
    const char *format = view->format ? view->format : "B";
    if (*format == '@' || *format == '=') {
        format++;
    } else if (*format == '<') {
#if PY_BIG_ENDIAN
        format = "?"; /* foreign byte order */
#else
        format++;
#endif
    }
    int ok = view->itemsize == size && format[0] != '\0' && format[1] == '\0';
    if (ok) {
        switch (kind) {
        case 'i':
            ok = strchr("bhilq", format[0]) != NULL;
            break;
        case 'u':
            ok = strchr("BHILQ", format[0]) != NULL;
            break;
        default:
            ok = strchr("efd", format[0]) != NULL;
            break;
        }
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: expected %s%zd items, got format %s of %zd bytes",
                     name, kind == 'i' ? "int" : kind == 'u' ? "uint" : "float", size * 8,
                     view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* ---- sorting a bucket's few items by hash --------------------------------------- */

static void insertion_sort(Item *items, Py_ssize_t n) {
    for (Py_ssize_t i = 1; i < n; i++) {
        Item item = items[i];
        Py_ssize_t j = i;
        while (j > 0 && items[j - 1].hash > item.hash) {
            items[j] = items[j - 1];
            j--;
        }
        items[j] = item;
    }
}

/* Bottom-up merge sort (runs of 16 sorted by insertion first); ``spare`` holds n items. */
static void merge_sort(Item *items, Py_ssize_t n, Item *spare) {
    const Py_ssize_t run = 16;
    for (Py_ssize_t i = 0; i < n; i += run) {
        insertion_sort(items + i, n - i < run ? n - i : run);
    }
    Item *from = items, *to = spare;
    for (Py_ssize_t width = run; width < n; width *= 2) {
        for (Py_ssize_t left = 0; left < n; left += 2 * width) {
            Py_ssize_t middle = left + width < n ? left + width : n;
            Py_ssize_t right = left + 2 * width < n ? left + 2 * width : n;
            Py_ssize_t a = left, b = middle, k = left;
            while (a < middle && b < right) {
                to[k++] = from[b].hash < from[a].hash ? from[b++] : from[a++];
            }
            while (a < middle) {
                to[k++] = from[a++];
            }
            while (b < right) {
                to[k++] = from[b++];
            }
        }
        Item *swap = from;
        from = to;
        to = swap;
    }
    if (from != items) {
        memcpy(items, from, (size_t)n * sizeof(Item));
    }
}

/* ---- embed_rows ----------------------------------------------------------------- */

typedef struct {
    const int64_t *stems; /* each token's stem id, -1 when dropped */
    Py_ssize_t n_stems;
    const Py_ssize_t *lengths; /* tokens per row */
    Py_ssize_t rows;
    const int64_t *start;
    const int64_t *count;
    Py_ssize_t n_vocabulary; /* valid stem ids: below this */
    const uint64_t *hashes;
    const float *signed_weights;
    Py_ssize_t n_features; /* valid feature positions: below this */
    const float *tf;
    Py_ssize_t n_tf;
    float pair_weight;
    uint64_t dimension;
    float *out;
    Py_ssize_t most; /* the most features any row has (scratch sizes) */
} Job;

/* Scratch memory for the rows of one call. */
typedef struct {
    uint64_t *hashes;  /* the row's features, in order */
    float *weights;    /* their signed weights */
    uint32_t *table;   /* open addressing: 1 + index of the distinct hash, 0 empty */
    Item *distinct;    /* distinct hashes with their first weight, then scaled */
    uint32_t *repeats; /* occurrences of each distinct hash */
    uint32_t *bucket;  /* each distinct hash's bucket */
    Item *grouped;     /* distinct hashes grouped by bucket */
    Item *spare;       /* merge sort's second buffer */
    uint32_t *ends;    /* per bucket: where its group ends in ``grouped`` */
} Scratch;

static void free_scratch(Scratch *s) {
    free(s->hashes);
    free(s->weights);
    free(s->table);
    free(s->distinct);
    free(s->repeats);
    free(s->bucket);
    free(s->grouped);
    free(s->spare);
    free(s->ends);
}

static size_t table_size(Py_ssize_t n) {
    size_t size = 16;
    while (size < 2 * (size_t)n) {
        size *= 2;
    }
    return size;
}

static int alloc_scratch(Scratch *s, Py_ssize_t most, uint64_t dimension) {
    size_t n = (size_t)(most > 0 ? most : 1);
    memset(s, 0, sizeof(*s));
    s->hashes = malloc(n * sizeof(uint64_t));
    s->weights = malloc(n * sizeof(float));
    s->table = malloc(table_size((Py_ssize_t)n) * sizeof(uint32_t));
    s->distinct = malloc(n * sizeof(Item));
    s->repeats = malloc(n * sizeof(uint32_t));
    s->bucket = malloc(n * sizeof(uint32_t));
    s->grouped = malloc(n * sizeof(Item));
    s->spare = malloc(n * sizeof(Item));
    s->ends = malloc((size_t)dimension * sizeof(uint32_t));
    if (!s->hashes || !s->weights || !s->table || !s->distinct || !s->repeats || !s->bucket ||
        !s->grouped || !s->spare || !s->ends) {
        free_scratch(s);
        return -1;
    }
    return 0;
}

/* One row: its features from ``stems[first : first + length]`` into ``out_row``.
 * 0 on success, -1 when the buffers turn out inconsistent (checked again here, as the
 * numbers are read without the GIL), -2 when a repeat count passes the tf table. */
static int embed_row(const Job *job, Scratch *s, Py_ssize_t first, Py_ssize_t length,
                     float *out_row) {
    Py_ssize_t n = 0;
    /* each kept stem's features, in text order */
    for (Py_ssize_t i = first; i < first + length; i++) {
        int64_t stem = job->stems[i];
        if (stem == -1) {
            continue;
        }
        if (stem < 0 || stem >= job->n_vocabulary) {
            return -1;
        }
        int64_t at = job->start[stem], c = job->count[stem];
        if (at < 0 || c < 1 || c > job->n_features - at || c > job->most - n) {
            return -1;
        }
        memcpy(s->hashes + n, job->hashes + at, (size_t)c * sizeof(uint64_t));
        memcpy(s->weights + n, job->signed_weights + at, (size_t)c * sizeof(float));
        n += c;
    }
    /* then the pairs of consecutive kept stems (their word features: the first) */
    int64_t previous = -1;
    for (Py_ssize_t i = first; i < first + length; i++) {
        int64_t stem = job->stems[i];
        if (stem == -1) {
            continue;
        }
        if (previous >= 0) {
            if (n >= job->most) {
                return -1;
            }
            uint64_t pair = mix(job->hashes[job->start[previous]], job->hashes[job->start[stem]]);
            s->hashes[n] = pair;
            s->weights[n] = (pair & 1) ? job->pair_weight : -job->pair_weight;
            n++;
        }
        previous = stem;
    }
    memset(out_row, 0, (size_t)job->dimension * sizeof(float));
    if (n == 0) {
        return 0;
    }
    if (n >= job->n_tf || n >= (Py_ssize_t)(UINT32_MAX / 4)) {
        return -2; /* a repeat count could pass the table */
    }
    /* distinct hashes, each with its first weight and its number of occurrences */
    size_t size = table_size(n), mask = size - 1;
    int bits = 0;
    while (((size_t)1 << bits) < size) {
        bits++;
    }
    memset(s->table, 0, size * sizeof(uint32_t));
    Py_ssize_t distinct = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t hash = s->hashes[i];
        size_t slot = (size_t)((hash * MIX_A) >> (64 - bits));
        for (;;) {
            uint32_t found = s->table[slot];
            if (found == 0) {
                s->table[slot] = (uint32_t)(distinct + 1);
                s->distinct[distinct].hash = hash;
                s->distinct[distinct].value = s->weights[i];
                s->repeats[distinct] = 1;
                distinct++;
                break;
            }
            if (s->distinct[found - 1].hash == hash) {
                s->repeats[found - 1]++;
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    /* scale by the tf factor (a float32 product; 1.0 for a single occurrence), and
     * group by bucket with a counting sort */
    uint64_t dimension = job->dimension;
    uint32_t *ends = s->ends;
    memset(ends, 0, (size_t)dimension * sizeof(uint32_t));
    int power_of_two = (dimension & (dimension - 1)) == 0;
    for (Py_ssize_t u = 0; u < distinct; u++) {
        float factor = job->tf[s->repeats[u]];
        s->distinct[u].value = s->distinct[u].value * factor;
        uint64_t high = s->distinct[u].hash >> 1;
        uint32_t b = (uint32_t)(power_of_two ? high & (dimension - 1) : high % dimension);
        s->bucket[u] = b;
        ends[b]++;
    }
    uint32_t total = 0;
    for (uint64_t b = 0; b < dimension; b++) {
        total += ends[b];
        ends[b] = total - ends[b]; /* the group's start, for now */
    }
    for (Py_ssize_t u = 0; u < distinct; u++) {
        s->grouped[ends[s->bucket[u]]++] = s->distinct[u]; /* the start moves to the end */
    }
    /* each bucket: its hashes in ascending order, summed in float64 from 0.0 */
    uint32_t begin = 0;
    for (uint64_t b = 0; b < dimension; b++) {
        uint32_t end = ends[b];
        if (end == begin) {
            continue;
        }
        Item *group = s->grouped + begin;
        Py_ssize_t items = (Py_ssize_t)(end - begin);
        if (items <= 32) {
            insertion_sort(group, items);
        } else {
            merge_sort(group, items, s->spare);
        }
        double sum = 0.0;
        for (Py_ssize_t k = 0; k < items; k++) {
            sum += (double)group[k].value;
        }
        out_row[b] = (float)sum;
        begin = end;
    }
    return 0;
}

PyDoc_STRVAR(embed_rows_doc,
             "embed_rows(stems, lengths, start, count, hashes, signed, tf_factors, pair_weight, "
             "dimension, out, /)\n--\n\n"
             "Write each row's bucket sums (before normalisation) into ``out``.\n\n"
             "``stems``: int64 stem id of each token (-1: dropped), rows one after another; "
             "``lengths``: a list of each row's token count; ``start``, ``count`` (int64), "
             "``hashes`` (uint64), ``signed`` (float32): the vocabulary; ``tf_factors``: "
             "float32 ``1 + log(n)`` by n; ``out``: float32, rows * dimension, written whole.\n"
             "Returns False, having written nothing useful, when a row has as many features "
             "as the tf table has entries (the caller takes its numpy path); raises "
             "ValueError or TypeError on inconsistent arguments.");

static PyObject *embed_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "embed_rows() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer views[7];
    int held = 0;
    PyObject *result = NULL;
    Py_ssize_t *lengths = NULL;
    Scratch scratch;
    int have_scratch = 0;
    static const char *names[7] = {"stems", "start", "count", "hashes", "signed", "tf_factors",
                                   "out"};
    static const char kinds[7] = {'i', 'i', 'i', 'u', 'f', 'f', 'f'};
    static const Py_ssize_t sizes[7] = {8, 8, 8, 8, 4, 4, 4};
    PyObject *objects[7] = {args[0], args[2], args[3], args[4], args[5], args[6], args[9]};
    for (; held < 7; held++) {
        if (get_array(objects[held], &views[held], names[held], kinds[held], sizes[held],
                      held == 6) < 0) {
            goto done;
        }
    }
    double pair_weight = PyFloat_AsDouble(args[7]);
    if (pair_weight == -1.0 && PyErr_Occurred()) {
        goto done;
    }
    Py_ssize_t dimension = PyLong_AsSsize_t(args[8]);
    if (dimension == -1 && PyErr_Occurred()) {
        goto done;
    }
    if (dimension < 1 || dimension > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "dimension must be in 1 .. 2**32 - 1");
        goto done;
    }
    Job job;
    job.stems = views[0].buf;
    job.n_stems = views[0].len / 8;
    job.start = views[1].buf;
    job.count = views[2].buf;
    job.n_vocabulary = views[1].len / 8 < views[2].len / 8 ? views[1].len / 8 : views[2].len / 8;
    job.hashes = views[3].buf;
    job.signed_weights = views[4].buf;
    job.n_features = views[3].len / 8 < views[4].len / 4 ? views[3].len / 8 : views[4].len / 4;
    job.tf = views[5].buf;
    job.n_tf = views[5].len / 4;
    job.pair_weight = (float)pair_weight;
    job.dimension = (uint64_t)dimension;
    job.out = views[6].buf;

    PyObject *sequence = PySequence_Fast(args[1], "lengths: expected a list of ints");
    if (sequence == NULL) {
        goto done;
    }
    job.rows = PySequence_Fast_GET_SIZE(sequence);
    lengths = PyMem_Malloc((size_t)(job.rows > 0 ? job.rows : 1) * sizeof(Py_ssize_t));
    if (lengths == NULL) {
        Py_DECREF(sequence);
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t tokens = 0;
    for (Py_ssize_t r = 0; r < job.rows; r++) {
        Py_ssize_t length = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(sequence, r));
        if (length == -1 && PyErr_Occurred()) {
            Py_DECREF(sequence);
            goto done;
        }
        if (length < 0 || length > job.n_stems - tokens) {
            Py_DECREF(sequence);
            PyErr_SetString(PyExc_ValueError, "lengths do not add up to the tokens in stems");
            goto done;
        }
        lengths[r] = length;
        tokens += length;
    }
    Py_DECREF(sequence);
    job.lengths = lengths;
    if (tokens != job.n_stems) {
        PyErr_SetString(PyExc_ValueError, "lengths do not add up to the tokens in stems");
        goto done;
    }
    if (views[6].len / 4 != job.rows * dimension) {
        PyErr_SetString(PyExc_ValueError, "out must hold len(lengths) * dimension floats");
        goto done;
    }
    if (job.n_tf < 2) {
        PyErr_SetString(PyExc_ValueError, "tf_factors must hold at least 2 factors");
        goto done;
    }
    /* check the stems against the vocabulary, and size the scratch for the longest row */
    job.most = 0;
    Py_ssize_t first = 0;
    for (Py_ssize_t r = 0; r < job.rows; r++) {
        Py_ssize_t features = 0, kept = 0;
        for (Py_ssize_t i = first; i < first + lengths[r]; i++) {
            int64_t stem = job.stems[i];
            if (stem == -1) {
                continue;
            }
            if (stem < 0 || stem >= job.n_vocabulary) {
                PyErr_Format(PyExc_ValueError, "stem id %lld is not in the vocabulary",
                             (long long)stem);
                goto done;
            }
            int64_t at = job.start[stem], c = job.count[stem];
            if (at < 0 || c < 1 || c > job.n_features - at) {
                PyErr_Format(PyExc_ValueError, "stem %lld's features are not in the arrays",
                             (long long)stem);
                goto done;
            }
            features += c;
            kept++;
        }
        features += kept > 0 ? kept - 1 : 0;
        if (features >= job.n_tf) {
            result = Py_NewRef(Py_False); /* repeats could pass the table: numpy's path */
            goto done;
        }
        job.most = features > job.most ? features : job.most;
        first += lengths[r];
    }
    if (alloc_scratch(&scratch, job.most, job.dimension) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    have_scratch = 1;
    int status = 0;
    Py_BEGIN_ALLOW_THREADS;
    first = 0;
    for (Py_ssize_t r = 0; r < job.rows && status == 0; r++) {
        status = embed_row(&job, &scratch, first, lengths[r], job.out + r * dimension);
        first += lengths[r];
    }
    Py_END_ALLOW_THREADS;
    if (status == -2) {
        result = Py_NewRef(Py_False);
    } else if (status < 0) {
        PyErr_SetString(PyExc_ValueError, "the vocabulary arrays changed during the call");
    } else {
        result = Py_NewRef(Py_True);
    }
done:
    if (have_scratch) {
        free_scratch(&scratch);
    }
    PyMem_Free(lengths);
    while (held > 0) {
        PyBuffer_Release(&views[--held]);
    }
    return result;
}

/* ---- stem_ids ----------------------------------------------------------------------- */

PyDoc_STRVAR(stem_ids_doc,
             "stem_ids(table, tokens, out, /)\n--\n\n"
             "Write ``table[token]`` of each of ``tokens`` (a list of str) into ``out`` "
             "(int64, one per token). Returns False at the first token not in ``table`` "
             "(``out`` then only partly written), else True.");

static PyObject *stem_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "stem_ids() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *table = args[0], *tokens = args[1];
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "table: expected a dict");
        return NULL;
    }
    if (!PyList_Check(tokens)) {
        PyErr_SetString(PyExc_TypeError, "tokens: expected a list");
        return NULL;
    }
    Py_buffer view;
    if (get_array(args[2], &view, "out", 'i', 8, 1) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t size = PyList_GET_SIZE(tokens);
    if (view.len / 8 != size) {
        PyErr_SetString(PyExc_ValueError, "out must hold one int64 per token");
        goto done;
    }
    int64_t *out = view.buf;
    /* ``size`` bounds the writes: a key of another type in ``table`` could run Python
     * code that grows ``tokens`` while it is read */
    for (Py_ssize_t i = 0; i < size && i < PyList_GET_SIZE(tokens); i++) {
        PyObject *token = PyList_GET_ITEM(tokens, i);
        if (!PyUnicode_CheckExact(token)) {
            PyErr_SetString(PyExc_TypeError, "tokens: expected str items");
            goto done;
        }
        /* held while looked up: a key of another type could run Python code */
        Py_INCREF(token);
        PyObject *value = PyDict_GetItemWithError(table, token);
        Py_XINCREF(value);
        Py_DECREF(token);
        if (value == NULL) {
            if (!PyErr_Occurred()) {
                result = Py_NewRef(Py_False);
            }
            goto done;
        }
        long long id = PyLong_AsLongLong(value);
        Py_DECREF(value);
        if (id == -1 && PyErr_Occurred()) {
            goto done;
        }
        out[i] = (int64_t)id;
    }
    if (PyList_GET_SIZE(tokens) != size) {
        PyErr_SetString(PyExc_ValueError, "tokens changed during the call");
        goto done;
    }
    result = Py_NewRef(Py_True);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"embed_rows", (PyCFunction)(void (*)(void))embed_rows, METH_FASTCALL, embed_rows_doc},
    {"stem_ids", (PyCFunction)(void (*)(void))stem_ids, METH_FASTCALL, stem_ids_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "agentcore.plugins._hashing_kernel",
    "The compiled kernel of the hashing-v1 embedder (optional; see hashing_embedder.py).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__hashing_kernel(void) { return PyModule_Create(&module_def); }
