//! TLS for `https` endpoints: rustls (the crate ureq already brings, with
//! ring) trusting the system's certificate authorities, as
//! `rustls-native-certs` finds them (`/etc/ssl/certs`, or `SSL_CERT_FILE`
//! and `SSL_CERT_DIR`).

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustls::ClientConfig;

/// A client configuration with the system's roots, offering `alpn`
/// (`h2` for gRPC; none for HTTP/1.1).
pub fn client_config(alpn: &[&[u8]]) -> Result<Arc<ClientConfig>> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        bail!("no system CA certificates found for TLS (install ca-certificates, or set SSL_CERT_FILE)");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("setting up TLS")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
