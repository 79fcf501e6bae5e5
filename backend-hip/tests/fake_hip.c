/*
 * A stand-in for libamdhip64.so with hiprtc inside it (as ROCm 5 ships it)
 * and without hipGraphUpload (as ROCm 5.2 lacks it), so the backend's calls
 * can be watched on a machine with no GPU. Device memory is host memory,
 * copies run at once, kernels only log their arguments, and every call that
 * matters is appended as one line to the file named by FAKE_HIP_LOG.
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

static int node_types[16] = {0, 1};
static size_t node_count = 2;

void fake_set_node_types(const int* types, size_t count) {
    node_count = count < 16 ? count : 16;
    memcpy(node_types, types, node_count * sizeof(int));
}

int hipInit(unsigned flags) { return flags == 0 ? 0 : 1; }
int hipGetDeviceCount(int* count) { *count = 1; return 0; }
int hipSetDevice(int ordinal) { return ordinal == 0 ? 0 : 101; }
int hipDeviceGet(int* device, int ordinal) { *device = ordinal; return 0; }
int hipDeviceGetName(char* name, int len, int device) {
    (void)device;
    snprintf(name, (size_t)len, "Fake HIP device");
    return 0;
}
int hipRuntimeGetVersion(int* version) { *version = 60443483; return 0; }
int hipDriverGetVersion(int* version) { *version = 60443483; return 0; }
const char* hipGetErrorName(int code) { (void)code; return "hipErrorFake"; }
const char* hipGetErrorString(int code) { (void)code; return "a fake error"; }

int hipStreamCreateWithFlags(void** stream, unsigned flags) {
    *stream = handle();
    say("hipStreamCreateWithFlags flags=%u", flags);
    return 0;
}
int hipStreamDestroy(void* stream) { (void)stream; say("hipStreamDestroy"); return 0; }
int hipStreamSynchronize(void* stream) { (void)stream; say("hipStreamSynchronize"); return 0; }

int hipMalloc(void** ptr, size_t size) {
    *ptr = calloc(1, size);
    say("hipMalloc %zu -> %p", size, *ptr);
    return *ptr ? 0 : 2;
}
int hipFree(void* ptr) { say("hipFree %p", ptr); free(ptr); return 0; }
int hipHostMalloc(void** ptr, size_t size, unsigned flags) {
    *ptr = calloc(1, size);
    say("hipHostMalloc %zu flags=%u", size, flags);
    return *ptr ? 0 : 2;
}
int hipHostFree(void* ptr) { say("hipHostFree"); free(ptr); return 0; }
int hipMemcpyHtoDAsync(void* dst, void* src, size_t bytes, void* stream) {
    (void)stream;
    memcpy(dst, src, bytes);
    say("hipMemcpyHtoDAsync %p %zu", dst, bytes);
    return 0;
}
int hipMemcpyDtoHAsync(void* dst, void* src, size_t bytes, void* stream) {
    (void)stream;
    memcpy(dst, src, bytes);
    say("hipMemcpyDtoHAsync %p %zu", src, bytes);
    return 0;
}

int hipModuleLoadData(void** module, const void* image) {
    *module = handle();
    say("hipModuleLoadData %.4s", (const char*)image);
    return 0;
}
int hipModuleUnload(void* module) { (void)module; say("hipModuleUnload"); return 0; }
int hipModuleGetFunction(void** function, void* module, const char* name) {
    (void)module;
    *function = strdup(name);
    return 0;
}
int hipModuleLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void* stream,
                          void** params, void** extra) {
    (void)stream;
    (void)extra;
    const char* name = (const char*)function;
    int count = strcmp(name, "fill") == 0 ? 2 : 3;
    char args[256] = "";
    for (int i = 0; i < count; i++) {
        char one[32];
        snprintf(one, sizeof one, "%s%p", i ? "," : "", *(void**)params[i]);
        strncat(args, one, sizeof args - strlen(args) - 1);
    }
    say("hipModuleLaunchKernel %s grid=%u,%u,%u block=%u,%u,%u shared=%u args=%s", name, gx, gy,
        gz, bx, by, bz, shared, args);
    return 0;
}

int hipEventCreateWithFlags(void** event, unsigned flags) {
    *event = handle();
    say("hipEventCreateWithFlags flags=%u", flags);
    return 0;
}
int hipEventRecord(void* event, void* stream) { (void)event; (void)stream; say("hipEventRecord"); return 0; }
int hipEventSynchronize(void* event) { (void)event; say("hipEventSynchronize"); return 0; }
int hipEventQuery(void* event) { (void)event; return 0; }
int hipEventDestroy(void* event) { (void)event; say("hipEventDestroy"); return 0; }

int hipStreamBeginCapture(void* stream, int mode) {
    (void)stream;
    say("hipStreamBeginCapture mode=%d", mode);
    return 0;
}
int hipStreamEndCapture(void* stream, void** graph) {
    (void)stream;
    *graph = handle();
    say("hipStreamEndCapture");
    return 0;
}
int hipGraphGetNodes(void* graph, void** nodes, size_t* count) {
    (void)graph;
    if (!nodes) {
        *count = node_count;
        return 0;
    }
    size_t n = *count < node_count ? *count : node_count;
    for (size_t i = 0; i < n; i++) nodes[i] = (void*)(i + 1);
    *count = n;
    return 0;
}
int hipGraphNodeGetType(void* node, int* type) {
    *type = node_types[(uintptr_t)node - 1];
    return 0;
}
int hipGraphInstantiate(void** exec, void* graph, void** error_node, char* log, size_t size) {
    (void)graph;
    (void)error_node;
    (void)log;
    (void)size;
    *exec = handle();
    say("hipGraphInstantiate");
    return 0;
}
int hipGraphDestroy(void* graph) { (void)graph; say("hipGraphDestroy"); return 0; }
int hipGraphExecDestroy(void* exec) { (void)exec; say("hipGraphExecDestroy"); return 0; }
int hipGraphLaunch(void* exec, void* stream) { (void)exec; (void)stream; say("hipGraphLaunch"); return 0; }

int hiprtcCreateProgram(void** program, const char* source, const char* name, int headers,
                        const char** sources, const char** names) {
    (void)sources;
    (void)names;
    *program = handle();
    say("hiprtcCreateProgram %s headers=%d axpy=%d", name, headers, strstr(source, "axpy") != 0);
    return 0;
}
int hiprtcCompileProgram(void* program, int count, const char** options) {
    (void)program;
    say("hiprtcCompileProgram options=%d first=%s", count, count ? options[0] : "");
    return 0;
}
int hiprtcGetProgramLogSize(void* program, size_t* size) { (void)program; *size = 1; return 0; }
int hiprtcGetProgramLog(void* program, char* log) { (void)program; log[0] = 0; return 0; }
int hiprtcGetCodeSize(void* program, size_t* size) { (void)program; *size = 4; return 0; }
int hiprtcGetCode(void* program, char* code) { (void)program; memcpy(code, "FAKE", 4); return 0; }
int hiprtcDestroyProgram(void** program) { *program = 0; say("hiprtcDestroyProgram"); return 0; }
const char* hiprtcGetErrorString(int code) { (void)code; return "fake"; }
