//! CUDA result codes: named by a table, so that a code is only ever an
//! integer here (a code newer than the table prints as its number), and the
//! failures this backend finds itself, all as capture-core's
//! [`DriverError`].

use capture_core::DriverError;

/// The backend name every error carries.
pub(crate) const BACKEND: &str = "cuda";

/// Every `CUresult` `cuda.h` names (CUDA 13.x, a superset of 12.x), by
/// value; the ABI test checks it against both headers.
const NAMES: &[(i32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED"),
    (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED"),
    (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (47, "CUDA_ERROR_MULTICAST_RESOURCE_FULL"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY"),
    (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (215, "CUDA_ERROR_UNSUPPORTED_LIMIT"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (218, "CUDA_ERROR_INVALID_PTX"),
    (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT"),
    (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"),
    (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
    (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"),
    (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"),
    (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC"),
    (226, "CUDA_ERROR_CONTAINED"),
    (227, "CUDA_ERROR_INSUFFICIENT_LOADER_VERSION"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"),
    (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (402, "CUDA_ERROR_LOSSY_QUERY"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (711, "CUDA_ERROR_TOO_MANY_PEERS"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (714, "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    (716, "CUDA_ERROR_MISALIGNED_ADDRESS"),
    (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    (718, "CUDA_ERROR_INVALID_PC"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"),
    (805, "CUDA_ERROR_MPS_CONNECTION_FAILED"),
    (806, "CUDA_ERROR_MPS_RPC_FAILURE"),
    (807, "CUDA_ERROR_MPS_SERVER_NOT_READY"),
    (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED"),
    (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED"),
    (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED"),
    (811, "CUDA_ERROR_CDP_NOT_SUPPORTED"),
    (812, "CUDA_ERROR_CDP_VERSION_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE"),
    (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED"),
    (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"),
    (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"),
    (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"),
    (907, "CUDA_ERROR_CAPTURED_EVENT"),
    (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"),
    (909, "CUDA_ERROR_TIMEOUT"),
    (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE"),
    (911, "CUDA_ERROR_EXTERNAL_DEVICE"),
    (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE"),
    (913, "CUDA_ERROR_FUNCTION_NOT_LOADED"),
    (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE"),
    (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION"),
    (916, "CUDA_ERROR_KEY_ROTATION"),
    (917, "CUDA_ERROR_STREAM_DETACHED"),
    (918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE"),
    (919, "CUDA_ERROR_FABRIC_NOT_READY"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

/// The name of `code`, where the table has it.
pub(crate) fn code_name(code: i32) -> Option<&'static str> {
    NAMES
        .binary_search_by_key(&code, |&(value, _)| value)
        .ok()
        .map(|at| NAMES[at].1)
}

/// The table, for the ABI test.
pub fn result_names() -> &'static [(i32, &'static str)] {
    NAMES
}

/// `CUDA_ERROR_NAME (code)`, or `CUDA error code` for a code the table
/// lacks, followed by the driver's description when it gave one.
pub(crate) fn describe(code: i32, text: Option<&str>) -> String {
    let head = match code_name(code) {
        Some(name) => format!("{name} ({code})"),
        None => format!("CUDA error {code}"),
    };
    match text {
        Some(text) if !text.is_empty() => format!("{head}: {text}"),
        _ => head,
    }
}

/// A failure this backend found itself, before or instead of asking the
/// driver.
pub(crate) fn refuse(op: &'static str, message: impl Into<String>) -> DriverError {
    DriverError::new(BACKEND, op, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_names_codes_the_enum_of_an_old_binding_lacks() {
        assert!(NAMES.windows(2).all(|pair| pair[0].0 < pair[1].0));
        assert_eq!(code_name(0), Some("CUDA_SUCCESS"));
        assert_eq!(code_name(34), Some("CUDA_ERROR_STUB_LIBRARY"));
        assert_eq!(code_name(226), Some("CUDA_ERROR_CONTAINED"));
        assert_eq!(code_name(12345), None);
    }

    #[test]
    fn unknown_codes_print_as_their_number() {
        assert_eq!(describe(12345, None), "CUDA error 12345");
        assert_eq!(
            describe(100, Some("no CUDA-capable device is detected")),
            "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"
        );
        assert_eq!(describe(226, Some("")), "CUDA_ERROR_CONTAINED (226)");
    }
}
