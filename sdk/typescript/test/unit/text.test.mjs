// Output and error text: cleaned (NUL, lone surrogates, invalid UTF-8 become
// U+FFFD), then cut on a character boundary: the output's last bytes, the
// error's first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { clean, fromBytes, head, tail, utf8Length } from "../../dist/text.js";

test("nul and invalid utf-8 become replacement characters", () => {
  assert.equal(clean("a\0b"), "a\uFFFDb");
  assert.equal(fromBytes(new Uint8Array([0x6f, 0x6b, 0x20, 0xff, 0xfe, 0x20, 0x65])), "ok \uFFFD\uFFFD e");
  assert.equal(clean("lone \uD800 surrogate"), "lone \uFFFD surrogate");
  assert.equal(clean("plain\ttext\n\x1b[0m"), "plain\ttext\n\x1b[0m", "other control characters are kept");
});

test("caps cut at character boundaries", () => {
  const text = "aé€😀"; // 1 + 2 + 3 + 4 bytes
  for (let max = 0; max <= utf8Length(text) + 1; max++) {
    const t = tail(text, max);
    assert.ok(utf8Length(t) <= max && text.endsWith(t), `tail ${max}: ${t}`);
    const h = head(text, max);
    assert.ok(utf8Length(h) <= max && text.startsWith(h), `head ${max}: ${h}`);
  }
  assert.equal(tail(text, 5), "😀");
  assert.equal(head(text, 5), "aé");
});

test("the output keeps its last bytes and the error its first", () => {
  assert.equal(tail("0123456789", 8), "23456789");
  assert.equal(head("0123456789", 4), "0123");
  const long = "é".repeat(40_000);
  const kept = tail(long, 64 * 1024);
  assert.ok(utf8Length(kept) <= 64 * 1024);
  assert.ok(long.endsWith(kept));
  assert.equal(utf8Length(kept), 64 * 1024, "80000 bytes of é: 65536 is even, so every kept character is whole");
  assert.equal(utf8Length(tail("x" + long, 64 * 1024 - 1)), 64 * 1024 - 2, "an odd cap drops a half character");
});

test("cleaning comes before cutting: a replacement takes 3 bytes", () => {
  assert.equal(tail("ab\0", 3), "\uFFFD");
  assert.equal(head("\0ab", 3), "\uFFFD");
});
