//! What every SASL mechanism shares: how a failed login is told, and comparing secrets.

/// Why a login failed, as the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginError {
    /// Kafka's SASL_AUTHENTICATION_FAILED, with the message the client sees.
    Failed(&'static str),
}

/// Equal bytes, in time that depends on the lengths only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0)) as usize;
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_bytes_in_constant_time() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
