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
 *   backend resolves: it lists devices, retains a pretend context, keeps a
 *   per-thread count of contexts pushed (cuStubContextDepth), and answers
 *   CUDA_ERROR_NOT_SUPPORTED to everything that would need a GPU.
 *
 * Variables change the answers, to reach each check:
 *   CUDA_STUB_INIT_RESULT     what cuInit returns (minimal: 100,
 *                             CUDA_ERROR_NO_DEVICE; full: 0);
 *   CUDA_STUB_DRIVER_VERSION  what cuDriverGetVersion reports (12040);
 *   CUDA_STUB_DEVICE_COUNT    devices the full stub lists (1);
 *   CUDA_STUB_RETAIN_RESULT   what cuDevicePrimaryCtxRetain returns (0).
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
    CUDA_ERROR_NOT_SUPPORTED = 801,
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

#ifdef CUDA_STUB_FULL

/* Contexts pushed and not yet popped on the calling thread. */
static __thread int context_depth = 0;
/* The pretend primary context: any non-null address. */
static int pretend_context;

int cuStubContextDepth(void) { return context_depth; }

static int device_count(void) { return env_int("CUDA_STUB_DEVICE_COUNT", 1); }

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
    case 75: *value = 9; break;         /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *value = 0; break;         /* COMPUTE_CAPABILITY_MINOR */
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
    (void)device;
    if (context == NULL) return CUDA_ERROR_INVALID_VALUE;
    CUresult result = env_int("CUDA_STUB_RETAIN_RESULT", CUDA_SUCCESS);
    if (result == CUDA_SUCCESS) *context = &pretend_context;
    return result;
}

CUresult cuCtxPushCurrent_v2(void *context) {
    if (context != &pretend_context) return CUDA_ERROR_INVALID_CONTEXT;
    context_depth += 1;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(void **context) {
    if (context_depth <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    context_depth -= 1;
    if (context != NULL) *context = &pretend_context;
    return CUDA_SUCCESS;
}

/* Everything that would need a GPU. */
#define UNSUPPORTED(name) \
    CUresult name() { return CUDA_ERROR_NOT_SUPPORTED; }

UNSUPPORTED(cuMemAlloc_v2)
UNSUPPORTED(cuMemFree_v2)
UNSUPPORTED(cuMemHostAlloc)
UNSUPPORTED(cuMemFreeHost)
UNSUPPORTED(cuMemcpyHtoDAsync_v2)
UNSUPPORTED(cuMemcpyDtoHAsync_v2)
UNSUPPORTED(cuStreamCreate)
UNSUPPORTED(cuStreamSynchronize)
UNSUPPORTED(cuStreamDestroy_v2)
UNSUPPORTED(cuStreamWaitEvent)
UNSUPPORTED(cuStreamBeginCapture_v2)
UNSUPPORTED(cuStreamEndCapture)
UNSUPPORTED(cuStreamIsCapturing)
UNSUPPORTED(cuEventCreate)
UNSUPPORTED(cuEventRecord)
UNSUPPORTED(cuEventQuery)
UNSUPPORTED(cuEventSynchronize)
UNSUPPORTED(cuEventDestroy_v2)
UNSUPPORTED(cuLinkCreate_v2)
UNSUPPORTED(cuLinkAddData_v2)
UNSUPPORTED(cuLinkComplete)
UNSUPPORTED(cuLinkDestroy)
UNSUPPORTED(cuModuleLoadDataEx)
UNSUPPORTED(cuModuleGetFunction)
UNSUPPORTED(cuModuleUnload)
UNSUPPORTED(cuFuncGetAttribute)
UNSUPPORTED(cuLaunchKernel)
UNSUPPORTED(cuGraphGetNodes)
UNSUPPORTED(cuGraphNodeGetType)
UNSUPPORTED(cuGraphInstantiateWithFlags)
UNSUPPORTED(cuGraphDestroy)
UNSUPPORTED(cuGraphExecDestroy)
UNSUPPORTED(cuGraphUpload)
UNSUPPORTED(cuGraphLaunch)

#endif /* CUDA_STUB_FULL */
