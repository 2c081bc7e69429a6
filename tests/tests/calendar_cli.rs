//! `chimectl calendar` against a real scheduler: put from dates and
//! weekdays, import of an iCalendar file's all-day events, list, get,
//! delete; bad input refused with status 2 and nothing changed.

use chime_scheduler::{Replica, SchedulerConfig};
use chime_tests::{init_tracing, NatsServer, SqliteDatabase};
use serde_json::json;

use chime_tests::chimectl_json as chimectl;

const HOLIDAYS_ICS: &str = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Chime test//EN\r\n\
BEGIN:VEVENT\r\nUID:xmas@test\r\nSUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\n\
DTEND;VALUE=DATE:20261227\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:ny@test\r\nSUMMARY:New Year\r\nDTSTART;VALUE=DATE:20270101\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:meeting@test\r\nSUMMARY:Planning\r\nDTSTART:20261201T090000Z\r\n\
DTEND:20261201T100000Z\r\nEND:VEVENT\r\n\
BEGIN:VEVENT\r\nUID:founders@test\r\nSUMMARY:Founders day\r\nDTSTART;VALUE=DATE:20260301\r\n\
RRULE:FREQ=YEARLY\r\nEND:VEVENT\r\n\
END:VCALENDAR\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendars_are_put_imported_listed_and_deleted_with_chimectl() {
    init_tracing();
    let nats = NatsServer::start().await;
    let db = SqliteDatabase::create();
    let replica = Replica::start(SchedulerConfig::new(nats.url(), db.url()))
        .await
        .expect("replica starts");
    let url = nats.url();
    let dir = tempfile::tempdir().expect("temporary directory");

    let (code, reply, stderr) = chimectl(
        &url,
        &[
            "calendar",
            "put",
            "weekends",
            "--dates",
            "2026-12-31,2026-12-24",
            "--weekdays",
            "SAT,SUN",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        reply["calendar"],
        json!({"id": "weekends", "dates": ["2026-12-24", "2026-12-31"], "weekdays": ["SAT", "SUN"]})
    );

    let ics = dir.path().join("holidays.ics");
    std::fs::write(&ics, HOLIDAYS_ICS).unwrap();
    let ics = ics.to_str().unwrap();
    let (code, reply, stderr) = chimectl(&url, &["calendar", "import", "holidays", ics]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        reply["calendar"]["dates"],
        json!(["2026-03-01", "2026-12-25", "2026-12-26", "2027-01-01"]),
        "all-day events, DTEND exclusive"
    );
    assert!(
        stderr.contains("Founders day") && stderr.contains("RRULE"),
        "{stderr}"
    );
    assert!(stderr.contains("1 timed event"), "{stderr}");

    // A job can exclude the imported calendar.
    let client = chime_common::client::Client::new(nats.connect().await);
    client
        .put_job(
            &json!({"id": "nightly", "schedule": {"cron": "0 2 * * *"}, "handler": "shell",
                         "payload": {"argv": ["/bin/true"]}, "exclude": ["holidays"]}),
        )
        .await
        .expect("a job excluding the imported calendar");

    let (code, reply, stderr) = chimectl(&url, &["calendar", "list"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let ids: Vec<&str> = reply["calendars"]
        .as_array()
        .expect("calendars")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["holidays", "weekends"]);
    let (code, reply, _) = chimectl(&url, &["calendar", "get", "weekends"]).await;
    assert_eq!(
        (code, reply["calendar"]["id"].as_str()),
        (Some(0), Some("weekends"))
    );

    // Bad input: status 2, a message naming the problem, nothing stored.
    let timed_only = dir.path().join("meetings.ics");
    std::fs::write(
        &timed_only,
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n\
         DTSTART:20261201T090000Z\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    .unwrap();
    let (code, _, stderr) = chimectl(
        &url,
        &[
            "calendar",
            "import",
            "meetings",
            timed_only.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no all-day events"), "{stderr}");
    let (code, _, stderr) =
        chimectl(&url, &["calendar", "put", "bad", "--dates", "2026-02-30"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("dates[0]"), "{stderr}");
    let (code, _, _) = chimectl(&url, &["calendar", "get", "meetings"]).await;
    assert_eq!(code, Some(1), "nothing was stored");

    // Deleting: refused while a job excludes it, then allowed.
    let (code, _, stderr) = chimectl(&url, &["calendar", "delete", "holidays"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("nightly"), "{stderr}");
    client.delete_job("nightly").await.expect("delete job");
    let (code, reply, stderr) = chimectl(&url, &["calendar", "delete", "holidays"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(reply["calendar"]["id"], "holidays");
    let (code, reply, _) = chimectl(&url, &["calendar", "list"]).await;
    assert_eq!(code, Some(0));
    assert_eq!(reply["calendars"].as_array().map(Vec::len), Some(1));

    replica.shutdown().await;
}
