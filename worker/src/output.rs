//! Bounded output: a run keeps only the last bytes of what it printed.
//!
//! Output is cut on a UTF-8 character boundary so the tail is always valid
//! text, and bytes that are not UTF-8 are replaced (`U+FFFD`).

/// The default bound on a firing's output tail, 64 KiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

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
        let text = String::from_utf8_lossy(&self.bytes[start..]);
        // Cutting in the middle of a character can leave a replacement
        // character at the front, and replacement characters take 3 bytes
        // where the invalid input took fewer: cut again on the text.
        tail(&text, self.max).to_string()
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
