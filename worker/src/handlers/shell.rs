//! `shell`: runs a program, no shell interposed.
//!
//! Payload `{"argv": ["program", "arg", …], "env"?: {"NAME": "value"}, "cwd"?: "dir"}`,
//! read by [`ShellPayload`], the definition job validation checks puts with.
//! Exit 0 is success. stdout and stderr are captured together (last
//! `max_output_bytes` kept). The environment also carries `CHIME_FIRING_ID`,
//! `CHIME_JOB_ID`, `CHIME_SCHEDULED_AT` and `CHIME_ATTEMPT`, `TRACEPARENT`
//! (the run's W3C trace context, so the job's own spans join the firing's
//! trace), and for a shard of a sharded job `CHIME_SHARD` and
//! `CHIME_SHARDS`; of the worker's
//! own environment it sees only the variables the handler is told to pass
//! (`PATH`, `HOME`, `LANG`, `TZ` by default), never the worker's credentials.
//! The program runs
//! in its own process group; the whole group is killed (SIGKILL) on timeout
//! or cancel, and when the program exits, so nothing it started outlives the run.
//! Refused unless enabled (`--allow-shell`).

use crate::firing::context::FiringContext;
use crate::handler::{Handler, HandlerError, HandlerResult};
use crate::output::TailBuffer;
use async_trait::async_trait;
use chime_common::duration::format_time;
use chime_common::payloads::shell::{
    ShellPayload, ENV_ATTEMPT, ENV_FIRING_ID, ENV_JOB_ID, ENV_SCHEDULED_AT, ENV_SHARD, ENV_SHARDS,
    USAGE,
};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio::task::JoinHandle;

/// How long output is still read after the process group was killed.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// The message of a disabled shell handler.
pub const SHELL_DISABLED: &str = "the shell handler is disabled on this worker; \
    start chime-worker with --allow-shell (or CHIME_ALLOW_SHELL=true) to let it run commands";

/// The variables of the worker's environment a command inherits unless
/// told otherwise (`--shell-env`): enough to find programs and read text,
/// nothing that could hold a credential.
pub const DEFAULT_INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TZ"];

/// Runs `argv` as a child process.
#[derive(Debug, Clone)]
pub struct ShellHandler {
    allowed: bool,
    /// The worker's environment variables a command inherits; the rest of
    /// the worker's environment (credentials, paths to them) is not passed.
    inherited: Vec<String>,
}

impl ShellHandler {
    /// Enabled when `allowed`; otherwise every firing fails with [`SHELL_DISABLED`].
    pub fn new(allowed: bool) -> Self {
        ShellHandler {
            allowed,
            inherited: DEFAULT_INHERITED_ENV.map(String::from).to_vec(),
        }
    }

    /// Commands inherit only these variables of the worker's environment
    /// (besides the firing's `CHIME_*` ones and the payload's `env`).
    pub fn inheriting(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.inherited = names.into_iter().map(Into::into).collect();
        self
    }

    /// A handler that runs commands.
    pub fn enabled() -> Self {
        Self::new(true)
    }

    /// A handler that refuses every firing.
    pub fn disabled() -> Self {
        Self::new(false)
    }
}

/// The firing's payload, checked as a put checks it: a job stored before a
/// rule existed, or a trigger's payload from an older scheduler, fails here
/// with the same words.
fn parse_payload(payload: &serde_json::Value) -> Result<ShellPayload, HandlerError> {
    ShellPayload::from_json(payload, "payload").map_err(|errors| {
        let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
        HandlerError::new(format!(
            "bad shell payload: {}; {USAGE}",
            problems.join("; ")
        ))
    })
}

/// Kills the process group when dropped (the run's future was dropped, or it ended).
struct GroupKiller(Option<Pid>);

impl GroupKiller {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH: the group is already gone.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn capture(
    stream: Option<impl AsyncRead + Unpin + Send + 'static>,
    buffer: Arc<Mutex<TailBuffer>>,
) -> Option<JoinHandle<()>> {
    let mut stream = stream?;
    Some(tokio::spawn(async move {
        let mut chunk = vec![0u8; 8192];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(&chunk[..n]),
            }
        }
    }))
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(name) => format!("killed by signal {signal} ({name})"),
            Err(_) => format!("killed by signal {signal}"),
        },
        _ => format!("ended with {status}"),
    }
}

#[async_trait]
impl Handler for ShellHandler {
    fn offered(&self) -> bool {
        self.allowed
    }

    async fn run(&self, ctx: FiringContext) -> HandlerResult {
        if !self.allowed {
            return Err(HandlerError::new(SHELL_DISABLED));
        }
        let payload = parse_payload(&ctx.firing.payload)?;
        let program = &payload.argv[0];
        let mut command = Command::new(program);
        command.env_clear();
        for name in &self.inherited {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command
            .args(&payload.argv[1..])
            .envs(&payload.env)
            .env(ENV_FIRING_ID, ctx.firing.firing_id.to_string())
            .env(ENV_JOB_ID, &ctx.firing.job_id)
            .env(ENV_SCHEDULED_AT, format_time(ctx.firing.scheduled_at))
            .env(ENV_ATTEMPT, ctx.firing.attempt.to_string())
            .env("TRACEPARENT", ctx.traceparent.to_string());
        if let Some(shard) = ctx.firing.shard {
            command
                .env(ENV_SHARD, shard.index.to_string())
                .env(ENV_SHARDS, shard.count.to_string());
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &payload.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|e| match &payload.cwd {
            Some(cwd) => HandlerError::new(format!("cannot start {program:?} in {cwd}: {e}")),
            None => HandlerError::new(format!("cannot start {program:?}: {e}")),
        })?;
        let killer = GroupKiller(
            child
                .id()
                .and_then(|pid| i32::try_from(pid).ok())
                .map(Pid::from_raw),
        );
        let buffer = Arc::new(Mutex::new(TailBuffer::new(ctx.max_output_bytes)));
        let readers: Vec<JoinHandle<()>> = [
            capture(child.stdout.take(), buffer.clone()),
            capture(child.stderr.take(), buffer.clone()),
        ]
        .into_iter()
        .flatten()
        .collect();

        let status = tokio::select! {
            status = child.wait() => Some(status),
            _ = ctx.cancel.cancelled() => None,
        };
        // The program ended or is being stopped: nothing it started may outlive the run.
        killer.kill();
        let status = match status {
            Some(status) => status,
            None => child.wait().await,
        };
        for mut reader in readers {
            if tokio::time::timeout(OUTPUT_DRAIN, &mut reader)
                .await
                .is_err()
            {
                // A process that left the group still holds the pipe.
                reader.abort();
            }
        }
        drop(killer);
        let output = buffer.lock().unwrap_or_else(|p| p.into_inner()).to_text();

        let status = status.map_err(|e| {
            HandlerError::new(format!("cannot wait for {program:?}: {e}"))
                .with_output(output.clone())
        })?;
        if ctx.cancel.is_cancelled() {
            return Err(
                HandlerError::new(format!("stopped: {}", describe(status))).with_output(output)
            );
        }
        if status.success() {
            Ok(Some(output))
        } else {
            Err(HandlerError::new(format!("{program} {}", describe(status))).with_output(output))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firing::message::FiringDetails;
    use chime_common::FiringId;
    use chrono::Utc;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    fn ctx(payload: serde_json::Value) -> FiringContext {
        let now = Utc::now();
        FiringContext {
            firing: FiringDetails {
                firing_id: FiringId::new("job-1", 1_700_000_000_000, 3),
                job_id: "job-1".into(),
                handler: "shell".into(),
                scheduled_at: now,
                due_at: now,
                attempt: 3,
                priority: 5,
                payload,
                shard: None,
                traceparent: None,
            },
            deadline: now + chrono::Duration::seconds(30),
            cancel: CancellationToken::new(),
            max_output_bytes: 64 * 1024,
            worker_id: "w".into(),
            traceparent: chime_common::traceparent::TraceParent::fresh(),
        }
    }

    #[tokio::test]
    async fn a_shard_sees_its_shard_and_count() {
        let argv =
            json!({"argv": ["sh", "-c", "echo shard=${CHIME_SHARD-none}/${CHIME_SHARDS-none}"]});
        let mut sharded = ctx(argv.clone());
        sharded.firing.firing_id = FiringId::of_shard("job-1", 1_700_000_000_000, 5, 8, 3);
        sharded.firing.shard = Some(crate::firing::message::Shard { index: 5, count: 8 });
        let output = ShellHandler::enabled().run(sharded).await.unwrap().unwrap();
        assert!(output.contains("shard=5/8"), "{output}");
        let output = ShellHandler::enabled()
            .run(ctx(argv))
            .await
            .unwrap()
            .unwrap();
        assert!(output.contains("shard=none/none"), "{output}");
    }

    #[tokio::test]
    async fn disabled_shell_refuses() {
        let error = ShellHandler::disabled()
            .run(ctx(json!({"argv": ["true"]})))
            .await
            .unwrap_err();
        assert_eq!(error.message, SHELL_DISABLED);
    }

    #[tokio::test]
    async fn runs_argv_with_env_and_captures_both_streams() {
        let payload = json!({
            "argv": ["sh", "-c", "echo out $CHIME_FIRING_ID $CHIME_ATTEMPT $CHIME_JOB_ID $MINE; echo err >&2"],
            "env": {"MINE": "mine"},
            "cwd": "/"
        });
        let output = ShellHandler::enabled()
            .run(ctx(payload))
            .await
            .unwrap()
            .unwrap();
        assert!(
            output.contains("out job-1@1700000000000#3 3 job-1 mine"),
            "{output}"
        );
        assert!(output.contains("err"), "{output}");
    }

    /// The job's own spans join the firing's trace: `TRACEPARENT` is the
    /// run's, in place of one the payload names.
    #[tokio::test]
    async fn the_command_sees_the_run_s_traceparent() {
        let payload = json!({
            "argv": ["sh", "-c", "echo \"tp=$TRACEPARENT\""],
            "env": {"TRACEPARENT": "00-11111111111111111111111111111111-2222222222222222-01"},
        });
        let ctx = ctx(payload);
        let expected = format!("tp={}", ctx.traceparent);
        let output = ShellHandler::enabled().run(ctx).await.unwrap().unwrap();
        assert_eq!(output.trim(), expected);
    }

    #[tokio::test]
    async fn commands_inherit_only_the_named_variables_of_the_worker() {
        // Set once for this test process; no other test reads these names.
        std::env::set_var("CHIME_TEST_WORKER_SECRET", "s3cret");
        std::env::set_var("CHIME_TEST_PASSED_ON", "kept");
        let payload = json!({"argv": ["env"], "env": {"FROM_PAYLOAD": "p"}});
        let output = ShellHandler::enabled()
            .run(ctx(payload.clone()))
            .await
            .unwrap()
            .unwrap();
        assert!(!output.contains("s3cret"), "{output}");
        assert!(!output.contains("CHIME_TEST_PASSED_ON"), "{output}");
        assert!(output.contains("PATH="), "{output}");
        assert!(output.contains("FROM_PAYLOAD=p"), "{output}");
        assert!(output.contains("CHIME_FIRING_ID=job-1@"), "{output}");
        let output = ShellHandler::enabled()
            .inheriting(["CHIME_TEST_PASSED_ON"])
            .run(ctx(json!({"argv": ["/usr/bin/env"]})))
            .await
            .unwrap()
            .unwrap();
        assert!(output.contains("CHIME_TEST_PASSED_ON=kept"), "{output}");
        assert!(
            !output.contains("s3cret") && !output.contains("PATH="),
            "{output}"
        );
    }

    #[tokio::test]
    async fn non_zero_exit_fails_with_output() {
        let error = ShellHandler::enabled()
            .run(ctx(json!({"argv": ["sh", "-c", "echo partial; exit 3"]})))
            .await
            .unwrap_err();
        assert_eq!(error.message, "sh exited with status 3");
        assert_eq!(error.output.as_deref(), Some("partial\n"));
    }

    #[tokio::test]
    async fn bad_payloads_say_what_is_expected() {
        for payload in [
            json!(null),
            json!({"argv": []}),
            json!({"argv": "ls"}),
            json!({"argv": ["ls"], "x": 1}),
            json!({"cmd": "ls -l"}),
            json!({"argv": ["ls"], "env": {"CHIME_JOB_ID": "x"}}),
        ] {
            let error = ShellHandler::enabled()
                .run(ctx(payload.clone()))
                .await
                .unwrap_err();
            assert!(
                error.message.starts_with("bad shell payload"),
                "{payload}: {}",
                error.message
            );
        }
        let error = ShellHandler::enabled()
            .run(ctx(json!({"argv": ["/no/such/program"]})))
            .await
            .unwrap_err();
        assert!(
            error
                .message
                .starts_with("cannot start \"/no/such/program\""),
            "{}",
            error.message
        );
    }

    #[tokio::test]
    async fn cancel_kills_the_whole_group_promptly() {
        let context = ctx(json!({"argv": ["sh", "-c", "sleep 30 & sleep 30"]}));
        let token = context.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            token.cancel();
        });
        let started = std::time::Instant::now();
        let error = ShellHandler::enabled().run(context).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert!(error.message.contains("SIGKILL"), "{}", error.message);
    }
}
