//! HTTP header names tokenscale reads or writes, defined once.

/// Priority class of a request: `interactive` (default) or `batch`.
pub const PRIORITY: &str = "x-tokenscale-priority";
/// Deadline of a request in milliseconds from its arrival at the gateway.
pub const DEADLINE_MS: &str = "x-tokenscale-deadline-ms";
/// The request id the gateway assigns (or takes from the client) and forwards.
pub const REQUEST_ID: &str = "x-request-id";
/// API key header accepted besides `Authorization: Bearer`.
pub const API_KEY: &str = "x-api-key";
/// Which replica served a request (set by the gateway on responses, for debugging and tests).
pub const UPSTREAM: &str = "x-tokenscale-upstream";
/// Which model served a request (set by the gateway on every answer; a route's request names
/// the model of the route that answered it, as the body's `model` does).
pub const MODEL: &str = "x-tokenscale-model";
/// Sent by the gateway on stream requests: the engine adds each chunk's generated token ids
/// (member [`TOKEN_IDS_MEMBER`](crate::openai::TOKEN_IDS_MEMBER)) so that a broken stream can
/// be continued exactly on another replica. The gateway strips them before the client sees a
/// chunk; other engines ignore the header.
pub const STREAM_TOKEN_IDS: &str = "x-tokenscale-token-ids";
