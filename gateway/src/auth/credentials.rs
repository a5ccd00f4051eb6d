//! Reads the key a request presents, strictly: `Authorization: Bearer <key>` or
//! `x-api-key: <key>`. Anything else that claims to be a credential is refused, never read as
//! "no key" (which would charge it to the anonymous tenant).

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName};
use tokenscale_common::headers;

/// What the request presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presented<'a> {
    /// Neither header: the anonymous tenant, when one is configured.
    Nothing,
    /// A well-formed key.
    Key(&'a str),
}

/// Why the presented credentials cannot be read (401, with this message).
pub type Malformed = &'static str;

/// The key in the request's headers, read strictly:
/// - `Authorization` must be exactly one header of the `Bearer` scheme (any case, RFC 9110
///   §11.1) followed by one token of visible characters; `Basic`, an empty value, a bare
///   scheme, or a token with spaces in it is malformed;
/// - `x-api-key` must be exactly one non-empty header of visible characters;
/// - both may be sent only when they carry the same key.
pub fn presented_key(headers: &HeaderMap) -> Result<Presented<'_>, Malformed> {
    let bearer = match single(headers, &AUTHORIZATION)? {
        None => None,
        Some(value) => Some(bearer_token(value)?),
    };
    let api_key = match single(headers, &API_KEY)? {
        None => None,
        Some(value) if is_token(value) => Some(value),
        Some(_) => return Err("The x-api-key header must hold one key with no spaces."),
    };
    match (bearer, api_key) {
        (None, None) => Ok(Presented::Nothing),
        (Some(key), None) | (None, Some(key)) => Ok(Presented::Key(key)),
        (Some(a), Some(b)) if a == b => Ok(Presented::Key(a)),
        (Some(_), Some(_)) => {
            Err("Authorization and x-api-key carry different keys: send one of them.")
        }
    }
}

// Looked up by `HeaderName`: a `&str` name is parsed and checked again on every lookup.
const API_KEY: HeaderName = HeaderName::from_static(headers::API_KEY);

/// The only value of header `name`, as text; more than one value is malformed.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, Malformed> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("More than one credential header of the same name: send one.");
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| "The credential header holds characters that are not visible ASCII.")
}

/// The token of `Bearer <token>`.
fn bearer_token(value: &str) -> Result<&str, Malformed> {
    const WANTED: Malformed =
        "Malformed Authorization header: send `Authorization: Bearer <key>` or `x-api-key: <key>`.";
    let (scheme, rest) = value.split_once(' ').ok_or(WANTED)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(WANTED);
    }
    let token = rest.trim_start_matches(' ');
    if is_token(token) {
        Ok(token)
    } else {
        Err(WANTED)
    }
}

/// A non-empty run of visible ASCII characters (no spaces, no controls).
fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key read from `pairs` (`None` when none is presented).
    fn read(pairs: &[(&'static str, &'static str)]) -> Result<Option<String>, Malformed> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, http::HeaderValue::from_static(value));
        }
        presented_key(&headers).map(|presented| match presented {
            Presented::Nothing => None,
            Presented::Key(key) => Some(key.to_string()),
        })
    }

    #[test]
    fn bearer_and_x_api_key_are_read() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[("authorization", "Bearer sk-1")]),
            Ok(Some("sk-1".into()))
        );
        assert_eq!(
            read(&[("authorization", "bearer  sk-1")]),
            Ok(Some("sk-1".into()))
        );
        assert_eq!(
            read(&[("authorization", "BEARER sk-1")]),
            Ok(Some("sk-1".into()))
        );
        assert_eq!(read(&[("x-api-key", "sk-2")]), Ok(Some("sk-2".into())));
        assert_eq!(
            read(&[("authorization", "Bearer sk-3"), ("x-api-key", "sk-3")]),
            Ok(Some("sk-3".into()))
        );
    }

    #[test]
    fn anything_else_is_malformed_not_anonymous() {
        for value in [
            "Basic a2V5LWE6",
            "",
            "Bearer",
            "Bearer\tsk-1",
            "sk-1",
            "Bearer sk 1",
            "Token sk-1",
        ] {
            assert!(
                read(&[("authorization", value)]).is_err(),
                "`{value}` was accepted"
            );
        }
        assert!(read(&[("x-api-key", "")]).is_err());
        assert!(read(&[("x-api-key", "a b")]).is_err());
        assert!(read(&[("authorization", "Basic eA=="), ("x-api-key", "sk-1")]).is_err());
        assert!(read(&[("authorization", "Bearer a"), ("x-api-key", "b")]).is_err());
        assert!(read(&[("authorization", "Bearer a"), ("authorization", "Bearer a")]).is_err());
        assert!(read(&[("x-api-key", "a"), ("x-api-key", "a")]).is_err());
    }
}
