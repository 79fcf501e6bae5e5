/*
 * A stand-in for libamdhip64.so with hiprtc inside it (as ROCm 5 ships it),
 * with ROCm 6's versioned properties getter and without hipGraphUpload, so
 * the backend's calls can be watched on a machine with no GPU. It has two
 * devices and a current one per process; device memory is host memory,
 * copies run at once, kernels only log their arguments, a capture counts the
 * launches and copies issued on its stream as the graph's nodes, and every
 * call that matters is appended as one line to the file named by
 * FAKE_HIP_LOG. The `fake_*` functions let a test change what the runtime
 * answers: its version, whether events are reached, how the next end of a
 * capture and the next graph updates go, how many nodes a graph gains or
 * loses, which code the next call of an event function answers, and what
 * runs while a hipFree does.
 *
 * A graph keeps its nodes and edges: a capture's nodes form a chain in
 * issue order (or, after fake_set_branch_captures(1), each node follows the
 * first, which is no chain), which hipGraphGetRootNodes,
 * hipGraphNodeGetDependentNodes, hipGraphAddDependencies and
 * hipGraphRemoveDependencies read and change as ROCm's runtime does (each
 * of the last two logged with its edge count). fake_graph_edges hands out
 * the edges of the graph last instantiated or updated from. Built with
 * FAKE_HIP_NO_EDGE_FUNCTIONS, those four functions are missing.
 *
 * Graph executables model ROCm 6.1's kernel-argument space: every in-place
 * update takes fresh space per node, given back only when the executable is
 * destroyed (fake_kernarg_bytes says how much is held). Streams and events
 * keep a clock tick of their latest work and recording, so that
 * fake_replaced_covered can say whether a stream replacing one left
 * capturing waited for all the old one's work.
 *
 * An event remembers the stream it was last recorded on, as ROCm's does,
 * and hipEventQuery or hipEventSynchronize on one whose stream was
 * destroyed aborts the process: ROCm reads that stream without checking it.
 * A stream's capture status is 1 (active) while it records; a failed end
 * can leave it invalidated (2) or active (1), see fake_fail_next_end.
 *
 * A capture in progress can take a child graph node
 * (hipStreamGetCaptureInfo_v2, hipGraphAddChildGraphNode,
 * hipStreamUpdateCaptureDependencies, each logged): one more node of the
 * capturing stream's chain, the child being any graph an earlier capture
 * ended; fake_next_capture_info makes the next capture-info answer wrong.
 * Built with FAKE_HIP_NO_CAPTURE_NODES, those three are missing.
 *
 * A code object is an ELF whose e_ident padding (bytes 9 to 12) holds a
 * four-letter tag, which hipModuleLoadData logs; "BAD!" is refused. Any
 * other image (hiprtc's output here) is logged by its first four bytes.
 *
 * Each thread has a stream-capture mode (0 global, the default; 1
 * thread-local; 2 relaxed), set by hipThreadExchangeStreamCaptureMode,
 * which is silent in the log (fake_capture_mode reads it). After
 * fake_set_foreign_global_capture(1) another thread holds a capture in
 * global mode: as ROCm's runtime does, a thread in global mode is then
 * refused allocations, frees, module loads and unloads, and stream and
 * event syncs, each logged as `name -> 900`, and the refusal invalidates
 * that capture (fake_foreign_capture_status: 0 none, 1 active, 2
 * invalidated). Built with FAKE_HIP_NO_EXCHANGE, the exchange is missing.
 *
 * Memory from hipMalloc is remembered with its device (the current one),
 * for hipPointerGetAttributes and hipMemGetAddressRange; a stream keeps the
 * device current when it was made, for hipStreamGetDevice, and counts its
 * destroys (fake_stream_destroyed). fake_last_instantiated_nodes says how
 * many nodes the graph last instantiated holds. hipFuncGetAttribute gives
 * every function blocks of 1024 threads, but 32 to one whose name starts
 * with "narrow".
 *
 * A kernel's parameter layout comes from its name: the builtins' is known,
 * and any other name ends in `__` and one letter per parameter, `p` for a
 * pointer or the byte size of a value (`mixed__pp48`: two pointers, a 4-byte
 * and an 8-byte value).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say(const char* format, ...) {
    const char* path = getenv("FAKE_HIP_LOG");
    FILE* out = path ? fopen(path, "a") : stderr;
    if (!out) return;
    va_list args;
    va_start(args, format);
    vfprintf(out, format, args);
    va_end(args);
    fputc('\n', out);
    if (out != stderr) fclose(out);
}

static uintptr_t next_handle = 0x1000;
static void* handle(void) { return (void*)(next_handle += 0x10); }

#define MAX_HANDLES 256

/* Streams with their capture status (0 none, 1 active, 2 invalidated),
 * graphs with their node counts, executables with the kernel-argument
 * bytes their updates took, events with the stream and tick of their
 * latest recording. */
static struct {
    void* handle;
    int capturing;
    long nodes;
    long last_work;
    int destroyed;
    int device;
} streams[MAX_HANDLES];
static struct {
    void* handle;
    long nodes;
    /* Node k's handle is base + k. */
    uintptr_t base;
    int (*edges)[2];
    long edge_count, edge_capacity;
} graphs[MAX_HANDLES];
static uintptr_t next_node_base = 0x10000000;
#define MAX_NODES 0x10000
static struct { void* handle; long nodes; long kernarg; } execs[MAX_HANDLES];
static struct { void* handle; void* stream; long at; int captured; } events[MAX_HANDLES];
static int stream_count = 0, graph_count = 0, exec_count = 0, event_count = 0;
static long ticks = 0, kernarg_bytes = 0;
/* The latest wait: the waiting stream, and the waited event's stream,
 * tick and whether it was recorded in a capture, as they were then. */
static void* last_waiting_stream = 0;
static void* last_waited_recorder = 0;
static long last_waited_at = 0;
static int last_waited_captured = 0;
static int replaced_covered = -1;
/* The streams (by creation order) of the latest wait: the waiting one and
 * the one its event was recorded on. */
static int last_wait_waiter = -1, last_wait_recorder = -1;
/* Kernel-argument bytes one node's update takes. */
#define KERNARG_PER_NODE 256

long fake_kernarg_bytes(void) { return kernarg_bytes; }
/* -1 while no capturing stream was destroyed; then 1 when, before the
 * latest was, another stream waited on an event recorded on it outside the
 * capture after all its work, else 0. */
int fake_replaced_covered(void) { return replaced_covered; }

static int find_event(void* handle) {
    for (int i = 0; i < event_count; i++)
        if (events[i].handle == handle) return i;
    return -1;
}

static int find_stream(void* handle) {
    for (int i = 0; i < stream_count; i++)
        if (streams[i].handle == handle) return i;
    return -1;
}

/* A launch or copy on a capturing stream is a node of its graph; one on
 * another stream is work it runs. */
static int captured(void* stream) {
    int i = find_stream(stream);
    if (i < 0) return 0;
    if (!streams[i].capturing) {
        streams[i].last_work = ++ticks;
        return 0;
    }
    streams[i].nodes++;
    return 1;
}

static int runtime_version = 60443483;
static int current_device = 0;
static int events_ready = 1;
static long node_skew = 0;
static int end_code = 0, end_leaves_capturing = 0;
static int update_codes[8], update_results[8], update_count = 0;

static int branch_captures = 0;
/* The edges of the graph last instantiated or updated from. */
static int (*last_edges)[2] = 0;
static long last_edge_count = 0;

void fake_set_branch_captures(int on) { branch_captures = on; }
/* Writes up to `max` edges of the graph last instantiated or updated from,
 * as node positions, into `from` and `to`; returns how many it has. */
long fake_graph_edges(int* from, int* to, long max) {
    for (long i = 0; i < last_edge_count && i < max; i++) {
        from[i] = last_edges[i][0];
        to[i] = last_edges[i][1];
    }
    return last_edge_count;
}

void fake_set_runtime_version(int version) { runtime_version = version; }
void fake_set_events_ready(int ready) { events_ready = ready; }
void fake_set_node_skew(long skew) { node_skew = skew; }

/* The next call of the function named `name` answers `code` and does
 * nothing else (only the event functions look). */
static char failing_name[64];
static int failing_code = 0;
void fake_fail_next_call(const char* name, int code) {
    snprintf(failing_name, sizeof failing_name, "%s", name);
    failing_code = code;
}
static int failing(const char* name) {
    if (failing_code == 0 || strcmp(name, failing_name) != 0) return 0;
    int code = failing_code;
    failing_code = 0;
    say("%s -> %d", name, code);
    return code;
}
/* waiter * 100 + recorder for the latest wait, or -1 before any. */
int fake_last_wait(void) {
    return last_wait_waiter < 0 ? -1 : last_wait_waiter * 100 + last_wait_recorder;
}
/* The next hipStreamEndCapture answers `code`, leaving the stream's capture
 * ended (`leave_capturing` 0), invalidated (1) or still active (2, as
 * after hipErrorStreamCaptureUnjoined). */
void fake_fail_next_end(int code, int leave_capturing) {
    end_code = code;
    end_leaves_capturing = leave_capturing;
}
/* The next hipGraphExecUpdate calls answer these, in order, then succeed. */
void fake_push_update(int code, int result) {
    if (update_count < 8) {
        update_codes[update_count] = code;
        update_results[update_count] = result;
        update_count++;
    }
}

static __thread int capture_mode = 0;
static int foreign_capture = 0;
void fake_set_foreign_global_capture(int on) { foreign_capture = on ? 1 : 0; }
int fake_foreign_capture_status(void) { return foreign_capture; }
int fake_capture_mode(void) { return capture_mode; }
#ifndef FAKE_HIP_NO_EXCHANGE
int hipThreadExchangeStreamCaptureMode(int* mode) {
    if (!mode || *mode < 0 || *mode > 2) return 1;
    int previous = capture_mode;
    capture_mode = *mode;
    *mode = previous;
    return 0;
}
#endif
/* Whether `name`, called now on this thread, is refused beside another
 * thread's global capture, which the refusal invalidates. */
static int refused_by_capture(const char* name) {
    if (!foreign_capture || capture_mode != 0) return 0;
    foreign_capture = 2;
    say("%s -> 900", name);
    return 1;
}

int hipInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int hipGetDeviceCount(int* count) { *count = 2; return 0; }
int hipGetDevice(int* ordinal) { *ordinal = current_device; return 0; }
int hipSetDevice(int ordinal) {
    if (ordinal < 0 || ordinal > 1) return 101;
    current_device = ordinal;
    say("hipSetDevice %d", ordinal);
    return 0;
}
int hipDeviceGet(int* device, int ordinal) { *device = ordinal; return 0; }
int hipDeviceGetName(char* name, int len, int device) {
    snprintf(name, (size_t)len, "Fake HIP device %d", device);
    return 0;
}
int hipDeviceTotalMem(size_t* bytes, int device) {
    *bytes = (size_t)(device + 1) << 34;
    return 0;
}
/* ROCm's limits: 1024 threads per block, a 2^31 - 1 x 65535 x 65535 grid;
 * z blocks stop at 64 threads here so that per-dimension checks show. */
int hipDeviceGetAttribute(int* value, int attribute, int device) {
    (void)device;
    switch (attribute) {
    case 26: case 27: *value = 1024; return 0;
    case 28: *value = 64; return 0;
    case 29: *value = 2147483647; return 0;
    case 30: case 31: *value = 65535; return 0;
    case 56: *value = 1024; return 0;
    default: return 1;
    }
}
/* hipDeviceProp_tR0600: 1472 bytes, gcnArchName at 1160. */
int hipGetDevicePropertiesR0600(void* props, int device) {
    memset(props, 0, 1472);
    snprintf((char*)props, 256, "Fake HIP device %d", device);
    snprintf((char*)props + 1160, 256, device == 0 ? "gfx90a:sramecc+:xnack-" : "gfx1030");
    return 0;
}
int hipRuntimeGetVersion(int* version) { *version = runtime_version; return 0; }
int hipDriverGetVersion(int* version) { *version = 60443483; return 0; }
const char* hipGetErrorName(int code) { (void)code; return "hipErrorFake"; }
const char* hipGetErrorString(int code) { (void)code; return "a fake error"; }

int hipStreamCreateWithFlags(void** stream, unsigned flags) {
    if (stream_count == MAX_HANDLES) return 2;
    *stream = handle();
    streams[stream_count].handle = *stream;
    streams[stream_count].capturing = 0;
    streams[stream_count].destroyed = 0;
    streams[stream_count].device = current_device;
    stream_count++;
    say("hipStreamCreateWithFlags flags=%u", flags);
    return 0;
}
int hipStreamDestroy(void* stream) {
    int i = find_stream(stream);
    if (i >= 0 && streams[i].capturing) {
        replaced_covered = last_waited_recorder == stream && last_waiting_stream != stream &&
                           !last_waited_captured && last_waited_at >= streams[i].last_work;
    }
    if (i >= 0) {
        streams[i].capturing = 0;
        streams[i].destroyed += 1;
    }
    say("hipStreamDestroy");
    return 0;
}
int hipStreamWaitEvent(void* stream, void* event, unsigned flags) {
    int code = failing("hipStreamWaitEvent");
    if (code) return code;
    int e = find_event(event);
    last_wait_waiter = find_stream(stream);
    last_wait_recorder = e >= 0 ? find_stream(events[e].stream) : -1;
    last_waiting_stream = stream;
    last_waited_recorder = e >= 0 ? events[e].stream : 0;
    last_waited_at = e >= 0 ? events[e].at : 0;
    last_waited_captured = e >= 0 && events[e].captured;
    say("hipStreamWaitEvent flags=%u", flags);
    return 0;
}
int hipStreamIsCapturing(void* stream, int* status) {
    int i = find_stream(stream);
    *status = i >= 0 ? streams[i].capturing : 0;
    say("hipStreamIsCapturing -> %d", *status);
    return 0;
}
int hipStreamSynchronize(void* stream) {
    (void)stream;
    if (refused_by_capture("hipStreamSynchronize")) return 900;
    say("hipStreamSynchronize");
    return 0;
}

int hipStreamGetDevice(void* stream, int* device) {
    int i = find_stream(stream);
    if (i < 0 || !device) return 400;
    *device = streams[i].device;
    return 0;
}
/* How many times `stream` was destroyed. */
int fake_stream_destroyed(void* stream) {
    int i = find_stream(stream);
    return i >= 0 ? streams[i].destroyed : -1;
}

/* Live hipMalloc allocations: address, size and device. */
static struct { char* base; size_t size; int device; } allocations[4096];
static int allocation_count = 0;
static int find_allocation(const void* ptr) {
    for (int i = 0; i < allocation_count; i++)
        if ((const char*)ptr >= allocations[i].base &&
            (const char*)ptr < allocations[i].base + allocations[i].size)
            return i;
    return -1;
}

int hipMalloc(void** ptr, size_t size) {
    if (refused_by_capture("hipMalloc")) return 900;
    if (allocation_count == 4096) return 2;
    *ptr = calloc(1, size);
    say("hipMalloc %zu -> %p", size, *ptr);
    if (!*ptr) return 2;
    allocations[allocation_count].base = *ptr;
    allocations[allocation_count].size = size;
    allocations[allocation_count].device = current_device;
    allocation_count++;
    return 0;
}
/* hipPointerAttribute_t as ROCm 5 and 6 lay it out. */
struct pointer_attributes {
    int memory_type;
    int device;
    void* device_pointer;
    void* host_pointer;
    int is_managed;
    unsigned allocation_flags;
};
int hipPointerGetAttributes(struct pointer_attributes* attributes, const void* ptr) {
    int i = find_allocation(ptr);
    if (!attributes || i < 0) return 1;
    memset(attributes, 0, sizeof *attributes);
    attributes->memory_type = 1;
    attributes->device = allocations[i].device;
    attributes->device_pointer = (void*)ptr;
    return 0;
}
int hipMemGetAddressRange(void** base, size_t* size, void* ptr) {
    int i = find_allocation(ptr);
    if (i < 0) return 1;
    if (base) *base = allocations[i].base;
    if (size) *size = allocations[i].size;
    return 0;
}
/* Called at the start of every hipFree, when set: a test's way to act
 * while a free runs, as another thread would while ROCm's free waits for
 * the device. */
static void (*on_free)(void) = 0;
void fake_on_free(void (*callback)(void)) { on_free = callback; }
int hipFree(void* ptr) {
    if (on_free) on_free();
    if (refused_by_capture("hipFree")) return 900;
    int a = find_allocation(ptr);
    if (a >= 0) allocations[a] = allocations[--allocation_count];
    say("hipFree %p", ptr);
    free(ptr);
    return 0;
}
int hipHostMalloc(void** ptr, size_t size, unsigned flags) {
    if (refused_by_capture("hipHostMalloc")) return 900;
    *ptr = calloc(1, size);
    say("hipHostMalloc %zu flags=%u", size, flags);
    return *ptr ? 0 : 2;
}
int hipHostFree(void* ptr) {
    if (refused_by_capture("hipHostFree")) return 900;
    say("hipHostFree");
    free(ptr);
    return 0;
}
int hipMemcpyHtoDAsync(void* dst, void* src, size_t bytes, void* stream) {
    if (!captured(stream)) memcpy(dst, src, bytes);
    say("hipMemcpyHtoDAsync %p %zu", dst, bytes);
    return 0;
}
int hipMemcpyDtoHAsync(void* dst, void* src, size_t bytes, void* stream) {
    if (!captured(stream)) memcpy(dst, src, bytes);
    say("hipMemcpyDtoHAsync %p %zu", src, bytes);
    return 0;
}

/* An image starting "BAD!" is refused, as the runtime refuses a broken one. */
int hipModuleLoadData(void** module, const void* image) {
    if (refused_by_capture("hipModuleLoadData")) return 900;
    const char* tag = (const char*)image;
    if (memcmp(image, "\x7f" "ELF", 4) == 0) tag += 9;
    say("hipModuleLoadData %.4s", tag);
    if (memcmp(tag, "BAD!", 4) == 0) return 200;
    *module = handle();
    return 0;
}
int hipModuleUnload(void* module) {
    (void)module;
    if (refused_by_capture("hipModuleUnload")) return 900;
    say("hipModuleUnload");
    return 0;
}
/* A kernel called "missing" is not in any module. */
int hipModuleGetFunction(void** function, void* module, const char* name) {
    (void)module;
    if (strcmp(name, "missing") == 0) return 500;
    *function = strdup(name);
    return 0;
}
int hipFuncGetAttribute(int* value, int attribute, void* function) {
    if (!value || !function || attribute != 0) return 1;
    *value = strncmp((const char*)function, "narrow", 6) == 0 ? 32 : 1024;
    return 0;
}
static const char* layout(const char* name) {
    if (strcmp(name, "fill") == 0) return "pp";
    if (!strcmp(name, "add") || !strcmp(name, "copy") || !strcmp(name, "axpy")) return "ppp";
    const char* marker = strstr(name, "__");
    return marker ? marker + 2 : "";
}
int hipModuleLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void* stream,
                          void** params, void** extra) {
    captured(stream);
    const char* name = (const char*)function;
    const char* kinds = layout(name);
    char args[512] = "";
    for (int i = 0; kinds[i]; i++) {
        char one[40];
        unsigned long long value = 0;
        switch (kinds[i]) {
        case 'p': snprintf(one, sizeof one, "%s%p", i ? "," : "", *(void**)params[i]); break;
        case '1': case '2': case '4': case '8':
            memcpy(&value, params[i], (size_t)(kinds[i] - '0'));
            snprintf(one, sizeof one, "%s%#llx", i ? "," : "", value);
            break;
        default: return 1;
        }
        strncat(args, one, sizeof args - strlen(args) - 1);
    }
    say("hipModuleLaunchKernel %s grid=%u,%u,%u block=%u,%u,%u shared=%u args=%s extra=%p", name,
        gx, gy, gz, bx, by, bz, shared, args, (void*)extra);
    return 0;
}

int hipEventCreateWithFlags(void** event, unsigned flags) {
    int code = failing("hipEventCreateWithFlags");
    if (code) return code;
    if (event_count == MAX_HANDLES) return 2;
    *event = handle();
    events[event_count].handle = *event;
    events[event_count].stream = 0;
    event_count++;
    say("hipEventCreateWithFlags flags=%u", flags);
    return 0;
}
int hipEventRecord(void* event, void* stream) {
    int code = failing("hipEventRecord");
    if (code) return code;
    int e = find_event(event), i = find_stream(stream);
    if (e >= 0) {
        events[e].stream = stream;
        events[e].at = ++ticks;
        events[e].captured = i >= 0 && streams[i].capturing;
    }
    say("hipEventRecord");
    return 0;
}
/* ROCm follows the event to the stream it was last recorded on; a
 * destroyed one is freed memory there, so this fake stops the process. */
static void check_event_stream(const char* name, void* event) {
    int e = find_event(event);
    int i = e >= 0 ? find_stream(events[e].stream) : -1;
    if (i >= 0 && streams[i].destroyed) {
        say("%s on an event of a destroyed stream", name);
        fprintf(stderr, "fake HIP: %s on an event last recorded on a destroyed stream\n", name);
        abort();
    }
}
int hipEventSynchronize(void* event) {
    check_event_stream("hipEventSynchronize", event);
    if (refused_by_capture("hipEventSynchronize")) return 900;
    say("hipEventSynchronize");
    return 0;
}
int hipEventQuery(void* event) {
    check_event_stream("hipEventQuery", event);
    return events_ready ? 0 : 600;
}
int hipEventDestroy(void* event) {
    int code = failing("hipEventDestroy");
    if (code) return code;
    int e = find_event(event);
    if (e >= 0) events[e] = events[--event_count];
    say("hipEventDestroy");
    return 0;
}

int hipStreamBeginCapture(void* stream, int mode) {
    int i = find_stream(stream);
    if (i < 0) return 400;
    streams[i].capturing = 1;
    streams[i].nodes = 0;
    say("hipStreamBeginCapture mode=%d", mode);
    return 0;
}
int hipStreamEndCapture(void* stream, void** graph) {
    int i = find_stream(stream);
    say("hipStreamEndCapture");
    if (i < 0) return 400;
    if (end_code != 0) {
        int code = end_code;
        end_code = 0;
        streams[i].capturing = end_leaves_capturing == 2 ? 1 : end_leaves_capturing ? 2 : 0;
        return code;
    }
    if (graph_count == MAX_HANDLES) return 2;
    streams[i].capturing = 0;
    long n = streams[i].nodes + node_skew;
    if (n < 0 || n > MAX_NODES) return 1;
    *graph = handle();
    graphs[graph_count].handle = *graph;
    graphs[graph_count].nodes = n;
    graphs[graph_count].base = next_node_base;
    next_node_base += MAX_NODES;
    graphs[graph_count].edges = calloc((size_t)(n > 0 ? n : 1), sizeof(int[2]));
    graphs[graph_count].edge_capacity = n > 0 ? n : 1;
    graphs[graph_count].edge_count = 0;
    if (!graphs[graph_count].edges) return 2;
    for (long k = 1; k < n; k++) {
        long e = graphs[graph_count].edge_count++;
        graphs[graph_count].edges[e][0] = branch_captures ? 0 : (int)(k - 1);
        graphs[graph_count].edges[e][1] = (int)k;
    }
    graph_count++;
    return 0;
}
static int find_graph(void* graph) {
    for (int i = 0; i < graph_count; i++)
        if (graphs[i].handle == graph) return i;
    return -1;
}
#ifndef FAKE_HIP_NO_CAPTURE_NODES
/* A capture's graph, before it ends, is named by its stream's handle plus
 * one, and the node its next node follows by that plus two: enough for a
 * child graph node to be added where the stream stands. */
static void* capture_token(int stream, int which) {
    return (void*)((uintptr_t)streams[stream].handle + (uintptr_t)which);
}
static void* capture_dependency[1];
/* What the next hipStreamGetCaptureInfo_v2 answers wrongly: a status in
 * place of the stream's (when not -1), and its dependencies as null. */
static int info_status = -1, info_null_dependencies = 0;
void fake_next_capture_info(int status, int null_dependencies) {
    info_status = status;
    info_null_dependencies = null_dependencies;
}
int hipStreamGetCaptureInfo_v2(void* stream, int* status, unsigned long long* id, void** graph,
                               void* const** dependencies, size_t* count) {
    int i = find_stream(stream);
    say("hipStreamGetCaptureInfo_v2");
    if (i < 0 || !status) return 400;
    *status = info_status >= 0 ? info_status : streams[i].capturing;
    info_status = -1;
    if (id) *id = (unsigned long long)(uintptr_t)streams[i].handle;
    int active = streams[i].capturing == 1;
    if (graph) *graph = active ? capture_token(i, 1) : 0;
    capture_dependency[0] = capture_token(i, 2);
    size_t n = active && streams[i].nodes > 0 ? 1 : 0;
    /* No dependencies come as a null array, as ROCm answers them. */
    if (dependencies) *dependencies = info_null_dependencies || n == 0 ? 0 : capture_dependency;
    info_null_dependencies = 0;
    if (count) *count = n;
    return 0;
}
/* A child graph node of a capture in progress: one more node of its
 * stream's chain, logged with the child's node count. */
int hipGraphAddChildGraphNode(void** node, void* graph, void* const* dependencies, size_t count,
                              void* child) {
    int c = find_graph(child);
    int owner = -1;
    for (int i = 0; i < stream_count; i++)
        if (streams[i].capturing == 1 && capture_token(i, 1) == graph) owner = i;
    say("hipGraphAddChildGraphNode child=%ld deps=%zu", c < 0 ? -1L : graphs[c].nodes, count);
    if (!node || owner < 0 || c < 0) return 1;
    if (count > 1 || (count == 1 && dependencies[0] != capture_token(owner, 2))) return 1;
    streams[owner].nodes++;
    *node = capture_token(owner, 3);
    return 0;
}
int hipStreamUpdateCaptureDependencies(void* stream, void** dependencies, size_t count,
                                       unsigned flags) {
    int i = find_stream(stream);
    say("hipStreamUpdateCaptureDependencies count=%zu flags=%u", count, flags);
    if (i < 0 || streams[i].capturing != 1) return 1;
    if (count != 1 || dependencies[0] != capture_token(i, 3)) return 1;
    return 0;
}
#endif
/* Answer a list as ROCm does: the count alone for a null array; otherwise
 * as many as asked for when there are at least that many (the count left
 * as it was), else all of them, the rest of the array nulled and the count
 * made theirs. */
static int answer(void** out, size_t* count, void** found, size_t n) {
    if (!count) return 1;
    if (!out) {
        *count = n;
        return 0;
    }
    size_t asked = *count;
    for (size_t k = 0; k < asked; k++) out[k] = k < n ? found[k] : 0;
    if (asked > n) *count = n;
    return 0;
}
int hipGraphGetNodes(void* graph, void** nodes, size_t* count) {
    int g = find_graph(graph);
    if (g < 0) return 1;
    size_t n = (size_t)graphs[g].nodes;
    void** found = calloc(n ? n : 1, sizeof(void*));
    if (!found) return 2;
    for (size_t k = 0; k < n; k++) found[k] = (void*)(graphs[g].base + k);
    int code = answer(nodes, count, found, n);
    free(found);
    return code;
}
#ifndef FAKE_HIP_NO_EDGE_FUNCTIONS
/* The graph a node belongs to, and its position there; -1 when none. */
static int find_node(void* node, long* position) {
    uintptr_t h = (uintptr_t)node;
    for (int i = 0; i < graph_count; i++)
        if (h >= graphs[i].base && h < graphs[i].base + (uintptr_t)graphs[i].nodes) {
            *position = (long)(h - graphs[i].base);
            return i;
        }
    return -1;
}
static long find_edge(int g, long from, long to) {
    for (long e = 0; e < graphs[g].edge_count; e++)
        if (graphs[g].edges[e][0] == from && graphs[g].edges[e][1] == to) return e;
    return -1;
}
int hipGraphGetRootNodes(void* graph, void** roots, size_t* count) {
    int g = find_graph(graph);
    if (g < 0) return 1;
    size_t n = 0;
    void** found = calloc((size_t)(graphs[g].nodes ? graphs[g].nodes : 1), sizeof(void*));
    if (!found) return 2;
    for (long k = 0; k < graphs[g].nodes; k++) {
        int dependent = 0;
        for (long e = 0; e < graphs[g].edge_count; e++) dependent |= graphs[g].edges[e][1] == k;
        if (!dependent) found[n++] = (void*)(graphs[g].base + (uintptr_t)k);
    }
    int code = answer(roots, count, found, n);
    free(found);
    return code;
}
int hipGraphNodeGetDependentNodes(void* node, void** dependents, size_t* count) {
    long k;
    int g = find_node(node, &k);
    if (g < 0) return 1;
    size_t n = 0;
    void** found = calloc((size_t)(graphs[g].edge_count ? graphs[g].edge_count : 1), sizeof(void*));
    if (!found) return 2;
    for (long e = 0; e < graphs[g].edge_count; e++)
        if (graphs[g].edges[e][0] == k) found[n++] = (void*)(graphs[g].base + (uintptr_t)graphs[g].edges[e][1]);
    int code = answer(dependents, count, found, n);
    free(found);
    return code;
}
/* As ROCm: a null array is refused, an edge from a node to itself or one
 * already there too. */
int hipGraphAddDependencies(void* graph, void* const* from, void* const* to, size_t count) {
    int g = find_graph(graph);
    say("hipGraphAddDependencies %zu", count);
    if (g < 0 || !from || !to) return 1;
    for (size_t i = 0; i < count; i++) {
        long a, b;
        if (find_node(from[i], &a) != g || find_node(to[i], &b) != g) return 1;
        if (a == b || find_edge(g, a, b) >= 0) return 1;
        if (graphs[g].edge_count == graphs[g].edge_capacity) {
            long capacity = graphs[g].edge_capacity * 2;
            int (*grown)[2] = realloc(graphs[g].edges, (size_t)capacity * sizeof(int[2]));
            if (!grown) return 2;
            graphs[g].edges = grown;
            graphs[g].edge_capacity = capacity;
        }
        long e = graphs[g].edge_count++;
        graphs[g].edges[e][0] = (int)a;
        graphs[g].edges[e][1] = (int)b;
    }
    return 0;
}
int hipGraphRemoveDependencies(void* graph, void* const* from, void* const* to, size_t count) {
    int g = find_graph(graph);
    say("hipGraphRemoveDependencies %zu", count);
    if (g < 0 || !from || !to) return 1;
    for (size_t i = 0; i < count; i++) {
        long a, b;
        if (find_node(from[i], &a) != g || find_node(to[i], &b) != g) return 1;
        long e = find_edge(g, a, b);
        if (e < 0) return 1;
        memmove(graphs[g].edges[e], graphs[g].edges[e + 1],
                (size_t)(graphs[g].edge_count - e - 1) * sizeof(int[2]));
        graphs[g].edge_count--;
    }
    return 0;
}
#endif /* FAKE_HIP_NO_EDGE_FUNCTIONS */
static void remember_edges(void* graph) {
    int g = find_graph(graph);
    if (g < 0) return;
    long n = graphs[g].edge_count;
    int (*kept)[2] = realloc(last_edges, (size_t)(n ? n : 1) * sizeof(int[2]));
    if (!kept) return;
    last_edges = kept;
    memcpy(last_edges, graphs[g].edges, (size_t)n * sizeof(int[2]));
    last_edge_count = n;
}
static long graph_nodes(void* graph) {
    int g = find_graph(graph);
    return g < 0 ? 0 : graphs[g].nodes;
}
static int find_exec(void* exec) {
    for (int i = 0; i < exec_count; i++)
        if (execs[i].handle == exec) return i;
    return -1;
}
int hipGraphExecUpdate(void* exec, void* graph, void** error_node, int* result) {
    *error_node = 0;
    int code = 0;
    *result = 0;
    if (update_count > 0) {
        code = update_codes[0];
        *result = update_results[0];
        update_count--;
        memmove(update_codes, update_codes + 1, (size_t)update_count * sizeof(int));
        memmove(update_results, update_results + 1, (size_t)update_count * sizeof(int));
    }
    int x = find_exec(exec);
    if (code == 0 && x >= 0) {
        long bytes = graph_nodes(graph) * KERNARG_PER_NODE;
        execs[x].kernarg += bytes;
        kernarg_bytes += bytes;
        remember_edges(graph);
    }
    say("hipGraphExecUpdate -> %d, %d", code, *result);
    return code;
}
static long last_instantiated_nodes = -1;
long fake_last_instantiated_nodes(void) { return last_instantiated_nodes; }
int hipGraphInstantiate(void** exec, void* graph, void** error_node, char* log, size_t size) {
    (void)error_node;
    (void)log;
    (void)size;
    if (exec_count == MAX_HANDLES) return 2;
    *exec = handle();
    execs[exec_count].handle = *exec;
    execs[exec_count].nodes = graph_nodes(graph);
    last_instantiated_nodes = execs[exec_count].nodes;
    execs[exec_count].kernarg = 0;
    exec_count++;
    remember_edges(graph);
    say("hipGraphInstantiate");
    return 0;
}
int hipGraphDestroy(void* graph) {
    int g = find_graph(graph);
    if (g >= 0) {
        free(graphs[g].edges);
        graphs[g] = graphs[--graph_count];
    }
    say("hipGraphDestroy");
    return 0;
}
int hipGraphExecDestroy(void* exec) {
    int x = find_exec(exec);
    if (x >= 0) {
        kernarg_bytes -= execs[x].kernarg;
        execs[x] = execs[--exec_count];
    }
    say("hipGraphExecDestroy");
    return 0;
}
int hipGraphLaunch(void* exec, void* stream) {
    (void)exec;
    captured(stream);
    say("hipGraphLaunch");
    return 0;
}

/* A program remembers whether its source asks to fail (`#error`). */
struct program { int broken; };
static const char broken_log[] = "broken.hip:1:2: error: this source is broken";

int hiprtcCreateProgram(void** program, const char* source, const char* name, int headers,
                        const char** sources, const char** names) {
    (void)sources;
    (void)names;
    struct program* p = calloc(1, sizeof *p);
    if (!p) return 1;
    p->broken = strstr(source, "#error") != 0;
    *program = p;
    say("hiprtcCreateProgram %s headers=%d axpy=%d", name, headers, strstr(source, "axpy") != 0);
    return 0;
}
int hiprtcCompileProgram(void* program, int count, const char** options) {
    char all[512] = "";
    for (int i = 0; i < count; i++) {
        if (i) strncat(all, " ", sizeof all - strlen(all) - 1);
        strncat(all, options[i], sizeof all - strlen(all) - 1);
    }
    say("hiprtcCompileProgram %s", all);
    return ((struct program*)program)->broken ? 6 : 0;
}
int hiprtcGetProgramLogSize(void* program, size_t* size) {
    *size = ((struct program*)program)->broken ? sizeof broken_log : 1;
    return 0;
}
int hiprtcGetProgramLog(void* program, char* log) {
    if (((struct program*)program)->broken) memcpy(log, broken_log, sizeof broken_log);
    else log[0] = 0;
    return 0;
}
int hiprtcGetCodeSize(void* program, size_t* size) { (void)program; *size = 4; return 0; }
int hiprtcGetCode(void* program, char* code) { (void)program; memcpy(code, "FAKE", 4); return 0; }
int hiprtcDestroyProgram(void** program) {
    free(*program);
    *program = 0;
    say("hiprtcDestroyProgram");
    return 0;
}
const char* hiprtcGetErrorString(int code) { (void)code; return "fake"; }
