//! Messages no correct peer sends, on which raft-rs panics, are refused by `Replica::step`
//! instead (found by the `raft_step` fuzz target, docs/fuzzing.md): the Raft port is
//! reachable from the network, and a panic in the driver stops the broker. Each input is a
//! transport frame as the fuzz target takes it, stepped into a new follower (Raft id 2 of
//! voters 1, 2, 3) with the driver's rounds after each message.

use runnel_raft::transport::decode_frame;
use runnel_raft::{Replica, ReplicaConfig};
use runnel_storage::LogConfig;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// Steps every message of `frame` into a fresh replica; returns how many were refused.
fn step_frame(frame: &[u8]) -> usize {
    let mut messages = Vec::new();
    let _ = decode_frame(&bytes::Bytes::copy_from_slice(frame), |e| messages.push(e));
    assert!(!messages.is_empty(), "the input decodes");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut replica =
        Replica::open(dir.path(), LogConfig::default(), &ReplicaConfig::new(2, vec![1, 2, 3]), 0).expect("open");
    let mut refused = 0;
    for (_, mut m) in messages {
        m.to = 2;
        if replica.step(m).is_err() {
            refused += 1;
        }
        let mut out = Vec::new();
        while let Ok(Some(c)) = replica.collect(0, &mut out) {
            replica.persisted(c, &mut out).expect("persisted");
        }
    }
    refused
}

#[test]
fn a_heartbeat_committing_past_the_log_is_refused() {
    // A heartbeat captured from a real cluster, stepped into an empty follower: raft-rs
    // panicked with "to_commit 4 is out of range".
    assert_eq!(step_frame(&unhex("00000000000000000000000a08081003180120014004")), 1);
}

#[test]
fn a_vote_request_in_term_zero_is_refused() {
    assert!(step_frame(&unhex("01647a00fe00000100000008080808051006102b2cafaf40afaf")) >= 1);
}

#[test]
fn an_append_whose_entries_skip_indexes_is_refused() {
    use protobuf::Message as _;
    use runnel_raft::Message;
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    m.from = 1;
    m.term = 1;
    m.index = 0;
    m.log_term = 0;
    m.commit = 3;
    m.mut_entries().push(raft::eraftpb::Entry { index: 3, term: 1, ..Default::default() });
    let body = m.write_to_bytes().expect("encode");
    let mut frame = 1u64.to_be_bytes().to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    assert_eq!(step_frame(&frame), 1);
}

#[test]
fn local_message_kinds_from_a_peer_are_refused() {
    // Heartbeats and a MsgReadIndexResp-like local kind with a term: raft-rs forwarded one
    // back out and panicked ("term should not be set when sending").
    let frame = unhex(concat!(
        "000000000300000300000008080810021801200100000000030000060000000808081002180120010000000003000009",
        "000000080808100218012001000000000300000c000000080808100218012001000000000300000f0000000808081002",
        "180120010000000003000012000000080808100218012001000000000300001500000008081008021801200100000000",
        "03000018000000080808100218012001000000000300001b000000080a08100218012001000000000300001e00000008",
        "08081002180120010000000003000021000000080808100218012001",
    ));
    assert!(step_frame(&frame) >= 1);
}

/// A MsgAppend from leader 1 in `term`, after entry `index` of `log_term`, with `entries`
/// as (index, term), as a transport frame.
fn append_frame(term: u64, index: u64, log_term: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    use protobuf::Message as _;
    use runnel_raft::Message;
    let mut m = Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgAppend);
    m.from = 1;
    m.term = term;
    m.index = index;
    m.log_term = log_term;
    for (index, term) in entries {
        m.mut_entries().push(raft::eraftpb::Entry { index: *index, term: *term, ..Default::default() });
    }
    let body = m.write_to_bytes().expect("encode");
    let mut frame = 1u64.to_be_bytes().to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

#[test]
fn an_append_after_an_entry_of_term_zero_is_refused() {
    // Found by raft_step: "after entry 1 of term 0" into an empty log matched (raft-rs
    // reads an index past its log as term 0), and appending entry 2 then panicked with
    // "unstable.slice[1, 2] out of bound[1, 1]".
    assert_eq!(step_frame(&append_frame(1, 1, 0, &[(2, 1)])), 1);
}

#[test]
fn appends_with_impossible_terms_are_refused() {
    assert_eq!(step_frame(&append_frame(1, 0, 2, &[])), 1, "previous entry's term past the leader's");
    assert_eq!(step_frame(&append_frame(2, 0, 0, &[(1, 3)])), 1, "an entry's term past the leader's");
    assert_eq!(step_frame(&append_frame(3, 0, 0, &[(1, 2), (2, 1)])), 1, "terms going down");
    assert_eq!(step_frame(&append_frame(3, 0, 0, &[(1, 0)])), 1, "an entry of term 0");
    // What a correct leader sends is taken.
    assert_eq!(step_frame(&append_frame(3, 0, 0, &[(1, 1), (2, 3), (3, 3)])), 0);
}
