//! Bounded, clean output: a run keeps only the last bytes of what it
//! printed, and every byte a handler prints can be stored.
//!
//! Output is cut on a UTF-8 character boundary so the tail is always valid
//! text; bytes that are not UTF-8 and NUL bytes (valid UTF-8, but PostgreSQL
//! refuses them in text) are replaced by `U+FFFD`. Other control characters
//! (tabs, newlines, escapes) are kept: JSON and both databases store them,
//! and `chimectl` escapes them when it prints.

use chime_common::text;

/// The default bound on a firing's output tail, 64 KiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = text::MAX_OUTPUT_BYTES;

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
        text::tail(&text::from_bytes(&self.bytes[start..]), self.max).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
