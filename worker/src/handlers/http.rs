//! `http`: one HTTP request per firing.
//!
//! Payload `{"url": "https://…", "method"?: "GET", "headers"?: {"Name": "value"},
//! "body"?: "text" | JSON}`, read by [`HttpPayload`], the definition job
//! validation checks puts with. A JSON body that is not a string is sent as JSON
//! (`Content-Type: application/json` unless set). The request also carries
//! `Chime-Firing-Id`, `Chime-Job-Id`, `Chime-Scheduled-At` and `Chime-Attempt`,
//! `traceparent` (the run's W3C trace context: the called service's spans
//! join the firing's trace), and for a shard of a sharded job `Chime-Shard`
//! and `Chime-Shards`. These replace the payload's headers of the same name.
//! A 2xx status is success; the response body's tail is the output (at most
//! 16 MiB of it is read). The firing's deadline is the request's timeout.
//!
//! Unless the worker runs with `--http-allow-private`, loopback, private,
//! link-local and unspecified destinations are refused: literal addresses
//! in the URL, every address a name resolves to, and on every redirect. A
//! redirect to another host is not followed (the job's headers go only
//! where the job said).

use crate::firing::context::FiringContext;
use crate::handler::{Handler, HandlerError, HandlerResult};
use crate::output::TailBuffer;
use async_trait::async_trait;
use chime_common::duration::format_time;
use chime_common::payloads::http::{HttpPayload, USAGE};
use chrono::Utc;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Method, Url};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use url::Host;

/// The most response bytes read per firing; the rest is not read (the
/// output keeps only its own tail anyway).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The most redirects followed per request.
const MAX_REDIRECTS: usize = 10;

/// Sends the firing's request with a shared connection pool.
#[derive(Debug, Clone)]
pub struct HttpHandler {
    client: reqwest::Client,
    /// Whether loopback, private, link-local and unspecified addresses may be reached.
    allow_private: bool,
}

/// Whether `ip` is one a job must not reach without `--http-allow-private`:
/// anything that is not a global unicast address. This host, the private
/// networks, link-local (cloud metadata at 169.254.169.254), unspecified,
/// shared (CGNAT), multicast, broadcast, the reserved 240.0.0.0/4, IETF
/// protocol assignments (192.0.0.0/24), benchmarking (198.18.0.0/15) and
/// documentation ranges; and IPv6 addresses that carry an IPv4 one
/// (mapped, compatible, NAT64 64:ff9b::/96, 6to4 2002::/16) when the one
/// they carry is private, besides local-use NAT64 and Teredo, whose
/// gateways reach what the job could not.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            let [first, second, third, _] = a.octets();
            a.is_loopback()
                || a.is_private()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || first == 0
                || first >= 240
                || (first == 100 && (64..128).contains(&second))
                || (first == 192 && second == 0 && third == 0)
                || (first == 198 && (second & 0xfe) == 18)
        }
        IpAddr::V6(a) => {
            let segments = a.segments();
            let first = segments[0];
            let embedded = |high: u16, low: u16| {
                let [a, b] = high.to_be_bytes();
                let [c, d] = low.to_be_bytes();
                is_private(IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)))
            };
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first == 0x2001 && segments[1] == 0)
                || (first == 0x2001 && segments[1] == 0x0db8)
                || (first == 0x0064 && segments[1] == 0xff9b && segments[2] == 1)
                || (first == 0x0064
                    && segments[1] == 0xff9b
                    && segments[2..6] == [0, 0, 0, 0]
                    && embedded(segments[6], segments[7]))
                || (first == 0x2002 && embedded(segments[1], segments[2]))
                || a.to_ipv4().is_some_and(|v4| is_private(IpAddr::V4(v4)))
        }
    }
}

/// A URL as it may appear in an error, history, an alert or a log: scheme,
/// host, port and path; never the userinfo, query or fragment, where
/// credentials and tokens live.
fn shown(url: &Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shown
}

/// Resolves host names to their public addresses only: a name that
/// resolves only to private ones is refused, whatever the URL says.
struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = found.filter(|a| !is_private(a.ip())).collect();
            if public.is_empty() {
                return Err(refused(&host).into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

fn refused(host: &str) -> String {
    format!(
        "{host} is a loopback, private, link-local or unspecified address; \
         refused (start the worker with --http-allow-private to allow it)"
    )
}

/// The private address a URL names literally (no DNS involved), if any.
fn private_literal(url: &Url) -> Option<String> {
    let ip = match url.host()? {
        Host::Ipv4(ip) => IpAddr::V4(ip),
        Host::Ipv6(ip) => IpAddr::V6(ip),
        Host::Domain(_) => return None,
    };
    is_private(ip).then(|| ip.to_string())
}

/// A request ready to send.
#[derive(Debug)]
struct Prepared {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
}

impl HttpHandler {
    /// A handler with its own connection pool (rustls, webpki roots) that
    /// reaches public addresses only.
    pub fn new() -> Result<Self, reqwest::Error> {
        Self::build(false)
    }

    /// A handler that also reaches loopback, private and link-local
    /// addresses (`--http-allow-private`).
    pub fn allowing_private() -> Result<Self, reqwest::Error> {
        Self::build(true)
    }

    fn build(allow_private: bool) -> Result<Self, reqwest::Error> {
        // A redirect is followed only to the same scheme, host and port, so
        // the job's headers never go to a place the job did not name, nor
        // in clear after an https request; a redirect to a private address
        // is refused like the first request.
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let origin = |u: &Url| {
                (
                    u.scheme().to_string(),
                    u.host_str().map(str::to_string),
                    u.port_or_known_default(),
                )
            };
            let from = attempt.previous().first().map(origin);
            if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else if from != Some(origin(attempt.url())) {
                attempt.stop()
            } else if let Some(ip) = private_literal(attempt.url()).filter(|_| !allow_private) {
                attempt.error(refused(&ip))
            } else {
                attempt.follow()
            }
        });
        // No proxy from the environment: a proxy resolves the name itself,
        // past the resolver that keeps private addresses out.
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("chime-worker/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .redirect(redirects);
        if !allow_private {
            builder = builder.dns_resolver(Arc::new(PublicOnly));
        }
        Ok(HttpHandler {
            client: builder.build()?,
            allow_private,
        })
    }
}

fn bad(reason: impl std::fmt::Display) -> HandlerError {
    HandlerError::new(format!("bad http payload: {reason}; {USAGE}"))
}

/// The firing's payload as a request. The payload is checked as a put
/// checks it (a job stored before a rule existed fails here with the same
/// words); what it accepts, the conversions below accept too (tested).
fn prepare(ctx: &FiringContext) -> Result<Prepared, HandlerError> {
    let payload = HttpPayload::from_json(&ctx.firing.payload, "payload").map_err(|errors| {
        let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
        bad(problems.join("; "))
    })?;
    let method = Method::from_bytes(payload.method.as_bytes())
        .map_err(|_| bad(format!("method {:?} is invalid", payload.method)))?;
    let mut headers = HeaderMap::new();
    for (name, value) in &payload.headers {
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(format!("header name {name:?} is invalid")))?;
        let header_value = HeaderValue::from_str(value)
            .map_err(|_| bad(format!("the value of header {name} is invalid")))?;
        headers.insert(header_name, header_value);
    }
    let mut chime = vec![
        ("chime-firing-id", ctx.firing.firing_id.to_string()),
        ("chime-job-id", ctx.firing.job_id.clone()),
        ("chime-scheduled-at", format_time(ctx.firing.scheduled_at)),
        ("chime-attempt", ctx.firing.attempt.to_string()),
        ("traceparent", ctx.traceparent.to_string()),
    ];
    if let Some(shard) = ctx.firing.shard {
        chime.push(("chime-shard", shard.index.to_string()));
        chime.push(("chime-shards", shard.count.to_string()));
    }
    for (name, value) in chime {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let body = match payload.body {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => Some(text.into_bytes()),
        Some(json) => {
            headers
                .entry(CONTENT_TYPE)
                .or_insert(HeaderValue::from_static("application/json"));
            Some(serde_json::to_vec(&json).map_err(bad)?)
        }
    };
    Ok(Prepared {
        method,
        url: payload.url,
        headers,
        body,
    })
}

#[async_trait]
impl Handler for HttpHandler {
    async fn run(&self, ctx: FiringContext) -> HandlerResult {
        let request = prepare(&ctx)?;
        if let Some(ip) = private_literal(&request.url).filter(|_| !self.allow_private) {
            return Err(HandlerError::new(refused(&ip)));
        }
        // The worker cuts the run off at the deadline; the request's own
        // timeout is a backstop just after it.
        let timeout =
            (ctx.deadline - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(1);
        let shown_url = shown(&request.url);
        let mut builder = self
            .client
            .request(request.method.clone(), request.url)
            .headers(request.headers)
            .timeout(timeout);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        let exchange = async {
            let mut response = builder.send().await.map_err(|e| {
                HandlerError::new(format!(
                    "{} {shown_url} failed: {}",
                    request.method,
                    describe(&e.without_url())
                ))
            })?;
            let status = response.status();
            let mut body = TailBuffer::new(ctx.max_output_bytes);
            let mut read = 0usize;
            while read < MAX_RESPONSE_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => {
                        read = read.saturating_add(chunk.len());
                        body.push(&chunk);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        return Err(HandlerError::new(format!(
                            "reading the response of {} {shown_url} failed: {}",
                            request.method,
                            describe(&e.without_url())
                        ))
                        .with_output(body.to_text()))
                    }
                }
            }
            let text = body.to_text();
            if status.is_success() {
                Ok(Some(text))
            } else {
                Err(HandlerError::new(
                    format!(
                        "HTTP {} {}",
                        status.as_u16(),
                        status.canonical_reason().unwrap_or("")
                    )
                    .trim_end()
                    .to_string(),
                )
                .with_output(text))
            }
        };
        tokio::select! {
            result = exchange => result,
            _ = ctx.cancel.cancelled() => Err(HandlerError::new("stopped: the request was abandoned")),
        }
    }
}

/// A reqwest error with its causes ("error sending request: connection refused").
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "timed out at the firing's deadline".to_string();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firing::message::FiringDetails;
    use chime_common::FiringId;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    fn ctx(payload: serde_json::Value) -> FiringContext {
        let now = Utc::now();
        FiringContext {
            firing: FiringDetails {
                firing_id: FiringId::new("job-1", 1_700_000_000_000, 1),
                job_id: "job-1".into(),
                handler: "http".into(),
                scheduled_at: now,
                due_at: now,
                attempt: 1,
                priority: 5,
                payload,
                shard: None,
                traceparent: None,
            },
            deadline: now + chrono::Duration::seconds(30),
            cancel: CancellationToken::new(),
            max_output_bytes: 1024,
            worker_id: "w".into(),
            traceparent: chime_common::traceparent::TraceParent::fresh(),
        }
    }

    #[test]
    fn private_addresses_are_recognised() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2001::1",
            "2001:db8::1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "100.128.0.1",
            "198.20.0.1",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }

    /// A server on 127.0.0.1 that answers every request with `response`
    /// and counts requests.
    #[tokio::test]
    async fn a_redirect_to_another_port_or_scheme_is_not_followed() {
        let (target, reached) = server(OK.to_string()).await;
        let (origin, _) = server(format!(
            "HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:{target}/stolen\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await;
        let error = HttpHandler::allowing_private()
            .unwrap()
            .run(ctx(json!({"url": format!("http://127.0.0.1:{origin}/"),
                "headers": {"Authorization": "Bearer job-secret"}})))
            .await
            .unwrap_err();
        assert_eq!(error.message, "HTTP 302 Found");
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn errors_name_the_url_without_credentials_or_query() {
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let error = HttpHandler::allowing_private()
            .unwrap()
            .run(ctx(json!({"url": format!(
                "http://user:pa55word@127.0.0.1:{closed}/hook?token=s3cret#frag"
            )})))
            .await
            .unwrap_err();
        assert!(
            error
                .message
                .contains(&format!("http://127.0.0.1:{closed}/hook")),
            "{}",
            error.message
        );
        for secret in ["pa55word", "s3cret", "user:", "frag"] {
            assert!(
                !error.message.contains(secret),
                "{secret}: {}",
                error.message
            );
        }
    }

    async fn server(response: String) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = socket.read(&mut buf).await;
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        (port, count)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";

    /// W3C propagation over HTTP: the request carries the run's
    /// `traceparent`, in place of one the payload names.
    #[tokio::test]
    async fn the_request_carries_the_run_s_traceparent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let n = socket.read(&mut buf).await.unwrap();
            let _ = socket.write_all(OK.as_bytes()).await;
            let _ = tx.send(String::from_utf8_lossy(&buf[..n]).to_lowercase());
        });
        let stale = "00-11111111111111111111111111111111-2222222222222222-01";
        let ctx = ctx(json!({
            "url": format!("http://127.0.0.1:{port}/hook"),
            "headers": {"traceparent": stale},
        }));
        let expected = ctx.traceparent.to_string();
        HttpHandler::allowing_private()
            .unwrap()
            .run(ctx)
            .await
            .expect("a 200");
        let request = rx.await.expect("the request");
        assert!(
            request.contains(&format!("traceparent: {expected}\r\n")),
            "{request}"
        );
        assert!(!request.contains(stale), "{request}");
    }

    #[tokio::test]
    async fn private_destinations_are_refused_unless_allowed() {
        let (port, count) = server(OK.to_string()).await;
        let public_only = HttpHandler::new().unwrap();
        for url in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://localhost:{port}/"),
            "http://169.254.169.254/latest/meta-data/".to_string(),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
        ] {
            let error = public_only.run(ctx(json!({"url": url}))).await.unwrap_err();
            assert!(
                error.message.contains("--http-allow-private"),
                "{url}: {}",
                error.message
            );
        }
        assert_eq!(
            count.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing reached the server"
        );
        let allowed = HttpHandler::allowing_private().unwrap();
        let output = allowed
            .run(ctx(json!({"url": format!("http://127.0.0.1:{port}/")})))
            .await
            .unwrap();
        assert_eq!(output.as_deref(), Some("ok"));
    }

    #[tokio::test]
    async fn a_redirect_to_another_host_is_not_followed() {
        let (target, reached) = server(OK.to_string()).await;
        let (origin, _) = server(format!(
            "HTTP/1.1 302 Found\r\nlocation: http://localhost:{target}/stolen\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ))
        .await;
        let error = HttpHandler::allowing_private()
            .unwrap()
            .run(ctx(json!({"url": format!("http://127.0.0.1:{origin}/"),
                "headers": {"Authorization": "Bearer job-secret", "X-Api-Key": "k"}})))
            .await
            .unwrap_err();
        assert_eq!(error.message, "HTTP 302 Found");
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[test]
    fn payloads_become_requests() {
        let p = prepare(&ctx(
            json!({"url": "http://example.test/x", "method": "post", "body": {"a": 1}}),
        ))
        .unwrap();
        assert_eq!(p.method, Method::POST);
        assert_eq!(p.headers[CONTENT_TYPE], "application/json");
        assert_eq!(p.headers["chime-firing-id"], "job-1@1700000000000#1");
        assert!(!p.headers.contains_key("chime-shard"));
        assert_eq!(p.body.as_deref(), Some(&b"{\"a\":1}"[..]));
        let mut sharded = ctx(json!({"url": "http://example.test/x"}));
        sharded.firing.firing_id = FiringId::of_shard("job-1", 1_700_000_000_000, 2, 4, 1);
        sharded.firing.shard = Some(crate::firing::message::Shard { index: 2, count: 4 });
        let p = prepare(&sharded).unwrap();
        assert_eq!(p.headers["chime-firing-id"], "job-1@1700000000000.2#1");
        assert_eq!(p.headers["chime-shard"], "2");
        assert_eq!(p.headers["chime-shards"], "4");
        let p = prepare(&ctx(
            json!({"url": "https://example.test", "body": "raw", "headers": {"X-A": "b"}}),
        ))
        .unwrap();
        assert_eq!(p.method, Method::GET);
        assert_eq!(p.body.as_deref(), Some(&b"raw"[..]));
        assert_eq!(p.headers["x-a"], "b");
        assert!(!p.headers.contains_key(CONTENT_TYPE));
    }

    /// Every method, header name and header value the payload check lets
    /// through becomes a request part, and every one it refuses would not:
    /// each single byte, and a few longer strings, in each position.
    #[test]
    fn the_payload_check_accepts_exactly_what_requests_can_carry() {
        use chime_common::payloads::http::{is_header_name, is_header_value, is_method};
        let mut samples: Vec<String> = (0u8..=127).map(|b| format!("A{}", b as char)).collect();
        samples.extend(
            [
                "é", "ÜBER", "x y", "", "a\tb", "\u{7f}", "GET\r\n", "M-SEARCH",
            ]
            .map(String::from),
        );
        for text in &samples {
            let upper = text.to_ascii_uppercase();
            assert_eq!(
                is_method(text),
                Method::from_bytes(upper.as_bytes()).is_ok(),
                "method {text:?}"
            );
            assert_eq!(
                is_header_name(text),
                HeaderName::from_bytes(text.as_bytes()).is_ok(),
                "header name {text:?}"
            );
            assert_eq!(
                is_header_value(text),
                HeaderValue::from_str(text).is_ok(),
                "header value {text:?}"
            );
        }
    }

    #[test]
    fn bad_payloads_are_explained() {
        for payload in [
            json!({}),
            json!({"url": "not a url"}),
            json!({"url": "ftp://x"}),
            json!({"url": "http://x", "method": "GE T"}),
            json!({"url": "http://x", "headers": {"bad name": "v"}}),
            json!({"url": "http://x", "nope": 1}),
            json!({"url": "http://x", "headers": {"X-A": "a\r\nB: c"}}),
        ] {
            let error = prepare(&ctx(payload.clone())).unwrap_err();
            assert!(
                error.message.starts_with("bad http payload"),
                "{payload}: {}",
                error.message
            );
        }
    }
}
