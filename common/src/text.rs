//! Handler output and error text as Chime keeps it.
//!
//! A handler may print any bytes: NUL, invalid UTF-8, megabytes. PostgreSQL
//! refuses a NUL in a text column, and an unbounded text makes every history
//! read slow, so the worker cleans and caps what it reports and the scheduler
//! does the same again before storing (a worker in another language may not).

use std::borrow::Cow;

/// The most output kept per firing: its last 64 KiB.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// The most error text kept per firing: its first 8 KiB.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// What replaces a NUL and every byte that is not UTF-8.
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// `bytes` as storable text: invalid UTF-8 and NUL replaced by U+FFFD.
pub fn from_bytes(bytes: &[u8]) -> Cow<'_, str> {
    match String::from_utf8_lossy(bytes) {
        Cow::Borrowed(text) => without_nul(text),
        Cow::Owned(text) => Cow::Owned(without_nul(&text).into_owned()),
    }
}

/// The last at most `max` bytes of `text` without NUL, cut at a character
/// boundary.
pub fn tail(text: &str, max: usize) -> Cow<'_, str> {
    let start = |clean: &str| {
        let mut start = clean.len().saturating_sub(max);
        while !clean.is_char_boundary(start) {
            start += 1;
        }
        start
    };
    match without_nul(text) {
        Cow::Borrowed(clean) => Cow::Borrowed(&clean[start(clean)..]),
        Cow::Owned(clean) => Cow::Owned(clean[start(&clean)..].to_string()),
    }
}

/// The first at most `max` bytes of `text` without NUL, cut at a character
/// boundary.
pub fn head(text: &str, max: usize) -> Cow<'_, str> {
    let end = |clean: &str| {
        let mut end = clean.len().min(max);
        while !clean.is_char_boundary(end) {
            end -= 1;
        }
        end
    };
    match without_nul(text) {
        Cow::Borrowed(clean) => Cow::Borrowed(&clean[..end(clean)]),
        Cow::Owned(clean) => Cow::Owned(clean[..end(&clean)].to_string()),
    }
}

fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', &REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_and_invalid_utf8_become_replacement_characters() {
        assert_eq!(from_bytes(b"a\0b"), "a\u{fffd}b");
        assert_eq!(from_bytes(b"ok \xff\xfe end"), "ok \u{fffd}\u{fffd} end");
        assert!(matches!(from_bytes(b"plain\ttext\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn caps_cut_at_character_boundaries() {
        let text = "aé€😀"; // 1 + 2 + 3 + 4 bytes
        for max in 0..=text.len() + 1 {
            let t = tail(text, max);
            assert!(
                t.len() <= max && text.ends_with(t.as_ref()),
                "tail {max}: {t:?}"
            );
            let h = head(text, max);
            assert!(
                h.len() <= max && text.starts_with(h.as_ref()),
                "head {max}: {h:?}"
            );
        }
        assert_eq!(tail(text, 5), "😀");
        assert_eq!(head(text, 5), "aé");
    }

    #[test]
    fn cleaning_comes_before_the_cap() {
        // Three NULs become nine bytes: the cap applies to what is stored.
        assert_eq!(tail("\0\0\0", 6), "\u{FFFD}\u{FFFD}");
        assert_eq!(tail("a€b", 3), "b");
        assert_eq!(tail("a€b\0", 6), "b\u{FFFD}");
        let long = format!("{}\0", "é".repeat(MAX_ERROR_BYTES));
        let error = head(&long, MAX_ERROR_BYTES);
        assert!(error.len() <= MAX_ERROR_BYTES && !error.contains('\0'));
    }

    #[test]
    fn caps_also_clean() {
        assert_eq!(tail("x\0y\0", 4), "y\u{fffd}");
        assert_eq!(head("\0abc", 4), "\u{fffd}a");
    }
}
