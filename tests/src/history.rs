//! What the API says happened: a job's firings, read the way a user would.

use chime_common::client::{Client, ListFiringsRequest};
use chime_common::Firing;

/// Every firing of `job_id` (up to a thousand), newest first.
pub async fn firings_of(client: &Client, job_id: &str) -> Vec<Firing> {
    client
        .list_firings(&ListFiringsRequest {
            job_id: Some(job_id.into()),
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .expect("firings.list")
        .firings
}
