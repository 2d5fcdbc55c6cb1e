//! The HTTP decisions of a download, without sockets: where a redirect leads, and what a
//! response means for a partial file (RFC 9110 sections 14 and 15.3.7). Redirects are followed
//! at most [`MAX_REDIRECTS`] times and never from https to http. A transfer that breaks off
//! keeps its `.part`, and the next run sends `Range: bytes=N-`: 206 appends after hashing what
//! is held, 200 starts over, 416 means the `.part` may be complete, which its digest decides.

use anyhow::{Context as _, bail};
use hyper::StatusCode;
use url::Url;

/// Redirects followed before giving up: mirrors redirect once or twice.
pub const MAX_REDIRECTS: usize = 5;

/// Whether `status` sends the client elsewhere with a `Location` to follow.
pub fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// The URL a redirect from `from` to `location` leads to (relative references resolve against
/// `from`). HTTPS never redirects to plain HTTP: the stream metadata is where the digests come
/// from, so it must not be swapped on the way.
pub fn redirect_target(from: &Url, location: &str) -> anyhow::Result<Url> {
    let to = from
        .join(location)
        .with_context(|| format!("redirect to `{location}`, which is not a URL"))?;
    match (from.scheme(), to.scheme()) {
        ("https", "https") | ("http", "http" | "https") => Ok(to),
        ("https", "http") => bail!("refusing the redirect from https to {to}"),
        _ => bail!("redirect to {to}, which is not http:// or https://"),
    }
}

/// What a response means for the bytes already held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The body continues the partial file, which is `total` bytes when complete (if known).
    Continues { total: Option<u64> },
    /// The body is the whole file: what is held is dropped.
    Whole,
    /// 416: nothing from that offset on. The partial file may already be complete (a run cut
    /// short before its rename) or stale; its digest decides.
    Unsatisfiable,
    /// A 206 for some other range than asked: ask again for the whole file.
    WrongRange,
}

/// Interprets the status and `Content-Range` of a response to a GET that asked for the bytes
/// from `held` on (`held` 0: no `Range` sent).
pub fn interpret(
    status: StatusCode,
    content_range: Option<&str>,
    held: u64,
) -> anyhow::Result<Answer> {
    match status {
        StatusCode::OK => Ok(Answer::Whole),
        StatusCode::PARTIAL_CONTENT if held > 0 => {
            let range = content_range.context("206 without a Content-Range")?;
            match parse_content_range(range) {
                Some((start, total)) if start == held => Ok(Answer::Continues { total }),
                Some(_) => Ok(Answer::WrongRange),
                None => bail!("206 with a Content-Range that is not `bytes N-M/T`: `{range}`"),
            }
        }
        StatusCode::RANGE_NOT_SATISFIABLE if held > 0 => Ok(Answer::Unsatisfiable),
        s => bail!("the server answered {s}"),
    }
}

/// `bytes START-END/TOTAL` (TOTAL may be `*`) as its start and total.
fn parse_content_range(value: &str) -> Option<(u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    let (start, end): (u64, u64) = (start.parse().ok()?, end.parse().ok()?);
    if end < start {
        return None;
    }
    let total = match total {
        "*" => None,
        t => Some(t.parse::<u64>().ok().filter(|&t| t > end)?),
    };
    Some((start, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn redirects_resolve_relative_references() {
        let from = url("http://127.0.0.1:8000/a/b/kernel");
        assert_eq!(
            redirect_target(&from, "/c/kernel").unwrap().as_str(),
            "http://127.0.0.1:8000/c/kernel"
        );
        assert_eq!(
            redirect_target(&from, "../d/kernel").unwrap().as_str(),
            "http://127.0.0.1:8000/a/d/kernel"
        );
        assert_eq!(
            redirect_target(&from, "https://mirror.example/k")
                .unwrap()
                .as_str(),
            "https://mirror.example/k"
        );
    }

    #[test]
    fn https_never_redirects_to_http_or_another_scheme() {
        let from = url("https://mirror.example/k");
        let e = redirect_target(&from, "http://mirror.example/k").unwrap_err();
        assert!(
            e.to_string().contains("refusing the redirect from https"),
            "{e}"
        );
        assert!(redirect_target(&from, "ftp://mirror.example/k").is_err());
        assert!(redirect_target(&url("http://a/k"), "file:///etc/passwd").is_err());
        assert!(redirect_target(&from, "https://other.example/k").is_ok());
    }

    #[test]
    fn only_the_redirect_statuses_with_a_location_are_followed() {
        for s in [301, 302, 303, 307, 308] {
            assert!(is_redirect(StatusCode::from_u16(s).unwrap()), "{s}");
        }
        for s in [200, 300, 304, 305, 404] {
            assert!(!is_redirect(StatusCode::from_u16(s).unwrap()), "{s}");
        }
    }

    #[test]
    fn a_206_from_the_held_offset_continues() {
        assert_eq!(
            interpret(StatusCode::PARTIAL_CONTENT, Some("bytes 100-199/200"), 100).unwrap(),
            Answer::Continues { total: Some(200) }
        );
        assert_eq!(
            interpret(StatusCode::PARTIAL_CONTENT, Some("bytes 100-199/*"), 100).unwrap(),
            Answer::Continues { total: None }
        );
    }

    #[test]
    fn a_200_replaces_what_is_held() {
        assert_eq!(interpret(StatusCode::OK, None, 100).unwrap(), Answer::Whole);
        assert_eq!(interpret(StatusCode::OK, None, 0).unwrap(), Answer::Whole);
    }

    #[test]
    fn another_range_or_416_are_told_apart() {
        assert_eq!(
            interpret(StatusCode::PARTIAL_CONTENT, Some("bytes 0-199/200"), 100).unwrap(),
            Answer::WrongRange
        );
        assert_eq!(
            interpret(StatusCode::RANGE_NOT_SATISFIABLE, Some("bytes */100"), 100).unwrap(),
            Answer::Unsatisfiable
        );
    }

    #[test]
    fn errors_and_answers_that_do_not_fit_the_request() {
        for (status, range, held) in [
            (StatusCode::NOT_FOUND, None, 0),
            (StatusCode::INTERNAL_SERVER_ERROR, None, 100),
            // Nothing was asked for a range, so a partial answer or a 416 makes no sense.
            (StatusCode::PARTIAL_CONTENT, Some("bytes 0-1/2"), 0),
            (StatusCode::RANGE_NOT_SATISFIABLE, None, 0),
            (StatusCode::PARTIAL_CONTENT, None, 100),
            (StatusCode::PARTIAL_CONTENT, Some("bytes 100-99/200"), 100),
            (StatusCode::PARTIAL_CONTENT, Some("bytes 100-199/150"), 100),
            (StatusCode::PARTIAL_CONTENT, Some("items 100-199/200"), 100),
            (StatusCode::PARTIAL_CONTENT, Some("bytes 100-x/200"), 100),
        ] {
            assert!(
                interpret(status, range, held).is_err(),
                "{status} {range:?} {held}"
            );
        }
        let e = interpret(StatusCode::NOT_FOUND, None, 0).unwrap_err();
        assert!(e.to_string().contains("404 Not Found"), "{e}");
    }
}
