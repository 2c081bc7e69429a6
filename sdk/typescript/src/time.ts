/**
 * Times on the wire (docs/PROTOCOL.md): Chime writes RFC 3339 in UTC with
 * milliseconds and `Z`, and accepts any RFC 3339 offset when reading. The
 * reader is strict, because `Date.parse` accepts many forms RFC 3339 does not
 * (and a header that is not a time makes the message not a firing).
 */

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

/** `2026-03-28T01:30:00.000Z`. */
export function formatTime(date: Date): string {
  return date.toISOString();
}

/**
 * Reads an RFC 3339 time; throws an Error that quotes the text when it is
 * not one. Fractions finer than a millisecond are truncated.
 */
export function parseTime(text: string): Date {
  const trimmed = text.trim();
  const m = RFC3339.exec(trimmed);
  const bad = () =>
    new Error(`${JSON.stringify(text)} is not an RFC 3339 time; write e.g. "2026-03-28T02:30:00Z"`);
  if (!m) throw bad();
  const [, y, mo, d, h, mi, s, frac, zone] = m;
  const year = Number(y), month = Number(mo), day = Number(d);
  const hour = Number(h), minute = Number(mi), second = Number(s);
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || minute > 59 || second > 60) {
    throw bad();
  }
  const ms = frac ? Math.floor(Number(`0${frac}`) * 1000) : 0;
  let offsetMinutes = 0;
  if (zone !== "Z" && zone !== "z") {
    const sign = zone!.startsWith("-") ? -1 : 1;
    const oh = Number(zone!.slice(1, 3)), om = Number(zone!.slice(4, 6));
    if (oh > 23 || om > 59) throw bad();
    offsetMinutes = sign * (oh * 60 + om);
  }
  // A leap second (:60) is read as the next second, as chrono does.
  const utc = Date.UTC(year, month - 1, day, hour, minute, second, ms) - offsetMinutes * 60_000;
  return new Date(utc);
}

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}
