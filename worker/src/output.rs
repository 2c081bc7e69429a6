//! Bounded, clean output: a run keeps only the last bytes of what it
//! printed, and every byte a handler prints can be stored.
//!
//! Output is cut on a UTF-8 character boundary so the tail is always valid
//! text; bytes that are not UTF-8 and NUL bytes (valid UTF-8, but PostgreSQL
//! refuses them in text) are replaced by `U+FFFD`. Other control characters
//! (tabs, newlines, escapes) are kept: JSON and both databases store them,
//! and `chimectl` escapes them when it prints.

use std::borrow::Cow;

/// The default bound on a firing's output tail, 64 KiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The bound on a finished event's error text, 8 KiB.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// What replaces a NUL byte or a byte that is not UTF-8.
const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// `text` with every NUL replaced by `U+FFFD`.
pub fn clean(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', REPLACEMENT.encode_utf8(&mut [0; 4])))
    } else {
        Cow::Borrowed(text)
    }
}

/// `bytes` as clean text: invalid UTF-8 and NUL replaced by `U+FFFD`.
pub fn clean_bytes(bytes: &[u8]) -> String {
    clean(&String::from_utf8_lossy(bytes)).into_owned()
}

/// A run's output as reported: clean, then its last at most `max` bytes.
/// Cleaning comes first because a replacement (3 bytes) is longer than the
/// NUL it replaces.
pub fn output_tail(text: &str, max: usize) -> String {
    tail(&clean(text), max).to_string()
}

/// A run's error as reported: clean, then its first at most [`MAX_ERROR_BYTES`].
pub fn error_head(text: &str) -> String {
    head(&clean(text), MAX_ERROR_BYTES).to_string()
}

/// The last at most `max` bytes of `text`, starting on a character boundary.
pub fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first at most `max` bytes of `text`, ending on a character boundary
/// (used for error messages, whose beginning says the most).
pub fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A byte buffer that keeps only the last `max` bytes written to it.
///
/// Writes are amortised: the buffer grows to twice the bound before it drops
/// its front, so a chatty process costs O(1) per byte.
#[derive(Debug)]
pub struct TailBuffer {
    max: usize,
    bytes: Vec<u8>,
    dropped: u64,
}

impl TailBuffer {
    /// An empty buffer that keeps the last `max` bytes.
    pub fn new(max: usize) -> Self {
        TailBuffer {
            max,
            bytes: Vec::new(),
            dropped: 0,
        }
    }

    /// Appends `data`, dropping the oldest bytes beyond the bound.
    pub fn push(&mut self, data: &[u8]) {
        if data.len() >= self.max {
            self.dropped += (self.bytes.len() + data.len() - self.max) as u64;
            self.bytes.clear();
            self.bytes.extend_from_slice(&data[data.len() - self.max..]);
            return;
        }
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > self.max.saturating_mul(2).max(4096) {
            let cut = self.bytes.len() - self.max;
            self.dropped += cut as u64;
            self.bytes.drain(..cut);
        }
    }

    /// Bytes written but no longer held.
    pub fn dropped(&self) -> u64 {
        self.dropped + self.bytes.len().saturating_sub(self.max) as u64
    }

    /// The kept tail as text: at most `max` bytes, on a character boundary.
    pub fn to_text(&self) -> String {
        let start = self.bytes.len().saturating_sub(self.max);
        // Cutting in the middle of a character can leave a replacement
        // character at the front, and replacement characters take 3 bytes
        // where the invalid input took fewer: cut again on the text.
        output_tail(&clean_bytes(&self.bytes[start..]), self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_bytes_on_a_char_boundary() {
        assert_eq!(tail("hello", 10), "hello");
        assert_eq!(tail("hello", 3), "llo");
        // 'é' is two bytes: a cut inside it moves forward.
        assert_eq!(tail("aéb", 2), "b");
        assert_eq!(tail("aéb", 3), "éb");
        assert_eq!(tail("abc", 0), "");
    }

    #[test]
    fn head_keeps_the_first_bytes_on_a_char_boundary() {
        assert_eq!(head("hello", 3), "hel");
        assert_eq!(head("aéb", 2), "a");
        assert_eq!(head("aéb", 3), "aé");
    }

    #[test]
    fn nul_and_invalid_utf8_are_replaced_and_whitespace_kept() {
        assert_eq!(clean("plain\ttext\n"), Cow::Borrowed("plain\ttext\n"));
        assert_eq!(clean("a\0b"), "a\u{FFFD}b");
        assert_eq!(clean_bytes(b"a\0b\tc\n"), "a\u{FFFD}b\tc\n");
        assert_eq!(clean_bytes(b"x\xff\xfey"), "x\u{FFFD}\u{FFFD}y");
        assert_eq!(error_head("bad\0input"), "bad\u{FFFD}input");
    }

    #[test]
    fn cleaning_happens_before_the_cap() {
        // Three NULs become nine bytes: the cap applies to what is stored.
        assert_eq!(output_tail("\0\0\0", 6), "\u{FFFD}\u{FFFD}");
        let long = format!("{}\0", "é".repeat(MAX_ERROR_BYTES));
        let error = error_head(&long);
        assert!(error.len() <= MAX_ERROR_BYTES);
        assert!(!error.contains('\0'));
    }

    #[test]
    fn printed_nul_bytes_come_out_clean() {
        // What `printf 'a\000b'` writes.
        let mut buffer = TailBuffer::new(64);
        buffer.push(b"a\x00b");
        assert_eq!(buffer.to_text(), "a\u{FFFD}b");
    }

    #[test]
    fn a_multi_byte_char_cut_at_the_cap_is_replaced_within_the_cap() {
        // "€" is E2 82 AC: a 4-byte cap keeps 82 AC 'a' 'b', two stray
        // continuation bytes, whose replacements do not fit with "ab".
        let mut buffer = TailBuffer::new(4);
        buffer.push("x€ab".as_bytes());
        assert_eq!(buffer.to_text(), "ab");
        // A character cut at both ends of the kept bytes.
        let mut buffer = TailBuffer::new(5);
        buffer.push(b"\xe2\x82\xacab\xe2\x82");
        assert_eq!(buffer.to_text(), "ab\u{FFFD}");
        // A run's own output, cut inside a character at the cap.
        assert_eq!(output_tail("a€b", 3), "b");
        assert_eq!(output_tail("a€b\0", 6), "b\u{FFFD}");
    }

    #[test]
    fn tail_buffer_keeps_only_the_last_bytes() {
        let mut buffer = TailBuffer::new(8);
        for chunk in ["0123", "4567", "89ab", "cdef"] {
            buffer.push(chunk.as_bytes());
        }
        assert_eq!(buffer.to_text(), "89abcdef");
        assert_eq!(buffer.dropped(), 8);
        buffer.push(b"a very long chunk indeed");
        assert_eq!(buffer.to_text(), "k indeed");
    }

    #[test]
    fn tail_buffer_output_is_valid_text_within_the_bound() {
        let mut buffer = TailBuffer::new(5);
        buffer.push("ééééé".as_bytes());
        let text = buffer.to_text();
        assert!(text.len() <= 5, "{text:?}");
        assert!(text.ends_with("éé"));
        let mut many = TailBuffer::new(100);
        for _ in 0..10_000 {
            many.push(b"xyz\n");
        }
        assert_eq!(many.to_text().len(), 100);
    }
}
