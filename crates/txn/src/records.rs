//! Records of `__transaction_state`: the key is the transactional id, the value its whole
//! state (the latest record wins; a tombstone forgets an expired id). The value is JSON
//! behind a version byte, so a field can be added without breaking older logs. Read from
//! disk: every decode is checked, and a record that does not decode is skipped with a
//! warning by the caller.

use bytes::Bytes;

use crate::state::TxnMeta;

const KEY_VERSION: u8 = 0;
const VALUE_VERSION: u8 = 0;
/// Kafka's limit on a transactional id is the string length of the protocol (i16).
pub const TRANSACTIONAL_ID_BYTES_MAX: usize = i16::MAX as usize;

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut out = Vec::with_capacity(1 + transactional_id.len());
    out.push(KEY_VERSION);
    out.extend_from_slice(transactional_id.as_bytes());
    out.into()
}

pub fn decode_key(key: &[u8]) -> Result<String, String> {
    match key.split_first() {
        Some((&KEY_VERSION, id)) if id.len() <= TRANSACTIONAL_ID_BYTES_MAX => {
            String::from_utf8(id.to_vec()).map_err(|e| format!("transactional id: {e}"))
        }
        Some((v, _)) => Err(format!("unknown key version {v} or an id too long")),
        None => Err("empty key".into()),
    }
}

pub fn encode_value(meta: &TxnMeta) -> Bytes {
    let mut out = vec![VALUE_VERSION];
    // Serializing a struct of plain fields cannot fail.
    serde_json::to_writer(&mut out, meta).expect("transaction state serializes");
    out.into()
}

pub fn decode_value(value: &[u8]) -> Result<TxnMeta, String> {
    match value.split_first() {
        Some((&VALUE_VERSION, json)) => serde_json::from_slice(json).map_err(|e| format!("transaction state: {e}")),
        Some((v, _)) => Err(format!("unknown value version {v}")),
        None => Err("empty value".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let mut meta = TxnMeta::new(42, 60_000, 5);
        meta.state = State::Ongoing;
        meta.partitions.insert(("orders".into(), 3));
        assert_eq!(decode_value(&encode_value(&meta)), Ok(meta));
        assert_eq!(decode_key(&encode_key("app-1")), Ok("app-1".to_string()));
        for bad in [&b""[..], b"\x07x", b"\x00{", b"\x00{\"producer_id\":1}", b"\x00\xff\xfe"] {
            assert!(decode_value(bad).is_err(), "{bad:?}");
        }
        assert!(decode_key(b"").is_err());
        assert!(decode_key(b"\x01id").is_err());
        assert!(decode_key(b"\x00\xff").is_err());
    }
}
