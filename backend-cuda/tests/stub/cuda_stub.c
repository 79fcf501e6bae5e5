/*
 * A stand-in for libcuda.so.1, so that the paths of a machine without a
 * usable GPU can be exercised on one with no driver at all. Every answer is
 * a plain int, as the backend reads them.
 *
 * Built twice by build.rs:
 *
 * - the minimal stub exports only what is needed before and during cuInit,
 *   which answers like a driver finding no device;
 * - the full stub (CUDA_STUB_FULL defined) exports every function the
 *   backend resolves: it lists devices, retains a pretend context for each,
 *   keeps a per-thread stack of contexts pushed (cuStubContextDepth), and
 *   answers CUDA_ERROR_NOT_SUPPORTED to everything that would need a GPU.
 *
 * Variables change the answers, to reach each check:
 *   CUDA_STUB_INIT_RESULT     what cuInit returns (minimal: 100,
 *                             CUDA_ERROR_NO_DEVICE; full: 0);
 *   CUDA_STUB_DRIVER_VERSION  what cuDriverGetVersion reports (12040);
 *   CUDA_STUB_DEVICE_COUNT    devices the full stub lists (1);
 *   CUDA_STUB_RETAIN_RESULT   what cuDevicePrimaryCtxRetain returns (0);
 *   CUDA_STUB_CC_MAJOR, CUDA_STUB_CC_MINOR
 *                             the devices' compute capability (9.0);
 *   CUDA_STUB_MODULE_RESULT   what cuModuleLoadDataEx returns (801), which
 *                             also records whether it was handed an ELF
 *                             image or text (cuStubLastImage).
 *
 * The full stub also keeps each thread's stream-capture mode, and can
 * play another thread's capture in global mode, under which a thread left
 * in that mode is refused allocations, frees and module loads (see
 * cuStubForeignGlobalCapture).
 *
 * Built a third time with CUDA_STUB_RUNS defined as well: streams, events,
 * captures and memory then work on host memory (copies run at once), a
 * module that CUDA_STUB_MODULE_RESULT=0 lets load has every entry point, and
 * cuStub* functions let a test count the frees and unloads performed, run
 * a callback inside each cuMemFree_v2, make the next end of a capture fail
 * with the stream left capturing, and ask whether a stream replacing one
 * left capturing waited for all the old one's work.
 *
 * The runs stub also keeps every cuMemAlloc_v2 allocation with its
 * context, for cuPointerGetAttribute (CONTEXT, DEVICE_ORDINAL) and
 * cuMemGetAddressRange_v2; answers cuStreamGetCtx with the context current
 * when the stream was made; counts each stream's destroys
 * (cuStubStreamDestroyed); offers a second context per device besides the
 * primary one (cuStubContext); and runs two kernels, handed out by
 * cuStubFunction("fill") and cuStubFunction("add") ("narrow" is a fill
 * that runs blocks of at most 32 threads), with the builtins' parameters
 * (the buffers' addresses, then the info's: n, then a float), at once or,
 * in a capture, as a kernel node every replay runs.
 *
 * Its graphs are kept as nodes and edges: a capture records each copy as a
 * memcpy node after the one before it (or, after cuStubBranchCaptures(1),
 * each after the capture's first node, which is no chain); the graph
 * functions read and change those edges; an executable keeps its own copy
 * of the graph, which cuGraphExecUpdate_v2 replaces only when the nodes and
 * edges are the same, and whose copies cuGraphLaunch runs at once.
 * cuStubGraphEdges hands out the edges of the graph last instantiated or
 * updated from, cuStubInstantiations and cuStubUpdatesInPlace count those,
 * and cuStubEdgeCalls counts the calls that read or change edges
 * (cuStubPlainEdgeCalls those of the 10.0 spellings without edge data).
 * Built with CUDA_STUB_NO_EDGE_DATA defined, it lacks the edge functions of
 * 12.3 (cuGraphAddDependencies_v2 and the like), as a 12.0 to 12.2 driver
 * does, and keeps the 10.0 ones (cuGraphAddDependencies and the like);
 * with CUDA_STUB_NO_EDGE_FUNCTIONS, it lacks both.
 *
 * With CUDA_STUB_DEFER=1 as well, work outside a capture is queued on its
 * stream instead of run at once, and runs in order when something waits
 * for it: cuStreamSynchronize, cuEventSynchronize, or a queued
 * cuStreamWaitEvent that another stream reaches, which first runs the
 * event's stream up to the event. So a stream that does not wait for an
 * event reads what another stream's earlier work has not written yet.
 * Events must be created, recorded, waited for and destroyed with a
 * context current, destroyed in the context they were created in
 * (cuStubEventsDestroyed counts those), and a stream can wait only for an
 * event of its own context.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910,
};

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value != NULL ? atoi(value) : fallback;
}

#ifdef CUDA_STUB_FULL
#define DEFAULT_INIT CUDA_SUCCESS
#else
#define DEFAULT_INIT CUDA_ERROR_NO_DEVICE
#endif

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return env_int("CUDA_STUB_INIT_RESULT", DEFAULT_INIT);
}

CUresult cuDriverGetVersion(int *version) {
    if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
    *version = env_int("CUDA_STUB_DRIVER_VERSION", 12040);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (text == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *text = "no CUDA-capable device is detected"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported"; return CUDA_SUCCESS;
    default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

/* NVRTC opens the driver when it compiles and asks it for this table; a
 * stub without it makes NVRTC call through a null pointer. */
CUresult cuGetExportTable(const void **table, const void *id) {
    (void)id;
    if (table != NULL) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

#ifdef CUDA_STUB_FULL

/* Contexts pushed and not yet popped on the calling thread, the current
 * one last. */
#define MAX_DEPTH 64
static __thread void *context_stack[MAX_DEPTH];
static __thread int context_depth = 0;
/* The pretend primary contexts, one per device, then a second context per
 * device (cuStubContext): any distinct addresses. */
#define MAX_DEVICES 8
static int pretend_contexts[2 * MAX_DEVICES];

void *cuStubContext(int device) {
    return device >= 0 && device < MAX_DEVICES ? &pretend_contexts[MAX_DEVICES + device] : NULL;
}

/* The device of a pretend context, or -1. */
static int device_of(void *context) {
    int *c = context;
    if (c < pretend_contexts || c >= pretend_contexts + 2 * MAX_DEVICES) return -1;
    return (int)(c - pretend_contexts) % MAX_DEVICES;
}

int cuStubContextDepth(void) { return context_depth; }

static void *current_context(void) {
    return context_depth > 0 ? context_stack[context_depth - 1] : NULL;
}

static int device_count(void) {
    int count = env_int("CUDA_STUB_DEVICE_COUNT", 1);
    return count < MAX_DEVICES ? count : MAX_DEVICES;
}

CUresult cuDeviceGetCount(int *count) {
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *device, int ordinal) {
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int device) {
    (void)device;
    if (name == NULL || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "Stub GPU", (size_t)len - 1);
    name[len - 1] = '\0';
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    if (value == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case 1: *value = 1024; break;       /* MAX_THREADS_PER_BLOCK */
    case 2: case 3: *value = 1024; break; /* MAX_BLOCK_DIM_X, Y */
    case 4: *value = 64; break;         /* MAX_BLOCK_DIM_Z */
    case 5: *value = 2147483647; break; /* MAX_GRID_DIM_X */
    case 6: case 7: *value = 65535; break;
    case 75: *value = env_int("CUDA_STUB_CC_MAJOR", 9); break; /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = env_int("CUDA_STUB_CC_MINOR", 0); break; /* COMPUTE_CAPABILITY_MINOR */
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int device) {
    (void)device;
    if (bytes == NULL) return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
    if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (device < 0 || device >= MAX_DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    CUresult result = env_int("CUDA_STUB_RETAIN_RESULT", CUDA_SUCCESS);
    if (result == CUDA_SUCCESS) *context = &pretend_contexts[device];
    return result;
}

CUresult cuCtxPushCurrent_v2(void *context) {
    if (device_of(context) < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (context_depth == MAX_DEPTH) return CUDA_ERROR_INVALID_VALUE;
    context_stack[context_depth++] = context;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(int *device) {
    if (device == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (current_context() == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    *device = device_of(current_context());
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(void **context) {
    if (context_depth <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    context_depth -= 1;
    if (context != NULL) *context = context_stack[context_depth];
    return CUDA_SUCCESS;
}

/* The calling thread's stream-capture mode (0 global, the driver's
 * default; 1 thread-local; 2 relaxed), and whether another thread of the
 * process holds a capture begun in global mode (cuStubForeignGlobalCapture).
 * While one does, a thread in global mode is refused what may not run
 * beside such a capture: allocations, frees, module loads and unloads
 * answer CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as the driver's do.
 * cuStubCaptureRefusals counts those refusals. */
enum {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
};
static __thread int capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static int foreign_global_capture = 0;
static int capture_refusals = 0;

void cuStubForeignGlobalCapture(int on) { foreign_global_capture = on; }
int cuStubCaptureMode(void) { return capture_mode; }
int cuStubCaptureRefusals(void) { return capture_refusals; }

CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    if (mode == NULL || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int previous = capture_mode;
    capture_mode = *mode;
    *mode = previous;
    return CUDA_SUCCESS;
}

/* Whether the calling thread is refused a call that may not run beside
 * another thread's global capture; counted when it is. */
static int refused_by_capture(void) {
    if (!foreign_global_capture || capture_mode != CU_STREAM_CAPTURE_MODE_GLOBAL) return 0;
    capture_refusals += 1;
    return 1;
}

/* Everything that would need a GPU. */
#define UNSUPPORTED(name) \
    CUresult name() { return CUDA_ERROR_NOT_SUPPORTED; }

#ifdef CUDA_STUB_RUNS

/* One piece of queued work: a copy, the record of an event, or a wait
 * for another stream's work up to (and including) its entry `upto`. */
struct Stream;
typedef struct {
    enum { COPY, RECORD, WAIT } kind;
    void *dst;
    const void *src;
    size_t bytes;
    long *reached;
    long generation;
    struct Stream *other;
    size_t upto;
} Op;

/* A stream's capture state, the clock tick of its latest work run outside
 * a capture, its context and its queue (entries before `ran` have run). An
 * event's stream and tick; its context; where its latest record lies in
 * its stream's queue, and which of its records have run. */
struct Graph;
typedef struct Stream {
    int capturing;
    int destroyed;
    struct Graph *graph;
    long last_work;
    void *context;
    Op *ops;
    size_t queued, ran, capacity;
} Stream;
typedef struct {
    Stream *stream;
    long at;
    int captured;
    void *context;
    size_t index;
    long generation, reached;
} Event;

static long ticks = 0;
static int releases = 0;
static int fail_next_end = 0;
static Event *last_waited = NULL;
static Stream *last_waiter = NULL;
static int replaced_covered = -1;
static int events_destroyed = 0;

int cuStubReleases(void) { return releases; }
int cuStubEventsDestroyed(void) { return events_destroyed; }

static int deferred(void) { return env_int("CUDA_STUB_DEFER", 0) != 0; }

/* Append `op` to the stream's queue; its index, or -1 without memory. */
static long enqueue(Stream *s, Op op) {
    if (s->queued == s->capacity) {
        size_t capacity = s->capacity ? s->capacity * 2 : 16;
        Op *grown = realloc(s->ops, capacity * sizeof(Op));
        if (grown == NULL) return -1;
        s->ops = grown;
        s->capacity = capacity;
    }
    s->ops[s->queued] = op;
    return (long)s->queued++;
}

/* Run the stream's queue up to entry `upto`, exclusive. */
static void run_until(Stream *s, size_t upto) {
    while (s->ran < upto && s->ran < s->queued) {
        Op op = s->ops[s->ran++];
        switch (op.kind) {
        case COPY: memcpy(op.dst, op.src, op.bytes); break;
        case RECORD:
            if (*op.reached < op.generation) *op.reached = op.generation;
            break;
        case WAIT: run_until(op.other, op.upto + 1); break;
        }
    }
}

/* A graph: its nodes in creation order, and its edges as pairs of node
 * positions, in the order they were added. A node is a memcpy. */
typedef struct Node {
    struct Graph *graph;
    void *dst;
    const void *src;
    size_t bytes;
    /* A kernel node's function (NULL for a copy) and arguments. */
    const void *function;
    unsigned long long args[3];
} Node;
typedef struct Graph {
    Node **nodes;
    size_t count, capacity;
    size_t (*edges)[2];
    size_t edge_count, edge_capacity;
} Graph;
/* An executable: its own copy of the graph it was made or updated from. */
typedef struct {
    Graph graph;
} Exec;

enum { CU_GRAPH_NODE_TYPE_MEMCPY = 1 };

static int branch_captures = 0;
static int instantiations = 0;
static int updates_in_place = 0;
/* Calls of cuGraphGetRootNodes and the edge functions, and of the 10.0
 * edge functions alone. */
static int edge_calls = 0;
static int plain_edge_calls = 0;
/* The edges of the graph last instantiated or updated from. */
static size_t (*last_edges)[2] = NULL;
static size_t last_edge_count = 0;

void cuStubBranchCaptures(int on) { branch_captures = on; }
int cuStubInstantiations(void) { return instantiations; }
int cuStubUpdatesInPlace(void) { return updates_in_place; }
int cuStubEdgeCalls(void) { return edge_calls; }
int cuStubPlainEdgeCalls(void) { return plain_edge_calls; }
/* Writes up to `max` edges of the graph last instantiated or updated from
 * as node positions into `from` and `to`; returns how many it has. */
size_t cuStubGraphEdges(size_t *from, size_t *to, size_t max) {
    for (size_t i = 0; i < last_edge_count && i < max; i++) {
        from[i] = last_edges[i][0];
        to[i] = last_edges[i][1];
    }
    return last_edge_count;
}

static int add_edge(Graph *g, size_t from, size_t to) {
    if (g->edge_count == g->edge_capacity) {
        size_t capacity = g->edge_capacity ? g->edge_capacity * 2 : 16;
        size_t (*grown)[2] = realloc(g->edges, capacity * sizeof *grown);
        if (grown == NULL) return 0;
        g->edges = grown;
        g->edge_capacity = capacity;
    }
    g->edges[g->edge_count][0] = from;
    g->edges[g->edge_count][1] = to;
    g->edge_count++;
    return 1;
}

static long find_edge(const Graph *g, size_t from, size_t to) {
    for (size_t i = 0; i < g->edge_count; i++)
        if (g->edges[i][0] == from && g->edges[i][1] == to) return (long)i;
    return -1;
}

/* A capture's node: after the capture's latest node (or its first). */
static int capture_node(Stream *s, Node made) {
    Graph *g = s->graph;
    if (g == NULL) return 0;
    if (g->count == g->capacity) {
        size_t capacity = g->capacity ? g->capacity * 2 : 16;
        Node **grown = realloc(g->nodes, capacity * sizeof *grown);
        if (grown == NULL) return 0;
        g->nodes = grown;
        g->capacity = capacity;
    }
    Node *node = calloc(1, sizeof(Node));
    if (node == NULL) return 0;
    *node = made;
    node->graph = g;
    g->nodes[g->count] = node;
    size_t at = g->count++;
    if (at > 0) return add_edge(g, branch_captures ? 0 : at - 1, at);
    return 1;
}

static void free_graph(Graph *g) {
    for (size_t i = 0; i < g->count; i++) free(g->nodes[i]);
    free(g->nodes);
    free(g->edges);
}

/* Whether the two graphs have the same number of nodes and the same edges. */
static int same_shape(const Graph *a, const Graph *b) {
    if (a->count != b->count || a->edge_count != b->edge_count) return 0;
    for (size_t i = 0; i < a->edge_count; i++)
        if (find_edge(b, a->edges[i][0], a->edges[i][1]) < 0) return 0;
    return 1;
}

/* `into` made a copy of `from`'s nodes and edges. */
static int copy_graph(Graph *into, const Graph *from) {
    memset(into, 0, sizeof *into);
    into->nodes = calloc(from->count ? from->count : 1, sizeof(Node *));
    into->edges = malloc((from->edge_count ? from->edge_count : 1) * sizeof *into->edges);
    if (into->nodes == NULL || into->edges == NULL) return 0;
    into->capacity = from->count;
    into->edge_capacity = from->edge_count;
    for (size_t i = 0; i < from->count; i++) {
        Node *node = malloc(sizeof(Node));
        if (node == NULL) return 0;
        *node = *from->nodes[i];
        node->graph = into;
        into->nodes[into->count++] = node;
    }
    memcpy(into->edges, from->edges, from->edge_count * sizeof *into->edges);
    into->edge_count = from->edge_count;
    return 1;
}

static void remember_edges(const Graph *g) {
    size_t (*kept)[2] = realloc(last_edges, (g->edge_count ? g->edge_count : 1) * sizeof *kept);
    if (kept == NULL) return;
    last_edges = kept;
    memcpy(last_edges, g->edges, g->edge_count * sizeof *kept);
    last_edge_count = g->edge_count;
}

/* A copy on `stream`: queued when deferring outside a capture, else run
 * (and, in a capture, recorded as a node too). */
static CUresult copy(void *dst, const void *src, size_t bytes, void *stream) {
    Stream *s = stream;
    Node made = {NULL, dst, src, bytes, NULL, {0, 0, 0}};
    if (s != NULL && s->capturing && !capture_node(s, made))
        return CUDA_ERROR_INVALID_VALUE;
    if (s != NULL && !s->capturing && deferred()) {
        Op op = {COPY, dst, src, bytes, NULL, 0, NULL, 0};
        if (enqueue(s, op) < 0) return CUDA_ERROR_INVALID_VALUE;
    } else {
        memcpy(dst, src, bytes);
    }
    return CUDA_SUCCESS;
}
void cuStubFailNextEnd(int code) { fail_next_end = code; }
/* -1 while no capturing stream was destroyed; then 1 when, before the
 * latest was, another stream waited on an event recorded on it outside the
 * capture after all its work, else 0. */
int cuStubReplacedCovered(void) { return replaced_covered; }

static void worked(void *stream) {
    Stream *s = stream;
    if (s != NULL && !s->capturing) s->last_work = ++ticks;
}

/* Every live cuMemAlloc_v2 allocation: its address, size and context. */
typedef struct {
    unsigned long long base;
    size_t size;
    void *context;
} Allocation;
static Allocation *allocations = NULL;
static size_t allocation_count = 0, allocation_capacity = 0;

/* The allocation `pointer` lies in, or NULL. */
static Allocation *allocation_of(unsigned long long pointer) {
    for (size_t i = 0; i < allocation_count; i++)
        if (pointer >= allocations[i].base && pointer < allocations[i].base + allocations[i].size)
            return &allocations[i];
    return NULL;
}

CUresult cuMemAlloc_v2(unsigned long long *pointer, size_t bytes) {
    if (pointer == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (allocation_count == allocation_capacity) {
        size_t capacity = allocation_capacity ? allocation_capacity * 2 : 64;
        Allocation *grown = realloc(allocations, capacity * sizeof *grown);
        if (grown == NULL) return CUDA_ERROR_INVALID_VALUE;
        allocations = grown;
        allocation_capacity = capacity;
    }
    *pointer = (unsigned long long)(size_t)calloc(1, bytes);
    Allocation made = {*pointer, bytes, current_context()};
    allocations[allocation_count++] = made;
    return CUDA_SUCCESS;
}

enum { CU_POINTER_ATTRIBUTE_CONTEXT = 1, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 };

CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long pointer) {
    Allocation *a = allocation_of(pointer);
    if (data == NULL || a == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(void **)data = a->context; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = device_of(a->context); return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}

CUresult cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long pointer) {
    Allocation *a = allocation_of(pointer);
    if (a == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (base != NULL) *base = a->base;
    if (size != NULL) *size = a->size;
    return CUDA_SUCCESS;
}
/* Called at the start of every cuMemFree_v2, when set: a test's way to act
 * while a free runs, as another thread would while the driver's free waits
 * for the device. */
static void (*on_free)(void) = NULL;
void cuStubOnFree(void (*callback)(void)) { on_free = callback; }
CUresult cuMemFree_v2(unsigned long long pointer) {
    if (on_free != NULL) on_free();
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    Allocation *a = allocation_of(pointer);
    if (a != NULL) *a = allocations[--allocation_count];
    free((void *)(size_t)pointer);
    releases += 1;
    return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void **pointer, size_t bytes, unsigned flags) {
    (void)flags;
    if (pointer == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    *pointer = malloc(bytes);
    return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void *pointer) {
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    free(pointer);
    releases += 1;
    return CUDA_SUCCESS;
}
CUresult cuModuleUnload(void *module) {
    (void)module;
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    releases += 1;
    return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream) {
    worked(stream);
    return copy((void *)(size_t)dst, src, bytes, stream);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream) {
    worked(stream);
    return copy(dst, (const void *)(size_t)src, bytes, stream);
}
/* The kernels the stub runs, with the builtins' parameters: `fill` sets
 * x[i] to the info's float, `add` adds y[i] to x[i], for i below the
 * info's n. */
typedef struct {
    const char *name;
    int buffers;
    int max_threads;
} Function;
/* `narrow` is `fill` built for blocks of at most 32 threads. */
static const Function functions[] = {{"fill", 1, 1024}, {"add", 2, 1024}, {"narrow", 1, 32}};

void *cuStubFunction(const char *name) {
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)
        if (strcmp(functions[i].name, name) == 0) return (void *)&functions[i];
    return NULL;
}

static const Function *function_of(const void *function) {
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)
        if (function == &functions[i]) return &functions[i];
    return NULL;
}

static void run_kernel(const void *function, const unsigned long long *args) {
    const Function *f = function_of(function);
    float *x = (float *)(size_t)args[0];
    const unsigned *info = (const unsigned *)(size_t)args[f->buffers];
    unsigned n = info[0];
    float value;
    memcpy(&value, &info[1], sizeof value);
    if (f->buffers == 1) {
        for (unsigned i = 0; i < n; i++) x[i] = value;
    } else {
        const float *y = (const float *)(size_t)args[1];
        for (unsigned i = 0; i < n; i++) x[i] += y[i];
    }
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)extra;
    const Function *f = function_of(function);
    if (f == NULL) return CUDA_ERROR_NOT_SUPPORTED;
    if (params == NULL) return CUDA_ERROR_INVALID_VALUE;
    Node made = {NULL, NULL, NULL, 0, function, {0, 0, 0}};
    for (int i = 0; i <= f->buffers; i++) memcpy(&made.args[i], params[i], sizeof made.args[i]);
    Stream *s = stream;
    worked(stream);
    if (s != NULL && s->capturing) return capture_node(s, made) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    run_kernel(function, made.args);
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(void **stream, unsigned flags) {
    (void)flags;
    if (stream == NULL) return CUDA_ERROR_INVALID_VALUE;
    Stream *s = calloc(1, sizeof(Stream));
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    s->context = current_context();
    *stream = s;
    return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(void *stream) {
    Stream *s = stream;
    run_until(s, s->queued);
    return CUDA_SUCCESS;
}
/* Streams and events are never freed, so that a destroyed one is still
 * there to compare with. */
CUresult cuStreamGetCtx(void *stream, void **context) {
    Stream *s = stream;
    if (s == NULL || context == NULL) return CUDA_ERROR_INVALID_VALUE;
    *context = s->context;
    return CUDA_SUCCESS;
}
/* How many times `stream` was destroyed. */
int cuStubStreamDestroyed(void *stream) { return ((Stream *)stream)->destroyed; }
CUresult cuStreamDestroy_v2(void *stream) {
    Stream *s = stream;
    s->destroyed += 1;
    /* The driver lets a destroyed stream's work complete. */
    run_until(s, s->queued);
    if (s->capturing) {
        replaced_covered = last_waited != NULL && last_waited->stream == s &&
                           last_waiter != s && !last_waited->captured &&
                           last_waited->at >= s->last_work;
    }
    return CUDA_SUCCESS;
}
CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
    Stream *s = stream;
    Event *e = event;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (deferred()) {
        if (current_context() == NULL || e->context != s->context) return CUDA_ERROR_INVALID_CONTEXT;
        if (e->stream != NULL && !s->capturing) {
            Op op = {WAIT, NULL, NULL, 0, NULL, 0, e->stream, e->index};
            if (enqueue(s, op) < 0) return CUDA_ERROR_INVALID_VALUE;
        }
    }
    last_waiter = stream;
    last_waited = event;
    return CUDA_SUCCESS;
}
CUresult cuStreamBeginCapture_v2(void *stream, int mode) {
    (void)mode;
    Stream *s = stream;
    s->graph = calloc(1, sizeof(Graph));
    if (s->graph == NULL) return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 1;
    return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(void *stream, void **graph) {
    Stream *s = stream;
    if (fail_next_end != 0) {
        CUresult code = fail_next_end;
        fail_next_end = 0;
        *graph = NULL;
        return code;
    }
    s->capturing = 0;
    *graph = s->graph;
    s->graph = NULL;
    return *graph != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuStreamIsCapturing(void *stream, int *status) {
    *status = ((Stream *)stream)->capturing;
    return CUDA_SUCCESS;
}
CUresult cuEventCreate(void **event, unsigned flags) {
    (void)flags;
    if (deferred() && current_context() == NULL) return CUDA_ERROR_INVALID_CONTEXT;
    Event *e = calloc(1, sizeof(Event));
    if (e == NULL) return CUDA_ERROR_INVALID_VALUE;
    e->context = current_context();
    *event = e;
    return CUDA_SUCCESS;
}
CUresult cuEventRecord(void *event, void *stream) {
    Event *e = event;
    Stream *s = stream;
    if (deferred()) {
        if (current_context() == NULL || e->context != s->context) return CUDA_ERROR_INVALID_CONTEXT;
        if (!s->capturing) {
            Op op = {RECORD, NULL, NULL, 0, &e->reached, e->generation + 1, NULL, 0};
            long index = enqueue(s, op);
            if (index < 0) return CUDA_ERROR_INVALID_VALUE;
            e->index = (size_t)index;
            e->generation += 1;
        }
    }
    e->stream = stream;
    e->at = ++ticks;
    e->captured = s->capturing;
    return CUDA_SUCCESS;
}
/* Whether the event's latest record has run; always, unless deferring. */
static int reached(Event *e) { return e->stream == NULL || e->reached >= e->generation; }
CUresult cuEventQuery(void *event) { return reached(event) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }
CUresult cuEventSynchronize(void *event) {
    Event *e = event;
    if (!reached(e)) run_until(e->stream, e->index + 1);
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(void *event) {
    Event *e = event;
    if (deferred() && current_context() != e->context) return CUDA_ERROR_INVALID_CONTEXT;
    events_destroyed += 1;
    return CUDA_SUCCESS;
}
/* Fill `out` (room for *count) from `found` (n of them) as the driver
 * does: only the count when `out` is NULL. */
static CUresult answer(void **out, size_t *count, void **found, size_t n) {
    if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (out == NULL) {
        *count = n;
        return CUDA_SUCCESS;
    }
    size_t filled = *count < n ? *count : n;
    for (size_t i = 0; i < *count; i++) out[i] = i < filled ? found[i] : NULL;
    *count = filled;
    return CUDA_SUCCESS;
}
CUresult cuGraphGetNodes(void *graph, void **nodes, size_t *count) {
    Graph *g = graph;
    return answer(nodes, count, (void **)g->nodes, g->count);
}
CUresult cuGraphNodeGetType(void *node, unsigned *type) {
    if (node == NULL || type == NULL) return CUDA_ERROR_INVALID_VALUE;
    *type = CU_GRAPH_NODE_TYPE_MEMCPY;
    return CUDA_SUCCESS;
}
CUresult cuGraphGetRootNodes(void *graph, void **roots, size_t *count) {
    Graph *g = graph;
    edge_calls += 1;
    void **found = calloc(g->count ? g->count : 1, sizeof(void *));
    if (found == NULL) return CUDA_ERROR_INVALID_VALUE;
    size_t n = 0;
    for (size_t i = 0; i < g->count; i++) {
        int has_dependency = 0;
        for (size_t e = 0; e < g->edge_count; e++) has_dependency |= g->edges[e][1] == i;
        if (!has_dependency) found[n++] = g->nodes[i];
    }
    CUresult result = answer(roots, count, found, n);
    free(found);
    return result;
}
CUresult cuGraphDestroy(void *graph) {
    free_graph(graph);
    free(graph);
    return CUDA_SUCCESS;
}

#ifdef CUDA_STUB_NO_EDGE_FUNCTIONS
#define CUDA_STUB_NO_EDGE_DATA
#else
/* The position of `node` in `g`, or -1 when it is not one of its nodes. */
static long position(const Graph *g, const void *node) {
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i] == node) return (long)i;
    return -1;
}

static CUresult dependent_nodes(void *node, void **dependents, size_t *count) {
    edge_calls += 1;
    if (node == NULL) return CUDA_ERROR_INVALID_VALUE;
    Graph *g = ((Node *)node)->graph;
    long at = position(g, node);
    void **found = calloc(g->edge_count ? g->edge_count : 1, sizeof(void *));
    if (at < 0 || found == NULL) {
        free(found);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t n = 0;
    for (size_t e = 0; e < g->edge_count; e++)
        if (g->edges[e][0] == (size_t)at) found[n++] = g->nodes[g->edges[e][1]];
    CUresult result = answer(dependents, count, found, n);
    free(found);
    return result;
}
/* Every edge must join two nodes of the graph and not be there yet; nothing
 * is added unless all can be. */
static CUresult add_dependencies(void *graph, void *const *from, void *const *to, size_t count) {
    Graph *g = graph;
    edge_calls += 1;
    for (size_t i = 0; i < count; i++) {
        long a = position(g, from[i]), b = position(g, to[i]);
        if (a < 0 || b < 0 || a == b || find_edge(g, (size_t)a, (size_t)b) >= 0)
            return CUDA_ERROR_INVALID_VALUE;
        for (size_t j = 0; j < i; j++)
            if (from[j] == from[i] && to[j] == to[i]) return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++)
        if (!add_edge(g, (size_t)position(g, from[i]), (size_t)position(g, to[i])))
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
/* Every edge must be in the graph; nothing is removed unless all are. */
static CUresult remove_dependencies(void *graph, void *const *from, void *const *to, size_t count) {
    Graph *g = graph;
    edge_calls += 1;
    for (size_t i = 0; i < count; i++) {
        long a = position(g, from[i]), b = position(g, to[i]);
        if (a < 0 || b < 0 || find_edge(g, (size_t)a, (size_t)b) < 0) return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; i++) {
        long e = find_edge(g, (size_t)position(g, from[i]), (size_t)position(g, to[i]));
        if (e < 0) return CUDA_ERROR_INVALID_VALUE;
        memmove(g->edges[e], g->edges[e + 1], (g->edge_count - (size_t)e - 1) * sizeof g->edges[0]);
        g->edge_count--;
    }
    return CUDA_SUCCESS;
}
/* The 10.0 spellings: plain edges only. */
CUresult cuGraphNodeGetDependentNodes(void *node, void **dependents, size_t *count) {
    plain_edge_calls += 1;
    return dependent_nodes(node, dependents, count);
}
CUresult cuGraphAddDependencies(void *graph, void *const *from, void *const *to, size_t count) {
    plain_edge_calls += 1;
    return add_dependencies(graph, from, to, count);
}
CUresult cuGraphRemoveDependencies(void *graph, void *const *from, void *const *to,
                                   size_t count) {
    plain_edge_calls += 1;
    return remove_dependencies(graph, from, to, count);
}
#endif /* CUDA_STUB_NO_EDGE_FUNCTIONS */

#ifndef CUDA_STUB_NO_EDGE_DATA
/* An edge-data array must be all zero: the plain edges a capture records. */
static int plain(const unsigned char *data, size_t edges) {
    for (size_t i = 0; data != NULL && i < edges * 8; i++)
        if (data[i] != 0) return 0;
    return 1;
}
/* The 12.3 spellings, with edge data: only a null array, or zeros, is
 * taken. */
CUresult cuGraphNodeGetDependentNodes_v2(void *node, void **dependents, void *data,
                                         size_t *count) {
    if (data != NULL) {
        edge_calls += 1;
        return CUDA_ERROR_INVALID_VALUE;
    }
    return dependent_nodes(node, dependents, count);
}
CUresult cuGraphAddDependencies_v2(void *graph, void *const *from, void *const *to,
                                   const void *data, size_t count) {
    if (!plain(data, count)) {
        edge_calls += 1;
        return CUDA_ERROR_INVALID_VALUE;
    }
    return add_dependencies(graph, from, to, count);
}
CUresult cuGraphRemoveDependencies_v2(void *graph, void *const *from, void *const *to,
                                      const void *data, size_t count) {
    if (!plain(data, count)) {
        edge_calls += 1;
        return CUDA_ERROR_INVALID_VALUE;
    }
    return remove_dependencies(graph, from, to, count);
}
#endif /* CUDA_STUB_NO_EDGE_DATA */

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    if (exec == NULL || graph == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Exec *x = calloc(1, sizeof(Exec));
    if (x == NULL || !copy_graph(&x->graph, graph)) return CUDA_ERROR_INVALID_VALUE;
    remember_edges(graph);
    instantiations += 1;
    *exec = x;
    return CUDA_SUCCESS;
}
typedef struct {
    unsigned result;
    void *error_node;
    void *error_from_node;
} UpdateInfo;
/* In place when the nodes and edges match; otherwise the answer a driver
 * gives for another topology (CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED). */
CUresult cuGraphExecUpdate_v2(void *exec, void *graph, UpdateInfo *info) {
    Exec *x = exec;
    if (x == NULL || graph == NULL || info == NULL) return CUDA_ERROR_INVALID_VALUE;
    info->error_node = NULL;
    info->error_from_node = NULL;
    if (!same_shape(&x->graph, graph)) {
        info->result = 2;
        return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    Graph fresh;
    if (!copy_graph(&fresh, graph)) return CUDA_ERROR_INVALID_VALUE;
    free_graph(&x->graph);
    x->graph = fresh;
    for (size_t i = 0; i < x->graph.count; i++) x->graph.nodes[i]->graph = &x->graph;
    remember_edges(graph);
    updates_in_place += 1;
    info->result = 0;
    return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(void *exec) {
    Exec *x = exec;
    if (x == NULL) return CUDA_ERROR_INVALID_VALUE;
    free_graph(&x->graph);
    free(x);
    return CUDA_SUCCESS;
}
CUresult cuGraphUpload(void *exec, void *stream) {
    (void)stream;
    return exec != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* The copies run at once, in creation order (every edge points forward). */
CUresult cuGraphLaunch(void *exec, void *stream) {
    Exec *x = exec;
    if (x == NULL) return CUDA_ERROR_INVALID_VALUE;
    worked(stream);
    for (size_t i = 0; i < x->graph.count; i++) {
        Node *n = x->graph.nodes[i];
        if (n->function != NULL) run_kernel(n->function, n->args);
        else memcpy(n->dst, n->src, n->bytes);
    }
    return CUDA_SUCCESS;
}

#else

UNSUPPORTED(cuMemAlloc_v2)
UNSUPPORTED(cuMemFree_v2)
UNSUPPORTED(cuMemHostAlloc)
UNSUPPORTED(cuMemFreeHost)
UNSUPPORTED(cuMemcpyHtoDAsync_v2)
UNSUPPORTED(cuMemcpyDtoHAsync_v2)
UNSUPPORTED(cuStreamCreate)
UNSUPPORTED(cuStreamSynchronize)
UNSUPPORTED(cuStreamDestroy_v2)
UNSUPPORTED(cuStreamGetCtx)
UNSUPPORTED(cuPointerGetAttribute)
UNSUPPORTED(cuMemGetAddressRange_v2)
UNSUPPORTED(cuLaunchKernel)
UNSUPPORTED(cuStreamWaitEvent)
UNSUPPORTED(cuStreamBeginCapture_v2)
UNSUPPORTED(cuStreamEndCapture)
UNSUPPORTED(cuStreamIsCapturing)
UNSUPPORTED(cuEventCreate)
UNSUPPORTED(cuEventRecord)
UNSUPPORTED(cuEventQuery)
UNSUPPORTED(cuEventSynchronize)
UNSUPPORTED(cuEventDestroy_v2)
UNSUPPORTED(cuModuleUnload)
UNSUPPORTED(cuGraphGetNodes)
UNSUPPORTED(cuGraphDestroy)
UNSUPPORTED(cuGraphNodeGetType)
UNSUPPORTED(cuGraphInstantiateWithFlags)
UNSUPPORTED(cuGraphExecDestroy)
UNSUPPORTED(cuGraphUpload)
UNSUPPORTED(cuGraphLaunch)
UNSUPPORTED(cuGraphGetRootNodes)
UNSUPPORTED(cuGraphNodeGetDependentNodes_v2)
UNSUPPORTED(cuGraphAddDependencies_v2)
UNSUPPORTED(cuGraphRemoveDependencies_v2)
UNSUPPORTED(cuGraphNodeGetDependentNodes)
UNSUPPORTED(cuGraphAddDependencies)
UNSUPPORTED(cuGraphRemoveDependencies)

#endif /* CUDA_STUB_RUNS */

UNSUPPORTED(cuLinkCreate_v2)
UNSUPPORTED(cuLinkAddData_v2)
UNSUPPORTED(cuLinkComplete)
UNSUPPORTED(cuLinkDestroy)

/* What the last cuModuleLoadDataEx was handed: 0 nothing yet, 1 an ELF
 * image (a cubin), 2 anything else (PTX text). */
static int last_image = 0;

int cuStubLastImage(void) { return last_image; }

/* The module a successful load hands out: any distinct address. */
static int pretend_module;

CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned int count,
                            int *options, void **values) {
    (void)count;
    (void)options;
    (void)values;
    if (module == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (refused_by_capture()) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    /* Compared byte by byte, stopping at the first difference, so that a
     * text shorter than the magic is not read past its NUL. */
    const unsigned char *bytes = image;
    last_image = bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F' ? 1 : 2;
    CUresult result = env_int("CUDA_STUB_MODULE_RESULT", CUDA_ERROR_NOT_SUPPORTED);
    if (result == CUDA_SUCCESS) *module = &pretend_module;
    return result;
}
#ifdef CUDA_STUB_RUNS
/* A loaded module has every entry point asked for, each running blocks of
 * up to 1024 threads. */
CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    if (function == NULL || module != &pretend_module || name == NULL) return CUDA_ERROR_INVALID_VALUE;
    *function = &pretend_module;
    return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *value, int attribute, void *function) {
    const Function *f = function_of(function);
    if (value == NULL || (function != &pretend_module && f == NULL) || attribute != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *value = f != NULL ? f->max_threads : 1024;
    return CUDA_SUCCESS;
}
#else
UNSUPPORTED(cuModuleGetFunction)
UNSUPPORTED(cuFuncGetAttribute)
#endif

#endif /* CUDA_STUB_FULL */
