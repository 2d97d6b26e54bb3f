//! OTLP/gRPC: one unary call of `ProfilesService/Export` over HTTP/2 with
//! the h2 crate, on a single-threaded tokio runtime that lives in the
//! delivery thread. Each export opens its own connection (TLS with ALPN
//! `h2` for `https`) and closes it: at one request per interval the
//! handshake costs nothing worth a connection's upkeep, and no stale
//! connection ever needs detecting.
//!
//! The framing is gRPC's: a 5-byte prefix (compressed flag, big-endian
//! length) before the message, `grpc-encoding: gzip` when compressed; the
//! status comes in `grpc-status` (trailers, or the headers of a
//! trailers-only answer). What the server sends is read within bounds:
//! headers (`MAX_HEADERS`), the body ([`transport::MAX_RESPONSE`]), time.

use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::endpoint::Endpoint;
use super::messages::GRPC_PATH;
use super::transport::{self, Accepted, Failure, Transport};

/// The most header bytes (decoded) accepted from the server.
const MAX_HEADERS: u32 = 16 << 10;

/// An OTLP/gRPC client.
pub struct GrpcTransport {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    runtime: Option<tokio::runtime::Runtime>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl GrpcTransport {
    /// A client of `endpoint` sending `headers`.
    pub fn new(endpoint: Endpoint, headers: Vec<(String, String)>) -> GrpcTransport {
        GrpcTransport {
            endpoint,
            headers,
            runtime: None,
            tls: None,
        }
    }
}

/// Any error as one retryable line.
fn retry<E: std::fmt::Display>(what: &str) -> impl Fn(E) -> Failure + '_ {
    move |e| Failure::retry(transport::shown(&format!("{what}: {e}")))
}

/// gRPC's status for an HTTP status other than 200 (the gRPC HTTP/2
/// mapping): 429, 502, 503 and 504 mean UNAVAILABLE, worth a retry.
fn http_failure(status: u16) -> Failure {
    let why = format!("HTTP {status} from a gRPC endpoint");
    if transport::http_retryable(status) {
        Failure::retry(why)
    } else {
        Failure::refused(why)
    }
}

/// `grpc-message` is percent-encoded.
fn grpc_message(h: &http::HeaderMap) -> String {
    let raw = h
        .get("grpc-message")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(a), Some(b)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push((a * 16 + b) as u8);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    transport::shown(&String::from_utf8_lossy(&out))
}

/// The status in `grpc-status`, if the headers hold one; an unreadable
/// one is UNKNOWN (2).
fn grpc_status(h: &http::HeaderMap) -> Option<u32> {
    let v = h.get("grpc-status")?;
    Some(
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(2),
    )
}

/// A non-OK status as a failure, retryable per OTLP's list.
fn status_failure(code: u32, h: &http::HeaderMap) -> Failure {
    let msg = grpc_message(h);
    let why = if msg.is_empty() {
        format!("gRPC status {code}")
    } else {
        format!("gRPC status {code}: {msg}")
    };
    if transport::grpc_retryable(code) {
        Failure::retry(why)
    } else {
        Failure::refused(why)
    }
}

/// The response message from a (bounded) body: the first gRPC frame,
/// decompressed when flagged so, within bounds.
fn response_message(body: &[u8], gzip: bool) -> Vec<u8> {
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Vec::new();
    };
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let Some(msg) = rest.get(..len) else {
        return Vec::new();
    };
    match (head[0], gzip) {
        (0, _) => msg.to_vec(),
        (1, true) => {
            use std::io::Read;
            let mut out = Vec::new();
            let _ = flate2::read::GzDecoder::new(msg)
                .take(transport::MAX_RESPONSE as u64)
                .read_to_end(&mut out);
            out
        }
        _ => Vec::new(),
    }
}

impl GrpcTransport {
    /// The exchange itself, within the caller's timeout.
    async fn call(
        &self,
        data: Bytes,
        gzip: bool,
        tls: Option<Arc<rustls::ClientConfig>>,
        addrs: Vec<std::net::SocketAddr>,
    ) -> Result<Accepted, Failure> {
        let mut last = Failure::retry("no address");
        let mut tcp = None;
        for a in addrs {
            match tokio::net::TcpStream::connect(a).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = retry("connecting")(e),
            }
        }
        let tcp = tcp.ok_or(last)?;
        let _ = tcp.set_nodelay(true);
        let mut builder = h2::client::Builder::new();
        builder
            .max_header_list_size(MAX_HEADERS)
            .initial_window_size(transport::MAX_RESPONSE as u32)
            .max_concurrent_reset_streams(4);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (send, driver) = match tls {
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(self.endpoint.host.clone())
                    .map_err(|e| Failure::refused(format!("TLS name: {e}")))?;
                let stream = tokio_rustls::TlsConnector::from(config)
                    .connect(name, tcp)
                    .await
                    .map_err(retry("TLS"))?;
                let (send, conn) = builder
                    .handshake::<_, Bytes>(stream)
                    .await
                    .map_err(retry("HTTP/2 handshake"))?;
                (send, tokio::spawn(conn))
            }
            None => {
                let (send, conn) = builder
                    .handshake::<_, Bytes>(tcp)
                    .await
                    .map_err(retry("HTTP/2 handshake"))?;
                (send, tokio::spawn(conn))
            }
        };
        let result = self.request(send, data, gzip, scheme).await;
        driver.abort();
        result
    }

    async fn request(
        &self,
        send: h2::client::SendRequest<Bytes>,
        data: Bytes,
        gzip: bool,
        scheme: &str,
    ) -> Result<Accepted, Failure> {
        let mut send = send.ready().await.map_err(retry("HTTP/2"))?;
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("{scheme}://{}{GRPC_PATH}", self.endpoint.authority))
            .header("content-type", "application/grpc+proto")
            .header("te", "trailers")
            .header("grpc-accept-encoding", "gzip")
            .header(
                "user-agent",
                concat!("bprof/", env!("CARGO_PKG_VERSION"), " grpc-h2"),
            );
        if gzip {
            req = req.header("grpc-encoding", "gzip");
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(())
            .map_err(|e| Failure::refused(format!("request: {e}")))?;
        let (response, mut stream) = send.send_request(req, false).map_err(retry("sending"))?;
        let mut framed = Vec::with_capacity(5 + data.len());
        framed.push(u8::from(gzip));
        framed.extend_from_slice(&(data.len() as u32).to_be_bytes());
        framed.extend_from_slice(&data);
        stream
            .send_data(Bytes::from(framed), true)
            .map_err(retry("sending"))?;
        let response = response.await.map_err(retry("waiting for the answer"))?;
        let (head, mut recv) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Err(http_failure(head.status.as_u16()));
        }
        // Trailers-only: the status is in the headers, no body follows.
        if let Some(code) = grpc_status(&head.headers) {
            return match code {
                0 => Ok(Accepted::default()),
                c => Err(status_failure(c, &head.headers)),
            };
        }
        let mut body = Vec::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk.map_err(retry("reading the answer"))?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            let room = transport::MAX_RESPONSE.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                // A larger answer than any export's: stop reading, and
                // the request counts as refused (retrying would meet the
                // same server).
                return Err(Failure::refused(format!(
                    "an answer over {} KiB",
                    transport::MAX_RESPONSE >> 10
                )));
            }
        }
        let trailers = recv
            .trailers()
            .await
            .map_err(retry("reading the status"))?
            .unwrap_or_default();
        match grpc_status(&trailers) {
            Some(0) => {
                let compressed = head
                    .headers
                    .get("grpc-encoding")
                    .is_some_and(|v| v.as_bytes() == b"gzip");
                Ok(transport::accepted(&response_message(&body, compressed)))
            }
            Some(c) => Err(status_failure(c, &trailers)),
            None => Err(Failure::retry("the answer had no gRPC status")),
        }
    }
}

impl Transport for GrpcTransport {
    fn export(&mut self, data: &[u8], gzip: bool, timeout: Duration) -> Result<Accepted, Failure> {
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
                .map_err(|e| Failure::refused(format!("starting the gRPC client: {e}")))?;
            self.runtime = Some(rt);
        }
        if self.endpoint.tls && self.tls.is_none() {
            let config = super::tls::client_config(&[b"h2"])
                .map_err(|e| Failure::refused(format!("{e:#}")))?;
            self.tls = Some(config);
        }
        // Names are resolved here, in the delivery thread, never where
        // samples are recorded.
        let addrs: Vec<_> = (self.endpoint.host.as_str(), self.endpoint.port)
            .to_socket_addrs()
            .map_err(retry("resolving the host"))?
            .collect();
        let rt = self.runtime.as_ref().expect("just built");
        let call = self.call(Bytes::copy_from_slice(data), gzip, self.tls.clone(), addrs);
        rt.block_on(async { tokio::time::timeout(timeout, call).await })
            .unwrap_or_else(|_| {
                Err(Failure::retry(format!(
                    "no answer within {:.1} s",
                    timeout.as_secs_f64()
                )))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_frames_are_read_within_bounds() {
        assert!(response_message(&[], false).is_empty());
        // A length past the body.
        assert!(response_message(&[0, 0xff, 0xff, 0xff, 0xff, 1], false).is_empty());
        assert_eq!(response_message(&[0, 0, 0, 0, 2, 8, 1], false), vec![8, 1]);
        // Compressed without a known encoding: ignored.
        assert!(response_message(&[1, 0, 0, 0, 1, 0], false).is_empty());
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", "14".parse().unwrap());
        h.insert("grpc-message", "down%0Afor%20now".parse().unwrap());
        let f = status_failure(grpc_status(&h).unwrap(), &h);
        assert!(f.retryable);
        assert_eq!(f.why, "gRPC status 14: down\\x0afor now");
        h.insert("grpc-status", "x".parse().unwrap());
        assert_eq!(grpc_status(&h), Some(2));
        assert!(!status_failure(16, &h).retryable);
    }
}
