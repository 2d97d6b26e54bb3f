//! Where profiles go: the `--otlp` URL and the headers sent with every
//! request, checked before anything is recorded. A URL without a path is
//! an OTLP/gRPC endpoint (port 4317 by default); one with a path is an
//! OTLP/HTTP one, posted to that path (port 4318 by default).

use anyhow::{anyhow, bail, Result};

/// How requests travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC: `ProfilesService/Export` over HTTP/2.
    Grpc,
    /// OTLP/HTTP: a protobuf body posted over HTTP/1.1.
    Http,
}

/// A checked `--otlp` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// gRPC or HTTP.
    pub protocol: Protocol,
    /// `https`: TLS with the system's roots.
    pub tls: bool,
    /// The host, as DNS or TLS name it (IPv6 without brackets).
    pub host: String,
    /// The port, explicit or the protocol's default.
    pub port: u16,
    /// The full URL with its port, for OTLP/HTTP's POST.
    pub url: String,
    /// `host:port` as the `:authority` of a gRPC request.
    pub authority: String,
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        match self.protocol {
            Protocol::Grpc => write!(f, "{scheme}://{} (gRPC)", self.authority),
            Protocol::Http => write!(f, "{}", self.url),
        }
    }
}

/// The default ports of OTLP/gRPC and OTLP/HTTP.
pub const GRPC_PORT: u16 = 4317;
/// See [`GRPC_PORT`].
pub const HTTP_PORT: u16 = 4318;

/// Whether the URL's authority names a port (the url crate forgets an
/// explicit port that is the scheme's default, `:80`).
fn explicit_port(text: &str) -> bool {
    let rest = text.split_once("://").map_or(text, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let after_host = host_port.rsplit_once(']').map_or(host_port, |(_, p)| p);
    after_host.contains(':')
}

/// Parses `--otlp URL`; every error is one line naming the URL.
pub fn parse(text: &str) -> Result<Endpoint> {
    let shown = crate::names::clean(text);
    let bad = |why: &str| {
        anyhow!("invalid --otlp URL '{shown}': {why} (expected http(s)://HOST[:PORT] for OTLP/gRPC, or http(s)://HOST[:PORT]/PATH for OTLP/HTTP, e.g. http://collector:4318/v1development/profiles)")
    };
    // The URL standard quietly drops tabs and line breaks: refuse them.
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("a space or control character"));
    }
    let url = url::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
    let tls = match url.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(bad(&format!("the scheme is '{other}', not http or https"))),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "credentials in the URL are refused: give them as --otlp-header 'Authorization=...'",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("a query or fragment is not taken"));
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_string(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        _ => return Err(bad("no host")),
    };
    let protocol = if url.path() == "/" || url.path().is_empty() {
        Protocol::Grpc
    } else {
        Protocol::Http
    };
    let port = match url.port() {
        Some(p) => p,
        None if explicit_port(text) => url.port_or_known_default().unwrap_or(0),
        None if protocol == Protocol::Grpc => GRPC_PORT,
        None => HTTP_PORT,
    };
    if port == 0 {
        return Err(bad("port 0"));
    }
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let authority = format!("{bracketed}:{port}");
    let mut with_port = url.clone();
    with_port
        .set_port(Some(port))
        .map_err(|_| bad("cannot take a port"))?;
    Ok(Endpoint {
        protocol,
        tls,
        host,
        port,
        // The url crate drops a port that is the scheme's default: put it
        // back by hand then.
        url: if with_port.port().is_some() {
            with_port.to_string()
        } else {
            format!("{}://{authority}{}", url.scheme(), url.path())
        },
        authority,
    })
}

/// Headers a request sets itself, or that HTTP/2 forbids: refused.
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "te",
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
];

/// One `NAME=VALUE` header; `from` says where it came from, for errors,
/// which never show the value (it is often a secret).
pub fn header(text: &str, from: &str) -> Result<(String, String)> {
    let Some((name, value)) = text.split_once('=') else {
        bail!(
            "invalid {from} '{}': expected NAME=VALUE",
            crate::names::clean(text.get(..text.len().min(40)).unwrap_or(""))
        );
    };
    let name = name.trim().to_ascii_lowercase();
    let value = value.trim();
    let shown = crate::names::clean(&name);
    // RFC 9110 token characters.
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if name.is_empty() || !name.bytes().all(token) {
        bail!("invalid {from} name '{shown}': not an HTTP header name");
    }
    if RESERVED.contains(&name.as_str()) || name.starts_with("grpc-") {
        bail!("invalid {from} name '{shown}': bprof sets that header itself");
    }
    // Visible ASCII, spaces and tabs: no line breaks, no controls.
    if !value
        .bytes()
        .all(|c| c == b'\t' || (b' '..=b'~').contains(&c))
    {
        bail!("invalid {from} value for '{shown}': only printable ASCII is sent");
    }
    if value.len() > 8192 {
        bail!("invalid {from} value for '{shown}': longer than 8192 bytes");
    }
    Ok((name, value.to_string()))
}

/// `%XX` escapes decoded, as the OTLP exporter environment variables
/// write header values.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The request headers: `OTEL_EXPORTER_OTLP_PROFILES_HEADERS` (or
/// `OTEL_EXPORTER_OTLP_HEADERS`), `a=b,c=d` with `%XX` escapes, then the
/// `--otlp-header` options, which replace a header of the same name.
pub fn headers(env: Option<(&str, &str)>, flags: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |(k, v): (String, String)| match out.iter_mut().find(|(n, _)| *n == k) {
        Some(slot) => slot.1 = v,
        None => out.push((k, v)),
    };
    if let Some((var, text)) = env {
        for item in text.split(',').filter(|i| !i.trim().is_empty()) {
            let (k, v) = item.split_once('=').unwrap_or((item, ""));
            put(header(&format!("{k}={}", percent_decode(v)), var)?);
        }
    }
    for f in flags {
        put(header(f, "--otlp-header")?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_the_protocol_and_port() {
        let e = parse("http://collector").unwrap();
        assert_eq!(
            (e.protocol, e.port, e.tls, e.authority.as_str()),
            (Protocol::Grpc, 4317, false, "collector:4317")
        );
        let e = parse("https://c.example:443/").unwrap();
        assert_eq!((e.protocol, e.port, e.tls), (Protocol::Grpc, 443, true));
        let e = parse("http://127.0.0.1/v1development/profiles").unwrap();
        assert_eq!((e.protocol, e.port), (Protocol::Http, 4318));
        assert_eq!(e.url, "http://127.0.0.1:4318/v1development/profiles");
        let e = parse("http://[::1]:80/x").unwrap();
        assert_eq!((e.port, e.host.as_str()), (80, "::1"));
        assert_eq!(e.url, "http://[::1]:80/x");
        assert_eq!(e.authority, "[::1]:80");
    }

    #[test]
    fn bad_urls_are_one_line() {
        for bad in [
            "",
            "collector:4317",
            "ftp://x/",
            "http://",
            "http://user:pw@x/",
            "http://x/?q=1",
            "http://x:99999",
            "http://x:0",
            "http://x\n/",
            "http:// x",
        ] {
            let e = parse(bad).expect_err(bad).to_string();
            assert!(!e.contains('\n'), "{bad:?}: {e}");
            assert!(e.starts_with("invalid --otlp URL"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn headers_are_checked_and_never_shown() {
        let h = headers(
            Some(("OTEL_EXPORTER_OTLP_HEADERS", "a=1,X-Scope-OrgID=t%201")),
            &["Authorization=Bearer s3cret".into(), "a=2".into()],
        )
        .unwrap();
        assert_eq!(
            h,
            vec![
                ("a".into(), "2".into()),
                ("x-scope-orgid".into(), "t 1".into()),
                ("authorization".into(), "Bearer s3cret".into()),
            ]
        );
        for bad in [
            "novalue",
            "=v",
            "a b=1",
            "te=trailers",
            "grpc-timeout=1S",
            "content-type=x",
            "x=s3cret\r\nevil: 1",
            "x=s3cret\u{7f}",
        ] {
            let e = header(bad, "--otlp-header").expect_err(bad).to_string();
            assert!(!e.contains("s3cret"), "{bad:?} showed its value: {e}");
            assert!(!e.contains('\n'), "{bad:?}: {e}");
        }
    }
}
