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
 * captures and memory then work on host memory (work outside a capture
 * runs at once), a
 * module that CUDA_STUB_MODULE_RESULT=0 lets load has every entry point, and
 * cuStub* functions let a test count the frees and unloads performed, run
 * a callback inside each cuMemFree_v2, make the next end of a capture fail
 * with the stream left capturing, and ask whether a stream replacing one
 * left capturing waited for all the old one's work.
 *
 * The runs stub also keeps every cuMemAlloc_v2 allocation with its
 * context, for cuPointerGetAttribute (CONTEXT, DEVICE_ORDINAL) and
 * cuMemGetAddressRange_v2; answers cuStreamGetCtx with the context current
 * when the stream was made, and cuStreamGetFlags with the flags it was
 * made with; counts each stream's destroys
 * (cuStubStreamDestroyed); offers a second context per device besides the
 * primary one (cuStubContext); and runs two kernels, handed out by
 * cuStubFunction("fill") and cuStubFunction("add") ("narrow" is a fill
 * that runs blocks of at most 32 threads), with the builtins' parameters
 * (the buffers' addresses, then the info's: n, then a float), and
 * "countdown" over a u32 counter and a u32 flag, at once or, in a capture,
 * as a kernel node every replay runs.
 *
 * Its graphs are kept as nodes and edges: a capture records each copy as a
 * memcpy node, which runs only when a replay does, and each launch as a
 * kernel node, after the node before it (or, after cuStubBranchCaptures(1),
 * each after the capture's first node, which is no chain); the graph
 * functions read and change those edges; an executable keeps its own copy
 * of the graph, which cuGraphExecUpdate_v2 replaces only when the nodes and
 * edges are the same, and whose nodes cuGraphLaunch runs at once.
 * cuStubGraphEdges hands out the edges of the graph last instantiated or
 * updated from, cuStubInstantiations and cuStubUpdatesInPlace count those,
 * and cuStubEdgeCalls counts the calls that read or change edges
 * (cuStubPlainEdgeCalls those of the 10.0 spellings without edge data).
 * Built with CUDA_STUB_NO_EDGE_DATA defined, it lacks the edge functions of
 * 12.3 (cuGraphAddDependencies_v2 and the like), as a 12.0 to 12.2 driver
 * does, and keeps the 10.0 ones (cuGraphAddDependencies and the like);
 * with CUDA_STUB_NO_EDGE_FUNCTIONS, it lacks both.
 *
 * Conditional nodes are modelled as a 12.4 driver has them (12.8 with
 * CUDA_STUB_DRIVER_VERSION=12080): handles (cuGraphConditionalHandleCreate,
 * made for one graph and context), conditional and empty nodes
 * (cuGraphAddNode_v2, refusing unused bytes that are not zero, a handle of
 * another graph, or an if of two bodies before 12.8), captures into an
 * existing graph (cuStreamBeginCaptureToGraph) and the dependencies a
 * capture's next node follows (cuStreamGetCaptureInfo_v3, which with
 * CUDA_STUB_EDGE_DATA=1 reports those edges as carrying data and refuses
 * a query without a place for it, CUDA_ERROR_LOSSY_QUERY;
 * cuStreamUpdateCaptureDependencies_v2). The library's setter module (PTX
 * calling cudaGraphSetConditional; CUDA_STUB_SETTER_RESULT, else
 * CUDA_STUB_MODULE_RESULT, says what loading it answers) has the setters
 * its text declares, which the stub runs: each reads its flag's u32 in
 * the stub's device memory and sets its handle, a loop's setters keep
 * their trip counter; launched outside a graph a setter faults. A replay
 * runs a conditional node's body as its handle says, and a driver before
 * 12.8 "hangs" (an error) on a node with a body holding nothing but empty
 * nodes; the setter module's no-op (cuStubNoopsRun counts its runs) is
 * what keeps one from hanging. cuStubConditionals,
 * cuStubConditionalKind and cuStubConditionalBody describe the conditional
 * nodes of the graph last instantiated, cuStubFailNextAddNode makes the
 * next node creation fail. Built with CUDA_STUB_NO_CONDITIONALS, it lacks
 * those five functions, as a driver before 12.3 does.
 *
 * cuMemAllocAsync allocates at once, and in a capture adds a memory
 * allocation node too.
 *
 * Child graph nodes (cuGraphAddChildGraphNode, counted by
 * cuStubChildGraphNodes) hold their own copy of the child, which a replay
 * runs where the node stands; cuStubGraphsDestroyed counts cuGraphDestroy.
 *
 * The runs stub also answers what cudarc calls beyond the backend
 * (cuCtxGetCurrent, cuCtxSetCurrent, cuCtxSynchronize,
 * cuMemcpyDtoDAsync_v2, cuDevicePrimaryCtxRelease_v2, the memory-pools
 * attribute), so that cudarc runs on it too.
 *
 * With CUDA_STUB_INVALIDATE_BODY=n, the first n ends of a body's capture
 * are invalidated and free the body graph; ending or destroying the
 * parent's capture afterwards aborts, as the driver crashes there.
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
#include <stdio.h>
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
    CUDA_ERROR_NOT_FOUND = 500,
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
    case 115: *value = 0; break;        /* MEMORY_POOLS_SUPPORTED, which cudarc asks */
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
#define MAX_CAPTURE_DEPS 8
typedef struct Stream {
    int capturing;
    /* Whether the capture fills a conditional node's body. */
    int into_body;
    int destroyed;
    unsigned flags;
    struct Graph *graph;
    /* The nodes a capture's next node follows. */
    void *deps[MAX_CAPTURE_DEPS];
    size_t dep_count;
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
 * positions, in the order they were added. A node is a copy, a kernel, an
 * empty node, a conditional node, which owns its body graphs, or a child
 * graph node, which owns its copy of the child as its first body. */
enum {
    CU_GRAPH_NODE_TYPE_KERNEL = 0,
    CU_GRAPH_NODE_TYPE_MEMCPY = 1,
    CU_GRAPH_NODE_TYPE_GRAPH = 4,
    CU_GRAPH_NODE_TYPE_EMPTY = 5,
    CU_GRAPH_NODE_TYPE_MEM_ALLOC = 10,
    CU_GRAPH_NODE_TYPE_CONDITIONAL = 13,
    CU_GRAPH_COND_TYPE_IF = 0,
    CU_GRAPH_COND_TYPE_WHILE = 1,
};
typedef struct Node {
    struct Graph *graph;
    unsigned kind;
    void *dst;
    const void *src;
    size_t bytes;
    /* A kernel node's function and arguments. */
    const void *function;
    unsigned long long args[4];
    /* A conditional node's handle, type and bodies; `out` is the array
     * cuGraphAddNode_v2 hands out, valid as long as the node. */
    unsigned long long handle;
    unsigned cond_type, size;
    struct Graph *bodies[2];
    void *out[2];
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

/* The position of `node` in `g`, or -1 when it is not one of its nodes. */
static long position(const Graph *g, const void *node) {
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i] == node) return (long)i;
    return -1;
}

/* A fresh node of `g`, a copy of `made`; NULL without memory. */
static Node *append_node(Graph *g, Node made) {
    if (g->count == g->capacity) {
        size_t capacity = g->capacity ? g->capacity * 2 : 16;
        Node **grown = realloc(g->nodes, capacity * sizeof *grown);
        if (grown == NULL) return NULL;
        g->nodes = grown;
        g->capacity = capacity;
    }
    Node *node = calloc(1, sizeof(Node));
    if (node == NULL) return NULL;
    *node = made;
    node->graph = g;
    g->nodes[g->count++] = node;
    return node;
}

/* A capture's node: after the nodes the capture's next node follows (or,
 * branching, after the capture's first node); then the one it follows. */
static int capture_node(Stream *s, Node made) {
    Graph *g = s->graph;
    if (g == NULL) return 0;
    Node *node = append_node(g, made);
    if (node == NULL) return 0;
    size_t at = g->count - 1;
    if (branch_captures) {
        if (at > 0 && !add_edge(g, 0, at)) return 0;
    } else {
        for (size_t i = 0; i < s->dep_count; i++) {
            long from = position(g, s->deps[i]);
            if (from < 0 || !add_edge(g, (size_t)from, at)) return 0;
        }
    }
    s->deps[0] = node;
    s->dep_count = 1;
    return 1;
}

/* Whether a conditional node of `g`, at any depth, has `body` as a body. */
static int holds_body(const Graph *g, const Graph *body) {
    for (size_t i = 0; i < g->count; i++) {
        const Node *n = g->nodes[i];
        if (n->kind != CU_GRAPH_NODE_TYPE_CONDITIONAL) continue;
        for (unsigned b = 0; b < n->size; b++)
            if (n->bodies[b] == body || holds_body(n->bodies[b], body)) return 1;
    }
    return 0;
}

static void free_graph(Graph *g) {
    for (size_t i = 0; i < g->count; i++) {
        Node *n = g->nodes[i];
        for (int b = 0; b < 2; b++) {
            if (n->bodies[b] != NULL) {
                free_graph(n->bodies[b]);
                free(n->bodies[b]);
            }
        }
        free(n);
    }
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
static int copy_graph(Graph *into, const Graph *from);
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
        for (int b = 0; b < 2; b++) {
            node->bodies[b] = NULL;
            node->out[b] = NULL;
        }
        for (int b = 0; b < 2; b++) {
            if (from->nodes[i]->bodies[b] == NULL) continue;
            node->bodies[b] = calloc(1, sizeof(Graph));
            if (node->bodies[b] == NULL || !copy_graph(node->bodies[b], from->nodes[i]->bodies[b]))
                return 0;
            node->out[b] = node->bodies[b];
        }
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
    Node made = {.kind = CU_GRAPH_NODE_TYPE_MEMCPY, .dst = dst, .src = src, .bytes = bytes};
    if (s != NULL && s->capturing)
        return capture_node(s, made) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (s != NULL && deferred()) {
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

/* Stream-ordered allocation: at once outside a capture; in one, a memory
 * allocation node (its memory made at once too, as the driver reserves
 * it when the graph is instantiated). */
CUresult cuMemAllocAsync(unsigned long long *pointer, size_t bytes, void *stream) {
    CUresult made = cuMemAlloc_v2(pointer, bytes);
    Stream *s = stream;
    if (made != CUDA_SUCCESS || s == NULL || !s->capturing) return made;
    Node node = {.kind = CU_GRAPH_NODE_TYPE_MEM_ALLOC, .dst = (void *)(size_t)*pointer, .bytes = bytes};
    return capture_node(s, node) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
/* The kernels the stub runs. With the builtins' parameters (the buffers'
 * addresses, then the info's: n, then a float), `fill` sets x[i] to the
 * info's float and `add` adds y[i] to x[i], for i below the info's n.
 * `countdown` takes a u32 counter and a u32 flag: it counts the counter
 * down (not below 0) and sets the flag to whether it is still above 0.
 * The conditional setters of the library's setter module set a
 * conditional handle from a u32 flag, as conditional.ptx says. */
enum { FILL, ADD, COUNTDOWN, SET_IF, SET_IF_ELSE, WHILE_FIRST, WHILE_NEXT, NOOP };
typedef struct {
    const char *name;
    int kind;
    /* The bytes of each parameter, 0 past the last. */
    unsigned sizes[4];
    int max_threads;
    /* Whether it is an entry of the setter module, not a stub function. */
    int setter;
} Function;
/* `narrow` is `fill` built for blocks of at most 32 threads. */
static const Function functions[] = {
    {"fill", FILL, {8, 8}, 1024, 0},
    {"add", ADD, {8, 8, 8}, 1024, 0},
    {"narrow", FILL, {8, 8}, 32, 0},
    {"countdown", COUNTDOWN, {8, 8}, 1024, 0},
    {"conditional_set_if", SET_IF, {8, 8}, 1, 1},
    {"conditional_set_if_else", SET_IF_ELSE, {8, 8, 8}, 1, 1},
    {"conditional_while_first", WHILE_FIRST, {8, 8, 8, 4}, 1, 1},
    {"conditional_while_next", WHILE_NEXT, {8, 8, 8, 4}, 1, 1},
    {"conditional_noop", NOOP, {0}, 1, 1},
};
#define FUNCTION_COUNT (sizeof functions / sizeof functions[0])

void *cuStubFunction(const char *name) {
    for (size_t i = 0; i < FUNCTION_COUNT; i++)
        if (!functions[i].setter && strcmp(functions[i].name, name) == 0) return (void *)&functions[i];
    return NULL;
}

static const Function *function_of(const void *function) {
    for (size_t i = 0; i < FUNCTION_COUNT; i++)
        if (function == &functions[i]) return &functions[i];
    return NULL;
}

/* Conditional handles: the graph each was made for, its context and the
 * value a setter last gave it. A handle is its index plus one. */
#define MAX_HANDLES 4096
typedef struct {
    void *graph;
    void *context;
    unsigned value;
} Handle;
static Handle handles[MAX_HANDLES];
static size_t handle_count = 0;
/* Setter launches run, and setter launches refused outside a graph. */
static int setters_run = 0;
/* No-op kernels run. */
static int noops_run = 0;

static Handle *handle_of(unsigned long long handle) {
    return handle >= 1 && handle <= handle_count ? &handles[handle - 1] : NULL;
}
int cuStubSettersRun(void) { return setters_run; }
int cuStubNoopsRun(void) { return noops_run; }
/* Handles made so far. */
int cuStubHandles(void) { return (int)handle_count; }

static void set_handle(unsigned long long handle, unsigned value) {
    Handle *h = handle_of(handle);
    if (h != NULL) h->value = value;
}

static unsigned u32_at(unsigned long long address) { return *(const unsigned *)(size_t)address; }

static void run_kernel(const void *function, const unsigned long long *args) {
    const Function *f = function_of(function);
    switch (f->kind) {
    case FILL:
    case ADD: {
        int buffers = f->kind == FILL ? 1 : 2;
        float *x = (float *)(size_t)args[0];
        const unsigned *info = (const unsigned *)(size_t)args[buffers];
        unsigned n = info[0];
        float value;
        memcpy(&value, &info[1], sizeof value);
        if (f->kind == FILL) {
            for (unsigned i = 0; i < n; i++) x[i] = value;
        } else {
            const float *y = (const float *)(size_t)args[1];
            for (unsigned i = 0; i < n; i++) x[i] += y[i];
        }
        break;
    }
    case COUNTDOWN: {
        unsigned *counter = (unsigned *)(size_t)args[0];
        unsigned *flag = (unsigned *)(size_t)args[1];
        if (*counter > 0) *counter -= 1;
        *flag = *counter > 0;
        break;
    }
    case SET_IF:
        setters_run += 1;
        set_handle(args[1], u32_at(args[0]) != 0);
        break;
    case SET_IF_ELSE:
        setters_run += 1;
        set_handle(args[1], u32_at(args[0]) != 0);
        set_handle(args[2], u32_at(args[0]) == 0);
        break;
    case WHILE_FIRST: {
        setters_run += 1;
        unsigned *trips = (unsigned *)(size_t)args[2];
        unsigned bound = (unsigned)args[3];
        *trips = 0;
        set_handle(args[1], u32_at(args[0]) != 0 && bound > 0);
        break;
    }
    case NOOP: noops_run += 1; break;
    case WHILE_NEXT: {
        setters_run += 1;
        unsigned *trips = (unsigned *)(size_t)args[2];
        unsigned bound = (unsigned)args[3];
        *trips += 1;
        set_handle(args[1], u32_at(args[0]) != 0 && *trips < bound);
        break;
    }
    }
}

enum { CUDA_ERROR_ILLEGAL_ADDRESS = 700 };

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra) {
    (void)shared, (void)extra;
    const Function *f = function_of(function);
    if (f == NULL) return CUDA_ERROR_NOT_SUPPORTED;
    if (params == NULL) return CUDA_ERROR_INVALID_VALUE;
    /* A setter requires one thread (.reqntid 1, 1, 1), in one block. */
    if (f->setter && (gx * gy * gz != 1 || bx * by * bz != 1)) return CUDA_ERROR_INVALID_VALUE;
    Node made = {.kind = CU_GRAPH_NODE_TYPE_KERNEL, .function = function};
    for (int i = 0; i < 4 && f->sizes[i] != 0; i++) memcpy(&made.args[i], params[i], f->sizes[i]);
    Stream *s = stream;
    worked(stream);
    if (s != NULL && s->capturing) return capture_node(s, made) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    /* cudaGraphSetConditional faults in a kernel that no graph launched. */
    if (f->setter) return CUDA_ERROR_ILLEGAL_ADDRESS;
    run_kernel(function, made.args);
    return CUDA_SUCCESS;
}

/* With CUDA_STUB_INVALIDATE_BODY=n, the first n ends of a body's capture
 * answer CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as after a context-wide
 * synchronization, and the driver frees the body graph: ending or
 * destroying the capture whose graph holds it then crashes the driver
 * (NVBUG 6805256), which the stub plays by aborting. */
enum { CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901 };
static const struct Graph *freed_body = NULL;
static int bodies_invalidated = 0;
static void crash_on_freed_body(const Stream *s, const char *call) {
    if (freed_body == NULL || s->into_body || !s->capturing || s->graph == NULL) return;
    if (!holds_body(s->graph, freed_body)) return;
    fprintf(stderr, "%s on a capture whose invalidated body graph the driver freed: the driver "
                    "crashes here (NVBUG 6805256)\n", call);
    abort();
}
/* Every stream made, for cuCtxSynchronize. */
#define MAX_STREAMS 1024
static Stream *streams[MAX_STREAMS];
static size_t stream_count = 0;

CUresult cuStreamCreate(void **stream, unsigned flags) {
    if (stream == NULL || stream_count == MAX_STREAMS) return CUDA_ERROR_INVALID_VALUE;
    Stream *s = calloc(1, sizeof(Stream));
    if (s == NULL) return CUDA_ERROR_INVALID_VALUE;
    streams[stream_count++] = s;
    s->flags = flags;
    s->context = current_context();
    *stream = s;
    return CUDA_SUCCESS;
}
/* What cudarc calls beyond the backend, so that cudarc runs on the stub
 * too: the current context set and read, the context synchronized (every
 * stream's queue run), a device-to-device copy, and the primary context
 * released. */
CUresult cuCtxGetCurrent(void **context) {
    if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
    *context = current_context();
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(void *context) {
    if (context == NULL) {
        if (context_depth > 0) context_depth -= 1;
        return CUDA_SUCCESS;
    }
    if (device_of(context) < 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (context_depth == 0) context_depth = 1;
    context_stack[context_depth - 1] = context;
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) {
    for (size_t i = 0; i < stream_count; i++) run_until(streams[i], streams[i]->queued);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t bytes,
                              void *stream) {
    worked(stream);
    return copy((void *)(size_t)dst, (const void *)(size_t)src, bytes, stream);
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) {
    return device >= 0 && device < MAX_DEVICES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
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
CUresult cuStreamGetFlags(void *stream, unsigned *flags) {
    Stream *s = stream;
    if (s == NULL || flags == NULL) return CUDA_ERROR_INVALID_VALUE;
    *flags = s->flags;
    return CUDA_SUCCESS;
}
/* How many times `stream` was destroyed. */
int cuStubStreamDestroyed(void *stream) { return ((Stream *)stream)->destroyed; }
CUresult cuStreamDestroy_v2(void *stream) {
    Stream *s = stream;
    crash_on_freed_body(s, "cuStreamDestroy_v2");
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
    s->into_body = 0;
    s->dep_count = 0;
    return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(void *stream, void **graph) {
    Stream *s = stream;
    crash_on_freed_body(s, "cuStreamEndCapture");
    if (s->into_body && bodies_invalidated < env_int("CUDA_STUB_INVALIDATE_BODY", 0)) {
        bodies_invalidated += 1;
        freed_body = s->graph;
        s->capturing = 0;
        s->graph = NULL;
        *graph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
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
    *type = ((Node *)node)->kind;
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
static int graphs_destroyed = 0;
/* Graphs destroyed so far. */
int cuStubGraphsDestroyed(void) { return graphs_destroyed; }
CUresult cuGraphDestroy(void *graph) {
    free_graph(graph);
    free(graph);
    graphs_destroyed += 1;
    return CUDA_SUCCESS;
}

static int child_graph_nodes = 0;
/* Child graph nodes added so far. */
int cuStubChildGraphNodes(void) { return child_graph_nodes; }
/* A node running its own copy of `child`, after `deps`; refused, as the
 * driver does, for a child holding a conditional node. */
CUresult cuGraphAddChildGraphNode(void **out, void *graph, void *const *deps, size_t count,
                                  void *child) {
    Graph *g = graph;
    const Graph *c = child;
    if (out == NULL || g == NULL || c == NULL || (count > 0 && deps == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < c->count; i++)
        if (c->nodes[i]->kind == CU_GRAPH_NODE_TYPE_CONDITIONAL) return CUDA_ERROR_NOT_SUPPORTED;
    for (size_t i = 0; i < count; i++)
        if (position(g, deps[i]) < 0) return CUDA_ERROR_INVALID_VALUE;
    Node made = {.kind = CU_GRAPH_NODE_TYPE_GRAPH};
    made.bodies[0] = calloc(1, sizeof(Graph));
    if (made.bodies[0] == NULL || !copy_graph(made.bodies[0], c)) return CUDA_ERROR_INVALID_VALUE;
    Node *node = append_node(g, made);
    if (node == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (!add_edge(g, (size_t)position(g, deps[i]), g->count - 1)) return CUDA_ERROR_INVALID_VALUE;
    child_graph_nodes += 1;
    *out = node;
    return CUDA_SUCCESS;
}

/* An edge-data array must be all zero: the plain edges a capture records. */
static int plain(const void *data, size_t edges) {
    const unsigned char *bytes = data;
    for (size_t i = 0; bytes != NULL && i < edges * 8; i++)
        if (bytes[i] != 0) return 0;
    return 1;
}

#ifdef CUDA_STUB_NO_EDGE_FUNCTIONS
#define CUDA_STUB_NO_EDGE_DATA
#else

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

/* The graph last instantiated from, kept whole for cuStubConditional*. */
static Graph last_graph;
static int last_graph_kept = 0;

static void keep_last_graph(const Graph *g) {
    if (last_graph_kept) free_graph(&last_graph);
    last_graph_kept = copy_graph(&last_graph, g);
}

/* The `index`-th conditional node of `g`, counting depth first in creation
 * order (a node before the conditionals in its bodies); `*seen` counts. */
static Node *nth_conditional(const Graph *g, int index, int *seen) {
    for (size_t i = 0; i < g->count; i++) {
        Node *n = g->nodes[i];
        if (n->kind != CU_GRAPH_NODE_TYPE_CONDITIONAL) continue;
        if ((*seen)++ == index) return n;
        for (unsigned b = 0; b < n->size; b++) {
            Node *found = nth_conditional(n->bodies[b], index, seen);
            if (found != NULL) return found;
        }
    }
    return NULL;
}

/* Conditional nodes of the graph last instantiated from, at any depth. */
int cuStubConditionals(void) {
    int seen = 0;
    if (last_graph_kept) nth_conditional(&last_graph, -1, &seen);
    return seen;
}
/* The `index`-th conditional node's type (0 if, 1 while) times 10 plus its
 * number of bodies; -1 when there is none. */
int cuStubConditionalKind(int index) {
    int seen = 0;
    Node *n = last_graph_kept ? nth_conditional(&last_graph, index, &seen) : NULL;
    return n != NULL ? (int)(n->cond_type * 10 + n->size) : -1;
}
/* Body `body` of the `index`-th conditional node: writes its node kinds
 * (up to `max`) to `kinds` and its edges (up to `max`) to `from` and `to`,
 * as node positions; returns its edge count, or -1 when there is none.
 * `*nodes` gets its node count. */
long cuStubConditionalBody(int index, unsigned body, size_t *nodes, unsigned *kinds, size_t *from,
                           size_t *to, size_t max) {
    int seen = 0;
    Node *n = last_graph_kept ? nth_conditional(&last_graph, index, &seen) : NULL;
    if (n == NULL || body >= n->size) return -1;
    const Graph *g = n->bodies[body];
    *nodes = g->count;
    for (size_t i = 0; i < g->count && i < max; i++) kinds[i] = g->nodes[i]->kind;
    for (size_t i = 0; i < g->edge_count && i < max; i++) {
        from[i] = g->edges[i][0];
        to[i] = g->edges[i][1];
    }
    return (long)g->edge_count;
}

CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    if (exec == NULL || graph == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Exec *x = calloc(1, sizeof(Exec));
    if (x == NULL || !copy_graph(&x->graph, graph)) return CUDA_ERROR_INVALID_VALUE;
    remember_edges(graph);
    keep_last_graph(graph);
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
/* Most iterations the stub lets a while node make in one launch, so that a
 * loop that never ends fails instead of hanging the test. */
#define MAX_ITERATIONS 100000
enum { CUDA_ERROR_LAUNCH_TIMEOUT = 702, CUDA_ERROR_LAUNCH_FAILED = 719 };

static int driver_version(void) { return env_int("CUDA_STUB_DRIVER_VERSION", 12040); }

/* Whether a body holds a node other than empty nodes: a driver before
 * 12.8 hangs on one that does not, an empty node being no help. */
static int holds_work(const Graph *g) {
    for (size_t i = 0; i < g->count; i++)
        if (g->nodes[i]->kind != CU_GRAPH_NODE_TYPE_EMPTY) return 1;
    return 0;
}

/* Run a graph's nodes at once, in creation order (every edge points
 * forward): copies, kernels, and conditional nodes, which read their
 * handle as the setter before them left it. A driver before 12.8 (r570)
 * hangs on a conditional node with an empty body: that is an error here. */
static CUresult run_graph(const Graph *g) {
    for (size_t i = 0; i < g->count; i++) {
        Node *n = g->nodes[i];
        switch (n->kind) {
        case CU_GRAPH_NODE_TYPE_KERNEL: run_kernel(n->function, n->args); break;
        case CU_GRAPH_NODE_TYPE_MEMCPY: memcpy(n->dst, n->src, n->bytes); break;
        case CU_GRAPH_NODE_TYPE_GRAPH: {
            CUresult ran = run_graph(n->bodies[0]);
            if (ran != CUDA_SUCCESS) return ran;
            break;
        }
        case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
            for (unsigned b = 0; b < n->size; b++)
                if (!holds_work(n->bodies[b]) && driver_version() < 12080) return CUDA_ERROR_LAUNCH_TIMEOUT;
            Handle *h = handle_of(n->handle);
            if (h == NULL) return CUDA_ERROR_INVALID_VALUE;
            CUresult ran = CUDA_SUCCESS;
            if (n->cond_type == CU_GRAPH_COND_TYPE_IF) {
                if (h->value != 0) ran = run_graph(n->bodies[0]);
                else if (n->size == 2) ran = run_graph(n->bodies[1]);
            } else {
                int iterations = 0;
                while (ran == CUDA_SUCCESS && h->value != 0) {
                    if (++iterations > MAX_ITERATIONS) return CUDA_ERROR_LAUNCH_FAILED;
                    ran = run_graph(n->bodies[0]);
                }
            }
            if (ran != CUDA_SUCCESS) return ran;
            break;
        }
        default: break;
        }
    }
    return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(void *exec, void *stream) {
    Exec *x = exec;
    if (x == NULL) return CUDA_ERROR_INVALID_VALUE;
    worked(stream);
    return run_graph(&x->graph);
}

#ifndef CUDA_STUB_NO_CONDITIONALS
/* `CUgraphNodeParams` with its conditional member, as cuda.h lays it out. */
typedef struct {
    unsigned type;
    int reserved0[3];
    union {
        long long reserved1[29];
        struct {
            unsigned long long handle;
            unsigned type;
            unsigned size;
            void **out;
            void *context;
        } conditional;
    };
    long long reserved2;
} NodeParams;

static int fail_next_add_node = 0;
/* Make the next cuGraphAddNode_v2 answer `code`, adding nothing. */
void cuStubFailNextAddNode(int code) { fail_next_add_node = code; }

CUresult cuGraphConditionalHandleCreate(unsigned long long *handle, void *graph, void *context,
                                        unsigned initial, unsigned flags) {
    if (handle == NULL || graph == NULL || flags != 0 || handle_count == MAX_HANDLES)
        return CUDA_ERROR_INVALID_VALUE;
    if (context != current_context()) return CUDA_ERROR_INVALID_CONTEXT;
    Handle made = {graph, context, initial};
    handles[handle_count++] = made;
    *handle = handle_count;
    return CUDA_SUCCESS;
}

/* Whether `count` bytes from `at` are all zero. */
static int zeros(const void *at, size_t count) {
    const unsigned char *bytes = at;
    for (size_t i = 0; i < count; i++)
        if (bytes[i] != 0) return 0;
    return 1;
}

/* An empty or conditional node, checked as the driver does: unused bytes
 * zero, a handle made for this graph and context, an if of one body (two
 * from 12.8), a while of one; the node follows `deps`. */
CUresult cuGraphAddNode_v2(void **node, void *graph, void *const *deps, const void *data,
                           size_t count, NodeParams *params) {
    Graph *g = graph;
    if (fail_next_add_node != 0) {
        CUresult code = fail_next_add_node;
        fail_next_add_node = 0;
        return code;
    }
    if (node == NULL || g == NULL || params == NULL || !plain(data, count)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (position(g, deps[i]) < 0) return CUDA_ERROR_INVALID_VALUE;
    if (!zeros(params->reserved0, sizeof params->reserved0) || params->reserved2 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    Node made = {.kind = params->type};
    if (params->type == CU_GRAPH_NODE_TYPE_EMPTY) {
        if (!zeros(params->reserved1, sizeof params->reserved1)) return CUDA_ERROR_INVALID_VALUE;
    } else if (params->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
        size_t used = sizeof params->conditional;
        if (!zeros((const char *)params->reserved1 + used, sizeof params->reserved1 - used))
            return CUDA_ERROR_INVALID_VALUE;
        Handle *h = handle_of(params->conditional.handle);
        if (h == NULL || h->graph != graph || h->context != params->conditional.context)
            return CUDA_ERROR_INVALID_VALUE;
        unsigned type = params->conditional.type, size = params->conditional.size;
        int sizes_ok = type == CU_GRAPH_COND_TYPE_IF
                           ? size == 1 || (size == 2 && driver_version() >= 12080)
                           : type == CU_GRAPH_COND_TYPE_WHILE && size == 1;
        if (!sizes_ok) return CUDA_ERROR_INVALID_VALUE;
        made.handle = params->conditional.handle;
        made.cond_type = type;
        made.size = size;
    } else {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    Node *added = append_node(g, made);
    if (added == NULL) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned b = 0; b < added->size; b++) {
        added->bodies[b] = calloc(1, sizeof(Graph));
        if (added->bodies[b] == NULL) return CUDA_ERROR_INVALID_VALUE;
        added->out[b] = added->bodies[b];
    }
    if (added->kind == CU_GRAPH_NODE_TYPE_CONDITIONAL) params->conditional.out = added->out;
    for (size_t i = 0; i < count; i++)
        if (!add_edge(g, (size_t)position(g, deps[i]), g->count - 1)) return CUDA_ERROR_INVALID_VALUE;
    *node = added;
    return CUDA_SUCCESS;
}

CUresult cuStreamBeginCaptureToGraph(void *stream, void *graph, void *const *deps, const void *data,
                                     size_t count, int mode) {
    (void)mode;
    Stream *s = stream;
    if (s == NULL || graph == NULL || s->capturing || count > MAX_CAPTURE_DEPS || !plain(data, count))
        return CUDA_ERROR_INVALID_VALUE;
    s->graph = graph;
    s->capturing = 1;
    s->into_body = 1;
    s->dep_count = count;
    for (size_t i = 0; i < count; i++) s->deps[i] = deps[i];
    return CUDA_SUCCESS;
}

/* With CUDA_STUB_EDGE_DATA=1 every dependency a capture reports carries
 * edge data (a programmatic edge, type 1), as the caller's programmatic
 * launches leave them; the driver then refuses a query that has no place
 * for the data. */
enum { CUDA_ERROR_LOSSY_QUERY = 402 };
static unsigned long long programmatic_edges[MAX_CAPTURE_DEPS] = {
    0x10000, 0x10000, 0x10000, 0x10000, 0x10000, 0x10000, 0x10000, 0x10000,
};

CUresult cuStreamGetCaptureInfo_v3(void *stream, int *status, unsigned long long *id, void **graph,
                                   void *const **deps, const void **data, size_t *count) {
    Stream *s = stream;
    if (s == NULL || status == NULL) return CUDA_ERROR_INVALID_VALUE;
    int edge_data = env_int("CUDA_STUB_EDGE_DATA", 0) != 0 && s->capturing && s->dep_count > 0;
    if (edge_data && deps != NULL && data == NULL) return CUDA_ERROR_LOSSY_QUERY;
    *status = s->capturing;
    if (id != NULL) *id = (unsigned long long)(size_t)s->graph;
    if (graph != NULL) *graph = s->capturing ? s->graph : NULL;
    if (deps != NULL) *deps = s->deps;
    if (data != NULL) *data = edge_data ? programmatic_edges : NULL;
    if (count != NULL) *count = s->capturing ? s->dep_count : 0;
    return CUDA_SUCCESS;
}

enum { CU_STREAM_SET_CAPTURE_DEPENDENCIES = 1 };

CUresult cuStreamUpdateCaptureDependencies_v2(void *stream, void **deps, const void *data,
                                              size_t count, unsigned flags) {
    Stream *s = stream;
    if (s == NULL || !s->capturing || !plain(data, count)) return CUDA_ERROR_INVALID_VALUE;
    size_t base = flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES ? 0 : s->dep_count;
    if (base + count > MAX_CAPTURE_DEPS) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (position(s->graph, deps[i]) < 0) return CUDA_ERROR_INVALID_VALUE;
        s->deps[base + i] = deps[i];
    }
    s->dep_count = base + count;
    return CUDA_SUCCESS;
}
#endif /* CUDA_STUB_NO_CONDITIONALS */

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
UNSUPPORTED(cuStreamGetFlags)
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
UNSUPPORTED(cuGraphAddChildGraphNode)
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
UNSUPPORTED(cuGraphConditionalHandleCreate)
UNSUPPORTED(cuGraphAddNode_v2)
UNSUPPORTED(cuStreamBeginCaptureToGraph)
UNSUPPORTED(cuStreamGetCaptureInfo_v3)
UNSUPPORTED(cuStreamUpdateCaptureDependencies_v2)

#endif /* CUDA_STUB_RUNS */

UNSUPPORTED(cuLinkCreate_v2)
UNSUPPORTED(cuLinkAddData_v2)
UNSUPPORTED(cuLinkComplete)
UNSUPPORTED(cuLinkDestroy)

/* What the last cuModuleLoadDataEx was handed: 0 nothing yet, 1 an ELF
 * image (a cubin), 2 anything else (PTX text). */
static int last_image = 0;

int cuStubLastImage(void) { return last_image; }

/* The module a successful load hands out: any distinct address. The
 * setter module, PTX calling cudaGraphSetConditional, gets its own, and
 * its text is kept to look its entry points up in. */
static int pretend_module;
static int setter_module;
static char *setter_text = NULL;
static int setter_loads = 0;

/* Loads of the setter module. */
int cuStubSetterLoads(void) { return setter_loads; }

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
    int setters = last_image == 2 && strstr(image, ".extern .func cudaGraphSetConditional") != NULL;
    CUresult result = env_int(setters ? "CUDA_STUB_SETTER_RESULT" : "CUDA_STUB_MODULE_RESULT",
                              env_int("CUDA_STUB_MODULE_RESULT", CUDA_ERROR_NOT_SUPPORTED));
    if (result != CUDA_SUCCESS) return result;
    if (setters) {
        setter_loads += 1;
        free(setter_text);
        setter_text = strdup(image);
        *module = &setter_module;
    } else {
        *module = &pretend_module;
    }
    return CUDA_SUCCESS;
}
#ifdef CUDA_STUB_RUNS
/* A loaded module has every entry point asked for, each running blocks of
 * up to 1024 threads; the setter module has the setters its PTX declares. */
CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    if (function == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
    if (module == &setter_module) {
        char entry[128];
        snprintf(entry, sizeof entry, ".visible .entry %s(", name);
        for (size_t i = 0; i < FUNCTION_COUNT; i++) {
            if (functions[i].setter && strcmp(functions[i].name, name) == 0 && setter_text != NULL &&
                strstr(setter_text, entry) != NULL) {
                *function = (void *)&functions[i];
                return CUDA_SUCCESS;
            }
        }
        return CUDA_ERROR_NOT_FOUND;
    }
    if (module != &pretend_module) return CUDA_ERROR_INVALID_VALUE;
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
