//! `X-Chime-Signature`: how a receiver knows an alert came from Chime and
//! was not changed on the way. With `--alert-webhook-secret-file`, each
//! POST carries `sha256=<hex>`, the lower-case hex HMAC-SHA256 of the exact
//! body with the file's first line as the key (docs/OPERATIONS.md shows
//! how to check it).

use chime_runtime::secret::Secret;
use hmac::{Hmac, Mac};
use std::path::Path;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "X-Chime-Signature";

/// The flag every message names.
pub const SECRET_FLAG: &str = "--alert-webhook-secret-file";

/// `sha256=<hex HMAC-SHA256 of body under secret>`.
pub fn sign(secret: &Secret, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={:x}", mac.finalize().into_bytes())
}

/// The secret in `file`: its first line, which must not be empty (a
/// mounted secret usually ends with a newline, which is not part of it).
pub fn read_secret_file(file: &Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("{SECRET_FLAG}: cannot read {}: {e}", file.display()))?;
    let secret = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if secret.is_empty() {
        return Err(format!(
            "{SECRET_FLAG}: {} is empty; its first line is the secret",
            file.display()
        ));
    }
    Ok(Secret::new(secret))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_the_hex_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            sign(&Secret::new("Jefe"), b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_secret_is_the_first_line_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "s3cret value\r\nignored\n").unwrap();
        assert_eq!(read_secret_file(&file).unwrap().expose(), "s3cret value");
        std::fs::write(&file, "\nsecond line\n").unwrap();
        let empty = read_secret_file(&file).unwrap_err();
        assert!(empty.starts_with("--alert-webhook-secret-file: ") && empty.contains("empty"));
        let missing = read_secret_file(&dir.path().join("missing")).unwrap_err();
        assert!(missing.contains("cannot read"), "{missing}");
    }
}
