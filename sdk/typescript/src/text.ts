/**
 * Output and error text as Chime keeps it (docs/PROTOCOL.md §5): a handler
 * may return any text, but PostgreSQL refuses NUL in text and an unbounded
 * output makes every history read slow. So the worker cleans first (NUL and
 * anything that is not valid UTF-8 become U+FFFD), then keeps the last bytes
 * of the output and the first bytes of the error, cut on a character boundary.
 */

/** The default bound on a firing's output tail: 64 KiB. */
export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024;
/** The largest output bound: a finished event must fit NATS's default 1 MiB payload. */
export const MAX_OUTPUT_LIMIT = 512 * 1024;
/** The most error text kept: its first 8 KiB. */
export const MAX_ERROR_BYTES = 8 * 1024;

const REPLACEMENT = "\uFFFD";
const encoder = new TextEncoder();

/**
 * Text that can be stored: NUL and lone UTF-16 surrogates (which have no
 * UTF-8 form) replaced by U+FFFD; every other character kept.
 */
export function clean(text: string): string {
  // toWellFormed (Node 20) replaces lone surrogates with U+FFFD.
  const wellFormed = (text as { toWellFormed?: () => string }).toWellFormed?.() ?? replaceLoneSurrogates(text);
  return wellFormed.includes("\0") ? wellFormed.replaceAll("\0", REPLACEMENT) : wellFormed;
}

function replaceLoneSurrogates(text: string): string {
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, REPLACEMENT);
}

/** Bytes as storable text: invalid UTF-8 and NUL replaced by U+FFFD. */
export function fromBytes(bytes: Uint8Array): string {
  return clean(new TextDecoder("utf-8", { fatal: false }).decode(bytes));
}

/** How many bytes `text` takes in UTF-8. */
export function utf8Length(text: string): number {
  return encoder.encode(text).length;
}

/** The last at most `max` UTF-8 bytes of the cleaned `text`, cut on a character boundary. */
export function tail(text: string, max: number): string {
  const cleaned = clean(text);
  const bytes = encoder.encode(cleaned);
  if (bytes.length <= max) return cleaned;
  let start = bytes.length - Math.max(0, max);
  // Skip continuation bytes (10xxxxxx): the cut must start a character.
  while (start < bytes.length && (bytes[start]! & 0xc0) === 0x80) start += 1;
  return new TextDecoder().decode(bytes.subarray(start));
}

/** The first at most `max` UTF-8 bytes of the cleaned `text`, cut on a character boundary. */
export function head(text: string, max: number): string {
  const cleaned = clean(text);
  const bytes = encoder.encode(cleaned);
  if (bytes.length <= max) return cleaned;
  let end = Math.max(0, max);
  // Back off while the byte at `end` continues the character before it.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end -= 1;
  return new TextDecoder().decode(bytes.subarray(0, end));
}
