// Times on the wire: written as RFC 3339 UTC with milliseconds and Z, read
// in any RFC 3339 offset, anything else refused with the text quoted.
import { test } from "node:test";
import assert from "node:assert/strict";
import { formatTime, parseTime } from "../../dist/time.js";

test("times are written in utc with milliseconds and z", () => {
  assert.equal(formatTime(new Date(Date.UTC(2026, 2, 28, 1, 30, 0, 5))), "2026-03-28T01:30:00.005Z");
});

test("any rfc 3339 offset is read", () => {
  const utc = Date.UTC(2026, 2, 28, 1, 30, 0);
  assert.equal(parseTime("2026-03-28T01:30:00Z").getTime(), utc);
  assert.equal(parseTime("2026-03-28T01:30:00.000Z").getTime(), utc);
  assert.equal(parseTime("2026-03-28T03:30:00+02:00").getTime(), utc);
  assert.equal(parseTime("2026-03-27T20:30:00-05:00").getTime(), utc);
  assert.equal(parseTime(" 2026-03-28t01:30:00.123456789z ").getTime(), utc + 123);
});

test("what is not rfc 3339 is refused with the text quoted", () => {
  for (const bad of ["yesterday", "2026-03-28", "2026-03-28T01:30:00", "2026-02-30T00:00:00Z", "2026-03-28T24:00:00Z",
    "1774661400000", "2026-03-28T01:30:00+2:00", "2026-13-01T00:00:00Z", ""]) {
    assert.throws(() => parseTime(bad), (e) => e.message.includes(JSON.stringify(bad)), bad);
  }
});
