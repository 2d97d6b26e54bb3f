//! OTLP profiles output (`--otlp URL`): each profile, or each `--every`
//! interval's, sent to an OpenTelemetry Collector, Grafana Pyroscope or
//! Parca as an `ExportProfilesServiceRequest` of opentelemetry-proto
//! v1.10.0's profiles signal (`v1development`; the `.proto` files are in
//! `proto/`).
//!
//! [`encode`] turns the symbolized stacks into a request (plain data in,
//! a message out); [`deliver`] queues the encoded bytes and sends them from
//! a thread of its own over [`grpc`] (HTTP/2 with h2) or [`http`] (ureq),
//! so recording never waits on the network.

pub mod deliver;
pub mod encode;
pub mod endpoint;
mod grpc;
mod http;
pub mod messages;
mod tls;
pub mod transport;

pub use deliver::{Delivery, Payload, Settings, Totals};
pub use encode::{build, Host, Meta};

/// A request as sent: protobuf, gzipped when `gzip`.
pub fn payload_body(request: &messages::ExportProfilesServiceRequest, gzip: bool) -> Vec<u8> {
    use prost::Message;
    use std::io::Write;
    let raw = request.encode_to_vec();
    if !gzip {
        return raw;
    }
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests;
