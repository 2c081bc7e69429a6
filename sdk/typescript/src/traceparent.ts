/**
 * W3C Trace Context `traceparent` values (contract v1.2: every firing
 * message carries one). A value that does not follow the format is treated
 * as absent: a handler never sees a malformed one, and a span never
 * continues a trace it cannot name.
 */

/** A traceparent, read. */
export interface TraceParent {
  version: string;
  /** 32 lower-case hex digits, not all zero. */
  traceId: string;
  /** 16 lower-case hex digits, not all zero. */
  parentId: string;
  /** The trace flags byte (bit 0: sampled). */
  flags: number;
}

const VERSION_00 = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
// Later versions may append fields after a dash (W3C Trace Context §3.2.4).
const LATER_VERSION = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/** Reads `value`; `undefined` when it is absent or malformed. */
export function parseTraceparent(value: string | undefined | null): TraceParent | undefined {
  if (typeof value !== "string") return undefined;
  const text = value.trim();
  if (text.length > 512) return undefined;
  let version: string, traceId: string, parentId: string, flags: string;
  const v0 = VERSION_00.exec(text);
  if (v0) {
    [version, traceId, parentId, flags] = ["00", v0[1]!, v0[2]!, v0[3]!];
  } else {
    const later = LATER_VERSION.exec(text);
    if (!later || later[1] === "00" || later[1] === "ff") return undefined;
    [version, traceId, parentId, flags] = [later[1]!, later[2]!, later[3]!, later[4]!];
  }
  if (/^0+$/.test(traceId) || /^0+$/.test(parentId)) return undefined;
  return { version, traceId, parentId, flags: parseInt(flags, 16) };
}

/** The header value of a traceparent that was read: `undefined` when malformed. */
export function validTraceparent(value: string | undefined | null): string | undefined {
  const parsed = parseTraceparent(value);
  if (!parsed) return undefined;
  const flags = parsed.flags.toString(16).padStart(2, "0");
  return `${parsed.version}-${parsed.traceId}-${parsed.parentId}-${flags}`;
}
