//! Security: TLS on listeners (rustls with the ring provider), configured with Kafka's
//! `ssl.*` settings, and a throwaway certificate authority for development and tests.
//! SASL, principals, ACLs and quotas come here next (see docs/security.md).

pub mod dev_certs;
pub mod tls;

pub use tls::{reload_loop, ClientAuth, ClientTls, ServerTls};
pub use tokio_rustls::{client::TlsStream as ClientTlsStream, TlsConnector};
pub use tokio_rustls::{server::TlsStream, TlsAcceptor};
