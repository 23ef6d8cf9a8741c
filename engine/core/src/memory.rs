//! How the process's allocator treats memory that a forward frees.
//!
//! A forward allocates its activations afresh: every candle op and every packed matmul
//! returns a new buffer, and a 512-token chunk's are megabytes each even for the embedded
//! model (512 rows of its 768-wide feed-forward: 1.5 MB). glibc serves such a request with
//! a fresh `mmap` (its threshold starts at 128 KiB) and gives memory back to the kernel when
//! a free leaves more than its trim threshold unused, so the next op's buffer is faulted in
//! and zero-filled by the kernel again, page by page. Page faults and the kernel's zeroing
//! were a quarter of an embedded-model prefill's time (`perf`). llama.cpp avoids this by
//! planning one compute buffer per graph; the engine keeps candle's allocate-per-op model
//! and instead tells glibc to keep what it has: [`keep_freed_memory`].

/// Buffers below this size come from the heap, not from a fresh `mmap`: glibc's largest
/// allowed threshold on 64-bit targets (`DEFAULT_MMAP_THRESHOLD_MAX`). Larger ones (KV
/// caches of long contexts, weights) are still mapped on their own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 32 << 20;

/// Free memory the heap keeps before giving any back to the kernel: more than a forward's
/// activations at the largest chunk, so that none are faulted in again step after step.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const TRIM_THRESHOLD: libc::c_int = 256 << 20;

/// Makes glibc's allocator keep freed memory for reuse instead of returning it to the
/// kernel (see the module documentation). Call once, first thing in `main`; a process-wide
/// setting, which changes nothing but speed. Returns whether the allocator took it (always
/// false on a target without glibc, where it does nothing).
///
/// The cost: the process keeps up to 256 MiB of freed heap memory mapped, so its
/// resident size stays at its peak working set instead of falling back between steps.
pub fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only sets allocator parameters (it takes the arena lock), and
        // both values are within the ranges glibc documents for them.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_takes_the_settings() {
        assert_eq!(
            keep_freed_memory(),
            cfg!(all(target_os = "linux", target_env = "gnu"))
        );
    }
}
