//! Who is calling: HTTP Basic against `--http-users`, the console's session
//! cookie, or nobody in particular with `--http-open`; and the checks that
//! keep another site from acting with a user's browser (CSRF).

use super::identity::{constant_time_eq, cookie, Identity, Refusal, SessionToken};
use super::users::{Role, Users};
use super::Web;
use crate::store::StoreError;
use axum::http::{header, HeaderMap, Method};
use base64::Engine as _;
use chrono::Utc;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The console's session cookie.
pub const SESSION_COOKIE: &str = "chime_session";
/// The header a session's mutating requests carry its CSRF token in.
pub const CSRF_HEADER: &str = "x-chime-csrf";

/// Recently verified Basic credentials, so an API client sending them with
/// every request does not pay an argon2 verification each time. Keyed by a
/// SHA-256 of name and password; entries live a minute.
#[derive(Debug, Default)]
pub struct VerifiedCache {
    entries: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

const VERIFIED_FOR: Duration = Duration::from_secs(60);
const VERIFIED_MAX: usize = 1024;

impl VerifiedCache {
    fn key(name: &str, password: &str) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(password.as_bytes());
        hasher.finalize().into()
    }

    fn get(&self, key: &[u8; 32]) -> Option<String> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(_, at)| at.elapsed() < VERIFIED_FOR)
            .map(|(name, _)| name.clone())
    }

    fn insert(&self, key: [u8; 32], name: String) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, (_, at)| at.elapsed() < VERIFIED_FOR);
        if entries.len() < VERIFIED_MAX {
            entries.insert(key, (name, Instant::now()));
        }
    }
}

/// SHA-256, hex: how session tokens are kept in the store.
pub fn token_key(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token (256 bits, URL-safe base64).
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Checks a name and password against the users file off the async
/// threads, at most a few at once: argon2 is slow and memory-hungry on
/// purpose, and a flood of logins must not starve the scheduler.
pub async fn verify_password(
    web: &Web,
    headers: &HeaderMap,
    name: &str,
    password: &str,
) -> Result<Role, Refusal> {
    let key = VerifiedCache::key(name, password);
    if let Some(known) = web.verified.get(&key) {
        if let Some(user) = web.users().get(&known) {
            return Ok(user.role);
        }
    }
    let source = peer(headers);
    if let Err(wait) = web.throttle.check(source, name) {
        tracing::warn!(user = name, source = ?source, "refused a login: too many wrong passwords");
        return Err(Refusal::Throttled(
            format!(
                "too many wrong passwords from this address or for this user; try again in {}s",
                wait.as_secs().max(1)
            ),
            wait,
        ));
    }
    let _permit = web
        .verifications
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| Refusal::Unavailable("shutting down".into()))?;
    let users: Arc<Users> = web.users.clone();
    let (name_owned, password_owned) = (name.to_string(), password.to_string());
    let role = tokio::task::spawn_blocking(move || {
        users
            .verify(&name_owned, &password_owned)
            .map(|user| user.role)
    })
    .await
    .map_err(|e| Refusal::Unavailable(format!("password check failed: {e}")))?;
    match role {
        Some(role) => {
            web.throttle.succeeded(name);
            web.verified.insert(key, name.to_string());
            Ok(role)
        }
        None => {
            web.throttle.failed(source, name);
            record_failed_login(web, name, source).await;
            Err(Refusal::Unauthenticated(
                "wrong user name or password".into(),
            ))
        }
    }
}

/// The client's address, as the HTTP server recorded it.
fn peer(headers: &HeaderMap) -> Option<std::net::IpAddr> {
    headers
        .get(super::throttle::PEER_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Logs and audits a wrong password (bounded by the throttle: a source
/// that keeps failing is refused before it gets here).
async fn record_failed_login(web: &Web, name: &str, source: Option<std::net::IpAddr>) {
    let shown: String = name.chars().take(64).collect();
    let from = source.map_or_else(|| "unknown".to_string(), |s| s.to_string());
    tracing::warn!(user = %shown, source = %from, "a login failed: wrong user name or password");
    let message = format!("wrong user name or password from {from}");
    let record = crate::store::AuditRecord {
        actor: &shown,
        via: "http",
        verb: "session.login",
        target: "",
        before_version: None,
        after_version: None,
        outcome: "unauthenticated",
        message: Some(&message),
    };
    crate::intake::api::record_audit(&web.api.store, &web.api.metrics, &record, Utc::now()).await;
}

/// Who sent `headers`: an error when nobody acceptable did.
pub async fn identify(web: &Web, headers: &HeaderMap) -> Result<Identity, Refusal> {
    if web.config.open {
        return super::open::identify(web, headers);
    }
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let (name, password) = basic_credentials(value.as_bytes()).ok_or_else(|| {
            Refusal::Unauthenticated("the Authorization header is not HTTP Basic".into())
        })?;
        let role = verify_password(web, headers, &name, &password).await?;
        return Ok(Identity {
            name,
            role,
            session: None,
        });
    }
    if let Some(token) = cookie(headers, SESSION_COOKIE) {
        let key = token_key(&token);
        let session = web
            .api
            .store
            .session(&key, Utc::now())
            .await
            .map_err(|e: StoreError| Refusal::Unavailable(format!("cannot read sessions: {e}")))?
            .ok_or_else(|| {
                Refusal::Unauthenticated("the session has ended; log in again".into())
            })?;
        // The role comes from the users file now, not from login time: a
        // user removed or demoted there loses it at once.
        let user = web.users().get(&session.user).ok_or_else(|| {
            Refusal::Unauthenticated(format!("user {:?} no longer exists", session.user))
        })?;
        return Ok(Identity {
            name: user.name.clone(),
            role: user.role,
            session: Some(SessionToken {
                key,
                csrf: session.csrf,
            }),
        });
    }
    Err(Refusal::Unauthenticated(
        "log in, or send HTTP Basic credentials".into(),
    ))
}

/// Refuses a state-changing request a browser may have sent on another
/// site's behalf: its `Origin`, when sent, must be this server, and a
/// session's request must carry the session's CSRF token.
pub fn check_forgery(
    method: &Method,
    headers: &HeaderMap,
    identity: &Identity,
) -> Result<(), Refusal> {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let origin = origin.to_str().unwrap_or("");
        let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
        if origin_host != host {
            return Err(Refusal::Forbidden(format!(
                "cross-origin request from {origin:?} refused"
            )));
        }
    }
    if let Some(session) = &identity.session {
        let sent = headers
            .get(CSRF_HEADER)
            .map(|v| v.as_bytes())
            .unwrap_or(b"");
        if !constant_time_eq(sent, session.csrf.as_bytes()) {
            return Err(Refusal::Forbidden(
                "missing or wrong X-Chime-CSRF header (reload the console)".into(),
            ));
        }
    }
    Ok(())
}

/// `Basic base64(name:password)`.
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (name, password) = text.split_once(':')?;
    Some((name.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn basic_credentials_are_read_strictly() {
        let encoded = base64::engine::general_purpose::STANDARD.encode("alice:pa:ss");
        assert_eq!(
            basic_credentials(format!("Basic {encoded}").as_bytes()),
            Some(("alice".into(), "pa:ss".into()))
        );
        assert_eq!(basic_credentials(b"Bearer abc"), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        let no_colon = base64::engine::general_purpose::STANDARD.encode("alice");
        assert_eq!(
            basic_credentials(format!("Basic {no_colon}").as_bytes()),
            None
        );
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; chime_session=tok; b=2"),
        );
        assert_eq!(cookie(&headers, SESSION_COOKIE).as_deref(), Some("tok"));
        assert_eq!(cookie(&headers, "c"), None);
    }

    #[test]
    fn forged_browser_requests_are_refused() {
        let identity = Identity {
            name: "alice".into(),
            role: Role::Admin,
            session: Some(SessionToken {
                key: "k".into(),
                csrf: "right".into(),
            }),
        };
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("chime:8080"));
        assert!(check_forgery(&Method::GET, &headers, &identity).is_ok());
        assert!(check_forgery(&Method::POST, &headers, &identity).is_err());
        headers.insert(CSRF_HEADER, HeaderValue::from_static("wrong"));
        assert!(check_forgery(&Method::POST, &headers, &identity).is_err());
        headers.insert(CSRF_HEADER, HeaderValue::from_static("right"));
        assert!(check_forgery(&Method::POST, &headers, &identity).is_ok());
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(check_forgery(&Method::DELETE, &headers, &identity).is_err());
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://chime:8080"),
        );
        assert!(check_forgery(&Method::DELETE, &headers, &identity).is_ok());
        let basic = Identity {
            session: None,
            ..identity
        };
        headers.remove(CSRF_HEADER);
        assert!(check_forgery(&Method::PUT, &headers, &basic).is_ok());
    }
}
