//! Alert webhooks (`--alert-webhook`): every alert published on
//! `chime.alerts` is POSTed, as its JSON object, to each configured URL,
//! tried again with backoff within fixed bounds and dead-lettered after the
//! last try, so alerts reach people and not only a stream.
//!
//! Which replica sends: each URL has one durable consumer on
//! `CHIME_ALERTS`, shared by every replica configured with that URL.
//! JetStream hands each alert to one replica at a time, so each alert is
//! POSTed once per URL, whichever replica raised it and however many
//! replicas run; it outlives a replica's restart, and an alert a replica
//! was trying when it died goes to another (then possibly twice: the
//! receiver can drop a repeat by `X-Chime-Alert-Id`). Nothing on a
//! firing's path waits for a webhook: raising an alert is the publish it
//! always was, and the deliveries run in a service of their own.
//!
//! `target.rs` checks a URL and says how it may be shown, `signature.rs`
//! signs bodies, `delivery.rs` tries one alert, `service.rs` pulls,
//! delivers and settles.

pub mod delivery;
pub mod service;
pub mod signature;
pub mod target;

pub use delivery::{Delivery, DeliveryConfig, ALERT_ID_HEADER};
pub use service::{AlertWebhooks, AlertWebhooksConfig, WebhookReport, WebhookResult};
pub use signature::{read_secret_file, sign, SIGNATURE_HEADER};
pub use target::WebhookTarget;
