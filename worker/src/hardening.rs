//! Keeping the worker's own secrets from the jobs it runs.
//!
//! A shell job runs as the worker's user. Without more, it could read the
//! worker's NATS password from `/proc/<worker pid>/environ` (the kernel
//! keeps the environment the process started with, whatever it changes
//! later), or attach to the worker with ptrace, and then act as the worker
//! on NATS. A non-dumpable process's `/proc` files belong to root and it
//! cannot be traced by its own user, so jobs of the same user see neither.
//! The secret variables are also dropped from the worker's environment
//! once read, so nothing the worker starts inherits them.
//!
//! What this cannot do: a job running as the worker's user can still read
//! files that user can read (an nkey or credentials file, a mounted
//! secret). docs/SECURITY.md says how to run jobs under another user.

/// The variables that hold NATS credentials (the URL may carry some).
pub const SECRET_VARIABLES: [&str; 3] =
    ["CHIME_NATS_PASSWORD", "CHIME_NATS_TOKEN", "CHIME_NATS_URL"];

/// Makes the process non-dumpable and removes the secret variables from
/// its environment. Call once, after the settings are read and before any
/// thread is started (changing the environment is not thread-safe).
pub fn protect_secrets() -> std::io::Result<()> {
    for variable in SECRET_VARIABLES {
        // SAFETY: called from `main` before the runtime or any other thread
        // exists, so nothing reads the environment concurrently.
        unsafe { std::env::remove_var(variable) };
    }
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_dumpable(false).map_err(std::io::Error::from)?;
    Ok(())
}
