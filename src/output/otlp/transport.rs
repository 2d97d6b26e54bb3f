//! One export attempt and how it ended, for both protocols; the answers
//! are read within fixed bounds, as a server's answers are hostile input.

use std::time::Duration;

use super::messages::ExportProfilesServiceResponse;

/// The most of a response body read: an export's answer is a few bytes
/// (a partial-success count and message).
pub const MAX_RESPONSE: usize = 64 << 10;

/// The most of a server's error message shown.
const MAX_MESSAGE: usize = 200;

/// What a receiver that took the request said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// Profiles it says it rejected (`partial_success`).
    pub rejected: u64,
    /// Its message, cleaned and cut, if any.
    pub message: String,
}

/// Why an attempt failed, and whether another could succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// A later attempt may succeed (unreachable, overloaded, timed out).
    pub retryable: bool,
    /// What went wrong, one line.
    pub why: String,
    /// How long the server asked to wait, if it did (bounded).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure worth another attempt.
    pub fn retry(why: impl Into<String>) -> Failure {
        Failure {
            retryable: true,
            why: why.into(),
            retry_after: None,
        }
    }

    /// A refusal another attempt would meet again.
    pub fn refused(why: impl Into<String>) -> Failure {
        Failure {
            retryable: false,
            why: why.into(),
            retry_after: None,
        }
    }
}

/// Sends one encoded request.
pub trait Transport: Send {
    /// Sends `body` (the request, gzipped when `gzip`), waiting at most
    /// `timeout` for the whole exchange.
    fn export(&mut self, body: &[u8], gzip: bool, timeout: Duration) -> Result<Accepted, Failure>;
}

/// A server's text as messages show it: cleaned, at most [`MAX_MESSAGE`]
/// bytes.
pub fn shown(text: &str) -> String {
    let mut s = crate::names::clean(text).into_owned();
    if s.len() > MAX_MESSAGE {
        let mut at = MAX_MESSAGE;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
        s.push_str("...");
    }
    s
}

/// The partial-success part of a response body; an answer that does not
/// decode counts as a plain success (the receiver took the request).
pub fn accepted(body: &[u8]) -> Accepted {
    use prost::Message;
    let Ok(r) = ExportProfilesServiceResponse::decode(body) else {
        return Accepted::default();
    };
    let Some(p) = r.partial_success else {
        return Accepted::default();
    };
    Accepted {
        rejected: p.rejected_profiles.max(0) as u64,
        message: shown(&p.error_message),
    }
}

/// A `Retry-After` of seconds, bounded to a minute.
pub fn retry_after(text: Option<&str>) -> Option<Duration> {
    let secs: u64 = text?.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(60)))
}

/// Whether an HTTP status means "try again later" (OTLP/HTTP's list).
pub fn http_retryable(status: u16) -> bool {
    matches!(status, 429 | 502 | 503 | 504)
}

/// Whether a gRPC status code is retryable (OTLP/gRPC's list):
/// CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, UNAVAILABLE,
/// DATA_LOSS. RESOURCE_EXHAUSTED is retryable only with the server's
/// RetryInfo, which bprof does not read: a request too large for the
/// receiver would meet the same answer again.
pub fn grpc_retryable(code: u32) -> bool {
    matches!(code, 1 | 4 | 10 | 11 | 14 | 15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_answers_are_bounded() {
        let long = "x".repeat(10_000) + "\x1b]0;t\x07";
        assert!(shown(&long).len() <= MAX_MESSAGE + 3);
        assert!(!shown("a\nb\x1b").contains(['\n', '\x1b']));
        assert_eq!(accepted(&[0xff; 40]), Accepted::default());
        assert_eq!(
            retry_after(Some("999999999999")),
            Some(Duration::from_secs(60))
        );
        assert_eq!(retry_after(Some("soon")), None);
    }
}
