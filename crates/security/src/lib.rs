//! Security: TLS on listeners and between brokers (rustls with the ring provider),
//! configured with Kafka's `ssl.*` settings; SASL logins; and a throwaway certificate
//! authority for development and tests; and ACLs with Kafka's StandardAuthorizer semantics
//! (docs/security.md).

pub mod acl;
pub mod dev_certs;
pub mod jwks;
mod login;
pub mod oauth;
pub mod principal;
pub mod quota;
pub mod sasl;
pub mod scram;
pub mod tls;

pub use sasl::{LoginError, SaslServer};
pub use scram::{ScramCredential, ScramLogin, ScramMechanism};
pub use tls::{reload_loop, ClientAuth, ClientTls, ServerTls};
pub use tokio_rustls::{client::TlsStream as ClientTlsStream, TlsConnector};
pub use tokio_rustls::{server::TlsStream, TlsAcceptor};
