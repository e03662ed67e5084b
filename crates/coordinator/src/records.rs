//! Records of the internal `__consumer_offsets` log, in Kafka's own layout so that the log
//! reads the same as Kafka's (key version 1: an offset commit; key version 2: group
//! metadata; a null value is a tombstone). KIP-848 groups use Kafka's key versions 3
//! (group) and 5 (member) with values in a layout of our own (version 0, below), one
//! record per member so that a change rewrites only that member.
//!
//! ```text
//! OffsetCommitKey v1     group string, topic string, partition i32
//! OffsetCommitValue v3   offset i64, leader_epoch i32, metadata string, commit_timestamp i64
//! GroupMetadataKey v2    group string
//! GroupMetadataValue v3  protocol_type string, generation i32, protocol string?, leader string?,
//!                        current_state_timestamp i64, members [member_id string,
//!                        group_instance_id string?, client_id string, client_host string,
//!                        rebalance_timeout i32, session_timeout i32, subscription bytes,
//!                        assignment bytes]
//! ConsumerGroupKey v3    group string
//! ConsumerGroupValue v0  group_epoch i32, assignment_epoch i32, assignor string,
//!                        topics [name string, id uuid, partitions i32]
//! ConsumerMemberKey v5   group string, member_id string
//! ShareGroupKey v11     group string
//! ShareGroupValue v0     group_epoch i32, topics [string]   (the topics it has read)
//! ConsumerMemberValue v0 epoch i32, instance_id string?, rack_id string?, client_id string,
//!                        client_host string, assignor string?, subscribed [string],
//!                        assigned [topic_id uuid, partition i32], target [same],
//!                        regex string?, matched [string], rebalance_timeout_ms i32
//! ```
//! Every decoder here reads bytes from disk: it returns an error, never panics.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("malformed offsets record: {0}")]
pub struct RecordError(&'static str);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Offset { group: String, topic: String, partition: i32 },
    Group { group: String },
    ConsumerGroup { group: String },
    ConsumerMember { group: String, member_id: String },
    ShareGroup { group: String },
}

/// A share group as the log keeps it: its epoch and the topics it has read (its members
/// join again after the coordinator moves).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareGroupValue {
    pub group_epoch: i32,
    pub topics: Vec<String>,
}

impl ShareGroupValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i32(self.group_epoch);
        b.put_i32(self.topics.len() as i32);
        for t in &self.topics {
            put_str(&mut b, t);
        }
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<ShareGroupValue, RecordError> {
        let mut r = Reader(raw);
        if r.i16()? != 0 {
            return Err(RecordError("unsupported share group version"));
        }
        let group_epoch = r.i32()?;
        let n = r.count(2)?;
        let topics = (0..n).map(|_| r.str()).collect::<Result<_, _>>()?;
        Ok(ShareGroupValue { group_epoch, topics })
    }
}

/// A KIP-848 group's own state (its members are separate records).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerGroupValue {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub topics: Vec<(String, uuid::Uuid, i32)>,
}

/// One KIP-848 member: who it is, what it subscribes to, what it was given and its target.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerMemberValue {
    pub epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub assignor: Option<String>,
    pub subscribed: Vec<String>,
    pub assigned: Vec<(uuid::Uuid, i32)>,
    pub target: Vec<(uuid::Uuid, i32)>,
    /// KIP-848 regular-expression subscription, and the topics it matched when written.
    pub regex: Option<String>,
    pub matched: Vec<String>,
    pub rebalance_timeout_ms: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<MemberValue>,
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn put_opt_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), RecordError> {
        if self.0.remaining() < n {
            return Err(RecordError("truncated"));
        }
        Ok(())
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    fn opt_str(&mut self) -> Result<Option<String>, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        self.need(len as usize)?;
        let raw = self.0.split_to(len as usize);
        String::from_utf8(raw.to_vec()).map(Some).map_err(|_| RecordError("string is not UTF-8"))
    }
    fn str(&mut self) -> Result<String, RecordError> {
        self.opt_str()?.ok_or(RecordError("null string"))
    }
    fn uuid(&mut self) -> Result<uuid::Uuid, RecordError> {
        self.need(16)?;
        let mut raw = [0u8; 16];
        self.0.copy_to_slice(&mut raw);
        Ok(uuid::Uuid::from_bytes(raw))
    }
    /// An array count, checked against what is left (each element takes at least `min` bytes).
    fn count(&mut self, min: usize) -> Result<usize, RecordError> {
        let n = self.i32()?;
        if n < 0 || (n as usize).saturating_mul(min) > self.0.remaining() {
            return Err(RecordError("bad array count"));
        }
        Ok(n as usize)
    }
    fn partitions(&mut self) -> Result<Vec<(uuid::Uuid, i32)>, RecordError> {
        let n = self.count(20)?;
        (0..n).map(|_| Ok((self.uuid()?, self.i32()?))).collect()
    }
    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        self.need(len as usize)?;
        Ok(self.0.split_to(len as usize))
    }
}

impl Key {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        match self {
            Key::Offset { group, topic, partition } => {
                b.put_i16(1);
                put_str(&mut b, group);
                put_str(&mut b, topic);
                b.put_i32(*partition);
            }
            Key::Group { group } => {
                b.put_i16(2);
                put_str(&mut b, group);
            }
            Key::ConsumerGroup { group } => {
                b.put_i16(3);
                put_str(&mut b, group);
            }
            Key::ConsumerMember { group, member_id } => {
                b.put_i16(5);
                put_str(&mut b, group);
                put_str(&mut b, member_id);
            }
            Key::ShareGroup { group } => {
                b.put_i16(11);
                put_str(&mut b, group);
            }
        }
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<Key, RecordError> {
        let mut r = Reader(raw);
        match r.i16()? {
            0 | 1 => Ok(Key::Offset { group: r.str()?, topic: r.str()?, partition: r.i32()? }),
            2 => Ok(Key::Group { group: r.str()? }),
            3 => Ok(Key::ConsumerGroup { group: r.str()? }),
            5 => Ok(Key::ConsumerMember { group: r.str()?, member_id: r.str()? }),
            11 => Ok(Key::ShareGroup { group: r.str()? }),
            _ => Err(RecordError("unknown key version")),
        }
    }

    pub fn group(&self) -> &str {
        match self {
            Key::Offset { group, .. }
            | Key::Group { group }
            | Key::ConsumerGroup { group }
            | Key::ConsumerMember { group, .. }
            | Key::ShareGroup { group } => group,
        }
    }
}

impl OffsetValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(3);
        b.put_i64(self.offset);
        b.put_i32(self.leader_epoch);
        put_str(&mut b, &self.metadata);
        b.put_i64(self.commit_timestamp);
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<OffsetValue, RecordError> {
        let mut r = Reader(raw);
        let version = r.i16()?;
        let offset = r.i64()?;
        let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
        let metadata = r.str()?;
        let commit_timestamp = r.i64()?;
        Ok(OffsetValue { offset, leader_epoch, metadata, commit_timestamp })
    }
}

impl GroupValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(3);
        put_str(&mut b, &self.protocol_type);
        b.put_i32(self.generation);
        put_opt_str(&mut b, self.protocol.as_deref());
        put_opt_str(&mut b, self.leader.as_deref());
        b.put_i64(self.state_timestamp);
        b.put_i32(self.members.len() as i32);
        for m in &self.members {
            put_str(&mut b, &m.member_id);
            put_opt_str(&mut b, m.group_instance_id.as_deref());
            put_str(&mut b, &m.client_id);
            put_str(&mut b, &m.client_host);
            b.put_i32(m.rebalance_timeout_ms);
            b.put_i32(m.session_timeout_ms);
            put_bytes(&mut b, &m.subscription);
            put_bytes(&mut b, &m.assignment);
        }
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<GroupValue, RecordError> {
        let mut r = Reader(raw);
        if r.i16()? != 3 {
            return Err(RecordError("unsupported group metadata version"));
        }
        let mut g = GroupValue {
            protocol_type: r.str()?,
            generation: r.i32()?,
            protocol: r.opt_str()?,
            leader: r.opt_str()?,
            state_timestamp: r.i64()?,
            members: Vec::new(),
        };
        let n = r.i32()?;
        if n < 0 || n as usize > r.0.remaining() {
            return Err(RecordError("bad member count"));
        }
        for _ in 0..n {
            g.members.push(MemberValue {
                member_id: r.str()?,
                group_instance_id: r.opt_str()?,
                client_id: r.str()?,
                client_host: r.str()?,
                rebalance_timeout_ms: r.i32()?,
                session_timeout_ms: r.i32()?,
                subscription: r.bytes()?,
                assignment: r.bytes()?,
            });
        }
        Ok(g)
    }
}

fn put_partitions(b: &mut BytesMut, tps: &[(uuid::Uuid, i32)]) {
    b.put_i32(tps.len() as i32);
    for (id, p) in tps {
        b.put_slice(id.as_bytes());
        b.put_i32(*p);
    }
}

impl ConsumerGroupValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i32(self.group_epoch);
        b.put_i32(self.assignment_epoch);
        put_str(&mut b, &self.assignor);
        b.put_i32(self.topics.len() as i32);
        for (name, id, n) in &self.topics {
            put_str(&mut b, name);
            b.put_slice(id.as_bytes());
            b.put_i32(*n);
        }
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<ConsumerGroupValue, RecordError> {
        let mut r = Reader(raw);
        if r.i16()? != 0 {
            return Err(RecordError("unsupported consumer group version"));
        }
        let (group_epoch, assignment_epoch, assignor) = (r.i32()?, r.i32()?, r.str()?);
        let n = r.count(22)?;
        let topics = (0..n).map(|_| Ok((r.str()?, r.uuid()?, r.i32()?))).collect::<Result<_, _>>()?;
        Ok(ConsumerGroupValue { group_epoch, assignment_epoch, assignor, topics })
    }
}

impl ConsumerMemberValue {
    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i32(self.epoch);
        put_opt_str(&mut b, self.instance_id.as_deref());
        put_opt_str(&mut b, self.rack_id.as_deref());
        put_str(&mut b, &self.client_id);
        put_str(&mut b, &self.client_host);
        put_opt_str(&mut b, self.assignor.as_deref());
        b.put_i32(self.subscribed.len() as i32);
        for t in &self.subscribed {
            put_str(&mut b, t);
        }
        put_partitions(&mut b, &self.assigned);
        put_partitions(&mut b, &self.target);
        put_opt_str(&mut b, self.regex.as_deref());
        b.put_i32(self.matched.len() as i32);
        for t in &self.matched {
            put_str(&mut b, t);
        }
        b.put_i32(self.rebalance_timeout_ms);
        b.freeze()
    }

    pub fn decode(raw: Bytes) -> Result<ConsumerMemberValue, RecordError> {
        let mut r = Reader(raw);
        if r.i16()? != 0 {
            return Err(RecordError("unsupported consumer member version"));
        }
        let mut v = ConsumerMemberValue {
            epoch: r.i32()?,
            instance_id: r.opt_str()?,
            rack_id: r.opt_str()?,
            client_id: r.str()?,
            client_host: r.str()?,
            assignor: r.opt_str()?,
            ..Default::default()
        };
        let n = r.count(2)?;
        v.subscribed = (0..n).map(|_| r.str()).collect::<Result<_, _>>()?;
        v.assigned = r.partitions()?;
        v.target = r.partitions()?;
        v.regex = r.opt_str()?;
        let n = r.count(2)?;
        v.matched = (0..n).map(|_| r.str()).collect::<Result<_, _>>()?;
        v.rebalance_timeout_ms = r.i32()?;
        Ok(v)
    }
}

/// Kafka's partition for a group: `abs(groupId.hashCode()) % partitions` with Java's
/// String.hashCode, so a group lands where Kafka would put it.
pub fn partition_for(group: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in group.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let k = Key::Offset { group: "g".into(), topic: "t".into(), partition: 3 };
        assert_eq!(Key::decode(k.encode()), Ok(k));
        let v = OffsetValue { offset: 42, leader_epoch: 0, metadata: "m".into(), commit_timestamp: 7 };
        assert_eq!(OffsetValue::decode(v.encode()), Ok(v));
        let g = GroupValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            state_timestamp: 9,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        assert_eq!(GroupValue::decode(g.encode()), Ok(g));
        let raw = Key::Group { group: "g".into() }.encode();
        assert_eq!(Key::decode(raw), Ok(Key::Group { group: "g".into() }));
        for k in
            [Key::ConsumerGroup { group: "g".into() }, Key::ConsumerMember { group: "g".into(), member_id: "m".into() }]
        {
            assert_eq!(Key::decode(k.encode()), Ok(k));
        }
        let id = uuid::Uuid::from_u128(7);
        let cg = ConsumerGroupValue {
            group_epoch: 4,
            assignment_epoch: 3,
            assignor: "uniform".into(),
            topics: vec![("t".into(), id, 6)],
        };
        assert_eq!(ConsumerGroupValue::decode(cg.encode()), Ok(cg));
        let m = ConsumerMemberValue {
            epoch: 3,
            instance_id: None,
            rack_id: Some("r1".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            assignor: Some("range".into()),
            subscribed: vec!["t".into()],
            assigned: vec![(id, 0), (id, 1)],
            target: vec![(id, 0)],
            regex: Some("t.*".into()),
            matched: vec!["t".into()],
            rebalance_timeout_ms: 300_000,
        };
        let raw = m.encode();
        assert_eq!(ConsumerMemberValue::decode(raw.clone()), Ok(m));
        for cut in 0..raw.len() {
            assert!(ConsumerMemberValue::decode(raw.slice(..cut)).is_err());
        }
    }

    #[test]
    fn truncated_or_garbage_records_are_errors() {
        let v = OffsetValue { offset: 42, leader_epoch: 0, metadata: "meta".into(), commit_timestamp: 7 }.encode();
        for cut in 0..v.len() {
            assert!(OffsetValue::decode(v.slice(..cut)).is_err());
        }
        assert!(Key::decode(Bytes::from_static(&[0, 9, 0])).is_err());
        assert!(GroupValue::decode(Bytes::from_static(&[0, 3, 0, 1, b'x', 0, 0, 0, 1, 255, 255, 255, 255])).is_err());
    }

    #[test]
    fn partition_matches_java_string_hash() {
        // "hello".hashCode() == 99162322 in Java.
        assert_eq!(partition_for("hello", 50), 99162322 % 50);
        assert_eq!(partition_for("", 50), 0);
    }
}
