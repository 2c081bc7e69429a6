/** The SDK's version, as heartbeats report it (kept equal to package.json's by a test). */
export const VERSION = "0.1.0";

/** What a heartbeat's `version` says. */
export const HEARTBEAT_VERSION = `${VERSION} (typescript)`;
