//! OTLP/HTTP: the request posted as `application/x-protobuf` with ureq,
//! gzipped (`Content-Encoding: gzip`); no redirects are followed, so the
//! headers (credentials) go to the URL given and nowhere else.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use super::endpoint::Endpoint;
use super::transport::{self, Accepted, Failure, Transport};

/// An OTLP/HTTP client.
pub struct HttpTransport {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    /// Built at the first attempt (TLS roots are read then).
    agent: Option<ureq::Agent>,
}

impl HttpTransport {
    /// A client of `endpoint` sending `headers`.
    pub fn new(endpoint: Endpoint, headers: Vec<(String, String)>) -> HttpTransport {
        HttpTransport {
            endpoint,
            headers,
            agent: None,
        }
    }

    fn agent(&mut self) -> Result<&ureq::Agent, Failure> {
        if self.agent.is_none() {
            let mut b = ureq::AgentBuilder::new()
                .redirects(0)
                .user_agent(concat!("bprof/", env!("CARGO_PKG_VERSION")));
            if self.endpoint.tls {
                let config = super::tls::client_config(&[])
                    .map_err(|e| Failure::refused(format!("{e:#}")))?;
                b = b.tls_config(Arc::clone(&config));
            }
            self.agent = Some(b.build());
        }
        Ok(self.agent.as_ref().expect("just built"))
    }
}

/// At most `MAX_RESPONSE` bytes of a body.
fn body(r: ureq::Response) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = r
        .into_reader()
        .take(transport::MAX_RESPONSE as u64)
        .read_to_end(&mut buf);
    buf
}

impl Transport for HttpTransport {
    fn export(&mut self, data: &[u8], gzip: bool, timeout: Duration) -> Result<Accepted, Failure> {
        let url = self.endpoint.url.clone();
        let headers = self.headers.clone();
        let agent = self.agent()?;
        let mut req = agent
            .post(&url)
            .timeout(timeout)
            .set("content-type", "application/x-protobuf");
        if gzip {
            req = req.set("content-encoding", "gzip");
        }
        for (k, v) in &headers {
            req = req.set(k, v);
        }
        match req.send_bytes(data) {
            Ok(r) => {
                let protobuf = r
                    .header("content-type")
                    .is_some_and(|t| t.starts_with("application/x-protobuf"));
                let b = body(r);
                Ok(if protobuf {
                    transport::accepted(&b)
                } else {
                    Accepted::default()
                })
            }
            Err(ureq::Error::Status(code, r)) => {
                let after = transport::retry_after(r.header("retry-after"));
                let why = format!("HTTP {code} {}", transport::shown(r.status_text()));
                drop(body(r));
                let mut f = if transport::http_retryable(code) {
                    Failure::retry(why)
                } else {
                    Failure::refused(why)
                };
                f.retry_after = after;
                Err(f)
            }
            Err(ureq::Error::Transport(t)) => Err(Failure::retry(transport::shown(&t.to_string()))),
        }
    }
}
