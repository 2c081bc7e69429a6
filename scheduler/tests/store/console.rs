//! The console's tables: login sessions and the audit trail.

use super::fixture::TestDb;
use chime_scheduler::store::{AuditFilter, AuditRecord};
use chrono::{Duration, TimeZone, Utc};

pub async fn sessions_expire_and_end(db: &TestDb) {
    let store = db.store().await;
    let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
    store
        .create_session("k1", "alice", "csrf1", now, now + Duration::hours(1))
        .await
        .unwrap();
    store
        .create_session("k2", "bob", "csrf2", now, now + Duration::minutes(1))
        .await
        .unwrap();
    let alice = store
        .session("k1", now)
        .await
        .unwrap()
        .expect("alice's session");
    assert_eq!(
        (alice.user.as_str(), alice.csrf.as_str()),
        ("alice", "csrf1")
    );
    assert!(store.session("unknown", now).await.unwrap().is_none());
    let later = now + Duration::minutes(2);
    assert!(
        store.session("k2", later).await.unwrap().is_none(),
        "expired"
    );
    assert!(store.session("k1", later).await.unwrap().is_some());
    assert_eq!(store.prune_sessions(later).await.unwrap(), 1);
    store.delete_session("k1").await.unwrap();
    assert!(
        store.session("k1", later).await.unwrap().is_none(),
        "logged out"
    );
    store.delete_session("k1").await.unwrap();
}

pub async fn audit_pages_newest_first(db: &TestDb) {
    let store = db.store().await;
    let now = Utc.with_ymd_and_hms(2026, 11, 24, 12, 0, 0).unwrap();
    for n in 0..5i64 {
        let target = if n % 2 == 0 { "even" } else { "odd" };
        let record = AuditRecord {
            actor: "alice",
            via: "http",
            verb: "jobs.put",
            target,
            before_version: (n > 1).then_some(n - 1),
            after_version: Some(n),
            outcome: "ok",
            message: None,
        };
        store
            .record_audit(&record, now + Duration::seconds(n))
            .await
            .unwrap();
    }
    let first = store
        .list_audit(&AuditFilter {
            limit: 2,
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    let versions: Vec<_> = first.items.iter().map(|e| e.after_version).collect();
    assert_eq!(versions, [Some(4), Some(3)]);
    assert_eq!(first.items[0].before_version, Some(3));
    let rest = store
        .list_audit(&AuditFilter {
            limit: 10,
            after: first.next.clone(),
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    let versions: Vec<_> = rest.items.iter().map(|e| e.after_version).collect();
    assert_eq!(versions, [Some(2), Some(1), Some(0)]);
    assert_eq!(rest.next, None);
    let odd = store
        .list_audit(&AuditFilter {
            target: Some("odd".into()),
            limit: 10,
            ..AuditFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(odd.items.len(), 2);
    assert!(odd.items.iter().all(|e| e.target == "odd"));
    assert_eq!(
        store
            .prune_audit(now + Duration::milliseconds(2500))
            .await
            .unwrap(),
        3
    );
}
