//! SASL tokens as a client sends them before it is authenticated: the first byte picks the
//! exchange, the rest is the client's bytes. 0: a PLAIN token against a JAAS user list;
//! 1 and 2: a SCRAM-SHA-256 / SCRAM-SHA-512 login whose client-first message is the bytes up
//! to the first 0xff and whose client-final message is the rest, against a known and an
//! unknown user; 3: a PlainLoginModule JAAS line as the operator's configuration gives it.
//! Nothing may panic, and no malformed exchange may log in.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use runnel_security::sasl::ScramLookup;
use runnel_security::{SaslServer, ScramCredential, ScramLogin, ScramMechanism};

const JAAS: &str = "org.apache.kafka.common.security.plain.PlainLoginModule required user_alice=\"alice-secret\";";

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let lookup: ScramLookup = Arc::new(|user: &str, m: ScramMechanism| {
        (user == "alice").then(|| ScramCredential::new(m, b"salt-salt-salt-1", 4096, &m.salted_password(b"pw", b"salt-salt-salt-1", 4096)))
    });
    match mode % 4 {
        0 => {
            let server = SaslServer::new("PLAIN", &|_| JAAS.to_string(), lookup, &|_| String::new()).expect("a valid configuration");
            if let Ok(principal) = server.authenticate("PLAIN", rest) {
                assert_eq!(principal, "User:alice");
                assert!(rest.ends_with(b"\0alice\0alice-secret"), "logged in with {rest:?}");
            }
        }
        1 | 2 => {
            let m = if mode % 4 == 1 { ScramMechanism::Sha256 } else { ScramMechanism::Sha512 };
            let (first, last) = match rest.iter().position(|b| *b == 0xff) {
                Some(i) => (&rest[..i], &rest[i + 1..]),
                None => (rest, &[][..]),
            };
            if let Ok((login, server_first)) = ScramLogin::start(m, first, &*lookup) {
                assert!(server_first.starts_with(b"r="));
                // A fuzzed proof cannot know the server's fresh nonce.
                assert!(login.finish(last).is_err(), "logged in with a fuzzed client-final message");
            }
        }
        _ => {
            let jaas = String::from_utf8_lossy(rest).into_owned();
            let _ = SaslServer::new("PLAIN", &|_| jaas.clone(), lookup, &|_| String::new());
        }
    }
});
