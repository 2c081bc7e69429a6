//! A stand-in for the scheduler's start service, for worker tests that need
//! no store: it accepts the first start of each firing id, accepts a
//! repeated start from the same worker (idempotent, like the real
//! scheduler) and refuses a start by any other worker (`already_started`),
//! unless told to refuse or fail everything.

use async_nats::Client;
use chime_common::protocol::{StartRefusal, StartReply, StartRequest};
use chime_common::{FiringId, Subjects};
use chime_runtime::connection::confirm_subscriptions;
use chrono::Utc;
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// What the stand-in does with a start request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponderMode {
    /// Like the scheduler: the first worker to ask gets the firing.
    Accept,
    /// Refuses everything with this reason.
    Refuse(StartRefusal),
    /// Answers every request with an API error of this code.
    Error(&'static str),
}

/// The stand-in for the scheduler's start service.
pub struct Responder {
    /// Firing id → the worker whose start was accepted.
    pub owners: Arc<Mutex<HashMap<FiringId, String>>>,
    /// Every start request, in order.
    pub requests: Arc<Mutex<Vec<StartRequest>>>,
    /// Deadline given per firing: `now + this` (default 30 s).
    pub run_for: Arc<Mutex<Duration>>,
    task: JoinHandle<()>,
}

impl Responder {
    pub async fn start(client: Client, subjects: &Subjects, mode: ResponderMode) -> Responder {
        let mut requests_sub = client
            .subscribe(subjects.worker_start_wildcard())
            .await
            .expect("subscribe");
        confirm_subscriptions(&async_nats::jetstream::new(client.clone()))
            .await
            .expect("subscriptions confirmed");
        let owners: Arc<Mutex<HashMap<FiringId, String>>> = Arc::default();
        let requests: Arc<Mutex<Vec<StartRequest>>> = Arc::default();
        let run_for = Arc::new(Mutex::new(Duration::from_secs(30)));
        let (o, r, d) = (owners.clone(), requests.clone(), run_for.clone());
        let task = tokio::spawn(async move {
            while let Some(message) = requests_sub.next().await {
                let Some(reply_to) = message.reply.clone() else {
                    continue;
                };
                let request: StartRequest =
                    serde_json::from_slice(&message.payload).expect("a StartRequest");
                r.lock().unwrap().push(request.clone());
                let reply = match mode {
                    ResponderMode::Error(code) => {
                        let error = serde_json::json!({"error": {"code": code, "message": "cannot decide"}});
                        let _ = client
                            .publish(reply_to, serde_json::to_vec(&error).unwrap().into())
                            .await;
                        continue;
                    }
                    ResponderMode::Refuse(why) => StartReply::refused(why),
                    ResponderMode::Accept => {
                        let mut owners = o.lock().unwrap();
                        let owner = owners
                            .entry(request.firing_id.clone())
                            .or_insert_with(|| request.worker_id.clone());
                        if *owner == request.worker_id {
                            let run_for = *d.lock().unwrap();
                            StartReply::accepted(
                                Utc::now() + chrono::Duration::from_std(run_for).unwrap(),
                            )
                        } else {
                            StartReply::refused(StartRefusal::AlreadyStarted)
                        }
                    }
                };
                let _ = client
                    .publish(reply_to, serde_json::to_vec(&reply).unwrap().into())
                    .await;
            }
        });
        Responder {
            owners,
            requests,
            run_for,
            task,
        }
    }

    /// Gives every run accepted from now on `run_for` until its deadline.
    pub fn set_run_for(&self, run_for: Duration) {
        *self.run_for.lock().unwrap() = run_for;
    }

    pub fn request_count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
