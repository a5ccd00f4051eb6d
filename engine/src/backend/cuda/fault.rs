//! Which CUDA driver errors are sticky: after them the context is unusable and every later
//! call fails the same way, so the replica must stop serving and restart.

use cudarc::driver::sys::CUresult;

/// Whether `code` leaves the context unusable. The CUDA driver API documents each of these
/// as "the context cannot be used, so it must be destroyed (and a new one should be
/// created)" (launch faults, illegal or misaligned addresses, device-side asserts), or as the
/// device or driver itself being gone (uncorrectable ECC error, driver shut down). Anything
/// else (out of memory, a bad argument, a launch that asked for too many resources) fails one
/// call and leaves the context usable.
pub fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_DEINITIALIZED
    )
}

#[cfg(test)]
mod tests {
    use cudarc::driver::DriverError;

    use super::*;

    #[test]
    fn launch_faults_are_fatal_and_ordinary_failures_are_not() {
        for code in [
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ASSERT,
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        ] {
            let err = crate::Error::from(super::super::Error::from(DriverError(code)));
            assert!(err.is_fatal(), "{code:?} must stop the replica");
            assert!(err.to_string().contains("device lost"), "{err}");
        }
        for code in [
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        ] {
            let err = crate::Error::from(super::super::Error::from(DriverError(code)));
            assert!(!err.is_fatal(), "{code:?} fails one call only");
        }
    }
}
