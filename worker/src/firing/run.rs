//! Running one accepted firing: its handler in its own task, under its
//! deadline and cancel token, with panics caught and output bounded.

use crate::firing::context::FiringContext;
use crate::handler::{Handler, HandlerResult};
use crate::running::RunControl;
use chime_common::duration::format_time;
use chime_common::protocol::{Interruption, Outcome};
use chime_common::text;
use chime_runtime::supervisor::panic_message;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinError;
use tracing::Instrument;

/// How a run ended, ready for a finished event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunReport {
    pub outcome: Outcome,
    pub error: Option<String>,
    pub output: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// Monotonic run time.
    pub duration: Duration,
    /// Set when the worker stopped the run for a fault not the job's.
    pub interrupted: Option<Interruption>,
}

/// Why a run was stopped from outside.
enum Stop {
    Deadline,
    Cancelled,
}

/// Runs `ctx` with `handler` (`None`: no handler of that name here) until it
/// returns, its deadline passes, or `control` is cancelled. After a stop the
/// handler's token is cancelled and it gets `stop_grace` to return (its output
/// is kept if it does) before its future is dropped.
pub(crate) async fn run(
    handler: Option<Arc<dyn Handler>>,
    ctx: FiringContext,
    control: &RunControl,
    stop_grace: Duration,
) -> RunReport {
    let started_at = Utc::now();
    let started = Instant::now();
    let max_output = ctx.max_output_bytes;
    let deadline = ctx.deadline;
    let finish = |outcome: Outcome, error: Option<String>, output: Option<String>| RunReport {
        outcome,
        error: error.map(|e| text::head(&e, text::MAX_ERROR_BYTES).into_owned()),
        output: output
            .map(|o| text::tail(&o, max_output).into_owned())
            .filter(|o| !o.is_empty()),
        started_at,
        finished_at: Utc::now(),
        duration: started.elapsed(),
        interrupted: None,
    };
    let stopped = |stop: &crate::running::StopReason, output: Option<String>| RunReport {
        interrupted: stop.interrupted,
        ..finish(stop.outcome, Some(stop.reason.clone()), output)
    };

    let Some(handler) = handler else {
        return finish(
            Outcome::Failed,
            Some(format!(
                "no handler named {} on this worker",
                ctx.firing.handler
            )),
            None,
        );
    };
    let remaining = (deadline - started_at).to_std().unwrap_or(Duration::ZERO);
    if remaining.is_zero() {
        return finish(
            Outcome::TimedOut,
            Some(format!(
                "the deadline {} passed before the run started",
                format_time(deadline)
            )),
            None,
        );
    }
    if let Some(stop) = control.stopped() {
        return stopped(stop, None);
    }

    // The handler's token follows cancel requests and shutdown (the parent)
    // and is also cancelled at the deadline.
    let handler_token = control.token().child_token();
    let ctx = FiringContext {
        cancel: handler_token.clone(),
        ..ctx
    };
    let mut task =
        tokio::spawn(async move { handler.run(ctx).await }.instrument(tracing::Span::current()));
    let deadline_at = tokio::time::Instant::now() + remaining;

    let stop = tokio::select! {
        // A cancel comes first: the handler's token is a child of the
        // control's, so a handler that returns as soon as it notices the
        // cancel is often ready in the same poll, and must not read as failed.
        biased;
        _ = control.token().cancelled() => Stop::Cancelled,
        joined = &mut task => {
            return match joined {
                Ok(Ok(output)) => finish(Outcome::Succeeded, None, output),
                // A handler that enforces the deadline itself (a request timeout) failed because of it.
                Ok(Err(error)) if Utc::now() >= deadline => finish(
                    Outcome::TimedOut,
                    Some(format!("timed out: the deadline {} passed ({})", format_time(deadline), error.message)),
                    error.output,
                ),
                Ok(Err(error)) => finish(Outcome::Failed, Some(error.message), error.output),
                Err(join_error) => finish(Outcome::Failed, Some(join_failure(join_error)), None),
            };
        }
        _ = tokio::time::sleep_until(deadline_at) => Stop::Deadline,
    };

    handler_token.cancel();
    let output = match tokio::time::timeout(stop_grace, &mut task).await {
        Ok(Ok(result)) => output_of(result),
        Ok(Err(_)) => None,
        Err(_) => {
            task.abort();
            let _ = task.await;
            None
        }
    };
    match stop {
        Stop::Deadline => finish(
            Outcome::TimedOut,
            Some(format!(
                "timed out: the deadline {} passed after {:.3}s",
                format_time(deadline),
                started.elapsed().as_secs_f64()
            )),
            output,
        ),
        Stop::Cancelled => match control.stopped() {
            Some(stop) => stopped(stop, output),
            None => finish(Outcome::Cancelled, Some("cancelled".into()), output),
        },
    }
}

fn output_of(result: HandlerResult) -> Option<String> {
    match result {
        Ok(output) => output,
        Err(error) => error.output,
    }
}

fn join_failure(error: JoinError) -> String {
    if error.is_panic() {
        format!("handler panicked: {}", panic_message(error.into_panic()))
    } else {
        "the handler's task was aborted".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firing::message::FiringDetails;
    use crate::handler::{FnHandler, HandlerError};
    use chime_common::FiringId;
    use tokio_util::sync::CancellationToken;

    fn ctx(deadline_in: Duration) -> FiringContext {
        let now = Utc::now();
        FiringContext {
            firing: FiringDetails {
                firing_id: FiringId::new("job", 1, 1),
                job_id: "job".into(),
                handler: "h".into(),
                scheduled_at: now,
                due_at: now,
                attempt: 1,
                priority: 5,
                payload: serde_json::Value::Null,
                shard: None,
                traceparent: None,
            },
            deadline: now + chrono::Duration::from_std(deadline_in).unwrap(),
            cancel: CancellationToken::new(),
            max_output_bytes: 8,
            worker_id: "w".into(),
            traceparent: chime_common::traceparent::TraceParent::fresh(),
        }
    }

    fn handler<F, Fut>(f: F) -> Option<Arc<dyn Handler>>
    where
        F: Fn(FiringContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = HandlerResult> + Send + 'static,
    {
        Some(Arc::new(FnHandler(f)))
    }

    const GRACE: Duration = Duration::from_millis(200);

    #[tokio::test]
    async fn success_keeps_the_output_tail() {
        let h = handler(|_| async { Ok(Some("0123456789".to_string())) });
        let report = run(
            h,
            ctx(Duration::from_secs(5)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(report.outcome, Outcome::Succeeded);
        assert_eq!(report.output.as_deref(), Some("23456789"));
        assert_eq!(report.error, None);
    }

    #[tokio::test]
    async fn failures_and_panics_are_failed() {
        let h = handler(|_| async { Err(HandlerError::new("bad").with_output("out")) });
        let report = run(
            h,
            ctx(Duration::from_secs(5)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(
            (report.outcome, report.error.as_deref()),
            (Outcome::Failed, Some("bad"))
        );
        assert_eq!(report.output.as_deref(), Some("out"));

        let h = handler(|_| async { panic!("kaboom") });
        let report = run(
            h,
            ctx(Duration::from_secs(5)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(report.outcome, Outcome::Failed);
        assert_eq!(report.error.as_deref(), Some("handler panicked: kaboom"));

        let report = run(
            None,
            ctx(Duration::from_secs(5)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(
            report.error.as_deref(),
            Some("no handler named h on this worker")
        );
    }

    #[tokio::test]
    async fn the_deadline_cuts_a_run_off() {
        let h = handler(|_| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(None)
        });
        let report = run(
            h,
            ctx(Duration::from_millis(100)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(report.outcome, Outcome::TimedOut);
        assert!(
            report.duration < Duration::from_secs(2),
            "{:?}",
            report.duration
        );

        // A handler that watches its token returns its output in the grace.
        let h = handler(|ctx| async move {
            ctx.cancel.cancelled().await;
            Err(HandlerError::new("stopped").with_output("partial"))
        });
        let report = run(
            h,
            ctx(Duration::from_millis(100)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(report.outcome, Outcome::TimedOut);
        assert_eq!(report.output.as_deref(), Some("partial"));

        let report = run(
            handler(|_| async { Ok(None) }),
            ctx(Duration::ZERO),
            &RunControl::default(),
            GRACE,
        )
        .await;
        assert_eq!(report.outcome, Outcome::TimedOut);

        // A handler failing at its own deadline timed out.
        let h = handler(|ctx| async move {
            let left = (ctx.deadline - Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(left).await;
            Err(HandlerError::new("request timed out"))
        });
        let report = run(
            h,
            ctx(Duration::from_millis(100)),
            &RunControl::default(),
            Duration::from_secs(5),
        )
        .await;
        // Whichever notices the deadline first, the outcome is the same.
        assert_eq!(report.outcome, Outcome::TimedOut);
        assert!(report.error.unwrap().starts_with("timed out"));
    }

    #[tokio::test]
    async fn a_cancel_reports_its_reason() {
        let h = handler(|_| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(None)
        });
        let control = RunControl::default();
        let canceller = control.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            canceller.cancel("replaced");
        });
        let report = run(h, ctx(Duration::from_secs(30)), &control, GRACE).await;
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert_eq!(report.error.as_deref(), Some("replaced"));
    }

    #[tokio::test]
    async fn a_fence_fails_the_run_with_its_reason() {
        let h = handler(|ctx| async move {
            ctx.cancel.cancelled().await;
            Ok(None)
        });
        let control = RunControl::default();
        let fencer = control.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            fencer.interrupt(Interruption::Fenced, "fenced: no heartbeat for 4.0s");
        });
        let report = run(h, ctx(Duration::from_secs(30)), &control, GRACE).await;
        assert_eq!(report.outcome, Outcome::Failed);
        assert_eq!(
            report.error.as_deref(),
            Some("fenced: no heartbeat for 4.0s")
        );
        assert_eq!(report.interrupted, Some(Interruption::Fenced));
    }

    #[tokio::test]
    async fn printed_nul_bytes_and_long_errors_are_cleaned_and_capped() {
        let h = handler(|_| async { Ok(Some("a\0b".to_string())) });
        let mut context = ctx(Duration::from_secs(5));
        context.max_output_bytes = 64;
        let report = run(h, context, &RunControl::default(), GRACE).await;
        assert_eq!(report.output.as_deref(), Some("a\u{FFFD}b"));

        let h = handler(|_| async {
            Err(HandlerError::new(format!(
                "bad\0{}",
                "é".repeat(text::MAX_ERROR_BYTES)
            )))
        });
        let report = run(
            h,
            ctx(Duration::from_secs(5)),
            &RunControl::default(),
            GRACE,
        )
        .await;
        let error = report.error.unwrap();
        assert!(error.starts_with("bad\u{FFFD}é"), "{}", &error[..10]);
        assert!(error.len() <= text::MAX_ERROR_BYTES);
    }
}
