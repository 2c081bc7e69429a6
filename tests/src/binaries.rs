//! Where the workspace's binaries come from.
//!
//! Cargo builds a package's binaries only for that package's own integration
//! tests, so `cargo test --workspace` does not build `chime-scheduler`,
//! `chime-worker` or `chimectl` for the suites in `chime-tests`, and
//! binaries built earlier are stale after an edit. So before the first
//! binary is used, the harness runs `cargo build --workspace --examples
//! --bin chime-scheduler --bin chime-worker --bin chimectl` once per test
//! process, with the profile of the running test; cargo writes them next to
//! the test executable's `deps/` directory. When nothing changed this takes a
//! fraction of a second. Only these three are built, so that another binary
//! of the workspace (a benchmark tool, say) that does not compile right now
//! does not fail every end-to-end test.
//!
//! `--examples` is there for its side effect on feature resolution: like a
//! test build, it activates dev-dependencies' features, so the libraries
//! `cargo test --workspace` just compiled are reused instead of compiled a
//! second time with a different feature set (dev-dependencies such as
//! `croner` and `criterion` turn on extra features of `chrono` and others).
//! `cargo test` compiles the examples anyway.
//!
//! Setting `CHIME_BIN_DIR` skips the build and uses the binaries in that
//! directory instead (release builds, installed ones).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Environment variable naming a directory of prebuilt binaries to use
/// instead of building the workspace's.
pub const BIN_DIR_ENV: &str = "CHIME_BIN_DIR";

/// One of the workspace's binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    Scheduler,
    Worker,
    Ctl,
}

impl Binary {
    /// All of them.
    pub const ALL: [Binary; 3] = [Binary::Scheduler, Binary::Worker, Binary::Ctl];

    /// The executable's file name.
    pub fn name(self) -> &'static str {
        match self {
            Binary::Scheduler => "chime-scheduler",
            Binary::Worker => "chime-worker",
            Binary::Ctl => "chimectl",
        }
    }

    /// Its path, built and up to date (see the module documentation).
    /// Panics if it cannot be built or found.
    pub fn path(self) -> PathBuf {
        let dirs = binary_dirs();
        dirs.iter()
            .map(|dir| dir.join(self.name()))
            .find(|path| path.is_file())
            .unwrap_or_else(|| {
                let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                panic!(
                    "{} not found in {}; run `cargo build --workspace --bins` first, \
                     or set {BIN_DIR_ENV} to the directory holding it",
                    self.name(),
                    looked.join(", ")
                )
            })
    }

    /// A command for it, to add arguments and environment to and hand to
    /// [`crate::ChimeProcess::spawn`].
    pub fn command(self) -> Command {
        Command::new(self.path())
    }
}

/// The built example `name` of the workspace (`target/<profile>/examples/`),
/// up to date like the binaries; panics if it is not there.
pub fn example_path(name: &str) -> PathBuf {
    binary_dirs()
        .iter()
        .map(|dir| dir.join("examples").join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("the example {name} was not built; run `cargo build --workspace --examples`")
        })
}

/// Directories that may hold the binaries, most likely first; the first
/// call builds them.
fn binary_dirs() -> &'static [PathBuf] {
    static DIRS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    DIRS.get_or_init(|| {
        if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
            return vec![PathBuf::from(dir)];
        }
        let exe = std::env::current_exe()
            .unwrap_or_else(|e| panic!("cannot locate the running test executable: {e}"));
        let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from);
        let dirs = candidate_dirs(&exe, target_dir.as_deref());
        build_workspace_binaries(&dirs[0]);
        dirs
    })
}

/// The directory holding the test executable (test executables live in
/// `target/<profile>/deps/`, binaries in `target/<profile>/`), then the same
/// profile under `$CARGO_TARGET_DIR`.
fn candidate_dirs(exe: &Path, cargo_target_dir: Option<&Path>) -> Vec<PathBuf> {
    let exe_dir = exe.parent().unwrap_or(Path::new("."));
    let profile_dir = if exe_dir.file_name() == Some(OsStr::new("deps")) {
        exe_dir.parent().unwrap_or(exe_dir)
    } else {
        exe_dir
    };
    let mut dirs = vec![profile_dir.to_path_buf()];
    if let (Some(target), Some(profile)) = (cargo_target_dir, profile_dir.file_name()) {
        let dir = target.join(profile);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Runs `cargo build` of [`Binary::ALL`] for the profile whose output
/// directory is `profile_dir`. Cargo's output is shown only if it fails.
fn build_workspace_binaries(profile_dir: &Path) {
    // Set by cargo for the processes it runs; a test run by hand uses PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut args: Vec<String> = ["build", "--workspace", "--examples"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    for binary in Binary::ALL {
        args.extend(["--bin".to_owned(), binary.name().to_owned()]);
    }
    args.extend(profile_args(profile_dir));
    let mut command = Command::new(&cargo);
    command
        .args(&args)
        .arg("--manifest-path")
        .arg(&manifest)
        .stdin(Stdio::null());
    // Cargo gives the test process variables describing the test's package
    // (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, …). Passed on, they make build
    // scripts that watch them (ring's does) look changed, so this build and
    // the next one from a shell would rebuild ring and all above it in turn.
    for (key, _) in std::env::vars_os() {
        if let Some(key) = key.to_str() {
            if is_package_variable(key) {
                command.env_remove(key);
            }
        }
    }
    let output = command.output();
    match output {
        Ok(output) if output.status.success() => {}
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let lines: Vec<&str> = stderr.lines().collect();
            let tail = lines[lines.len().saturating_sub(60)..].join("\n");
            panic!(
                "`cargo {}` failed ({}), so the binaries under test cannot be built:\n{tail}",
                args.join(" "),
                output.status
            );
        }
        // No cargo here (binaries copied to a test machine): use what exists.
        Err(e) => eprintln!(
            "warning: cannot run {} to build the workspace binaries ({e}); \
             using those already in {}",
            cargo.to_string_lossy(),
            profile_dir.display()
        ),
    }
}

/// Variables cargo sets for the process it runs, describing its package;
/// not the user's settings (`CARGO_HOME`, `CARGO_TARGET_DIR`, …).
fn is_package_variable(key: &str) -> bool {
    const SET_BY_CARGO: [&str; 6] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
    ];
    SET_BY_CARGO.contains(&key) || key.starts_with("CARGO_PKG_")
}

/// Cargo's flags for the profile that writes to `profile_dir`.
fn profile_args(profile_dir: &Path) -> Vec<String> {
    match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") | None => Vec::new(),
        Some("release") => vec!["--release".to_owned()],
        Some(profile) => vec!["--profile".to_owned(), profile.to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{candidate_dirs, is_package_variable, profile_args};

    #[test]
    fn binaries_are_looked_for_above_the_deps_dir() {
        let dirs = candidate_dirs(Path::new("/w/target/debug/deps/harness-0123abcd"), None);
        assert_eq!(dirs, vec![PathBuf::from("/w/target/debug")]);
    }

    #[test]
    fn cargo_target_dir_adds_the_same_profile_there() {
        let dirs = candidate_dirs(
            Path::new("/w/target/release/deps/e2e-0123abcd"),
            Some(Path::new("/elsewhere")),
        );
        assert_eq!(
            dirs,
            vec![
                PathBuf::from("/w/target/release"),
                PathBuf::from("/elsewhere/release")
            ]
        );
    }

    #[test]
    fn nested_build_drops_package_variables_but_keeps_user_settings() {
        assert!(is_package_variable("CARGO_MANIFEST_DIR"));
        assert!(is_package_variable("CARGO_PKG_NAME"));
        assert!(!is_package_variable("CARGO_TARGET_DIR"));
        assert!(!is_package_variable("CARGO_HOME"));
        assert!(!is_package_variable("CARGO"));
    }

    #[test]
    fn build_uses_the_profile_of_the_test_executable() {
        assert!(profile_args(Path::new("/w/target/debug")).is_empty());
        assert_eq!(profile_args(Path::new("/w/target/release")), ["--release"]);
        assert_eq!(profile_args(Path::new("/w/target/ci")), ["--profile", "ci"]);
    }
}
