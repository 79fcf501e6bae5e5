/*
 * A stand-in for libcuda.so.1 that answers like a driver finding no device,
 * so the "unavailable" path can be exercised on a machine with no GPU.
 *
 * It exports only what is needed before and during cuInit. Two variables
 * change its answers, to reach the checks that come after cuInit:
 *   CUDA_STUB_INIT_RESULT     what cuInit returns (default 100,
 *                             CUDA_ERROR_NO_DEVICE);
 *   CUDA_STUB_DRIVER_VERSION  what cuDriverGetVersion reports (default 12040).
 */
#include <stddef.h>
#include <stdlib.h>

typedef int CUresult;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
};

static int env_int(const char *name, int fallback) {
    const char *value = getenv(name);
    return value != NULL ? atoi(value) : fallback;
}

CUresult cuInit(unsigned int flags) {
    (void)flags;
    return env_int("CUDA_STUB_INIT_RESULT", CUDA_ERROR_NO_DEVICE);
}

CUresult cuDriverGetVersion(int *version) {
    if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
    *version = env_int("CUDA_STUB_DRIVER_VERSION", 12040);
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char **text) {
    if (text == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "CUDA_ERROR_NOT_INITIALIZED"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *text = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    if (text == NULL) return CUDA_ERROR_INVALID_VALUE;
    switch (error) {
    case CUDA_SUCCESS: *text = "no error"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *text = "no CUDA-capable device is detected"; return CUDA_SUCCESS;
    default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}
