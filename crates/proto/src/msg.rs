//! Messages: the headers of Hello/Welcome/Request/Response frames, encoded
//! with postcard (a documented, stable, compact serde format). Bulk data is
//! never in a header: WRITE, APPEND and CREATE-AND-WRITE carry it as the
//! frame payload, READ returns it as the response payload.

use serde::{Deserialize, Serialize};

use crate::cap::Capability;
use crate::error::WireError;

/// Most attributes one get or set list may name.
pub const MAX_ATTR_LIST: usize = 1024;
/// Largest attribute value.
pub const MAX_ATTR_VALUE: usize = 64 * 1024;
/// Most entries one LIST may return.
pub const MAX_LIST: u32 = 10_000;
/// Most objects one CREATE may make.
pub const MAX_CREATE: u32 = 10_000;
/// Most attributes one GET PAGE may return.
pub const MAX_PAGE_ATTRS: u32 = 4096;
/// Value bytes after which a GET PAGE reply stops early (it always carries
/// at least one attribute).
pub const MAX_PAGE_BYTES: usize = 1 << 20;

/// Client's opening message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Protocol version the client speaks.
    pub version: u16,
    /// Cluster it expects.
    pub cluster_id: String,
    /// OSD it expects.
    pub osd_id: u32,
    /// Free-form client name for logs.
    pub client: String,
    /// Who the peer is ([`crate::auth`]).
    pub credential: crate::auth::Credential,
    /// The peer's fresh random nonce.
    pub nonce: [u8; crate::auth::NONCE_LEN],
    /// Whether the peer asks for encrypted frames.
    pub encrypt: bool,
}

/// Server's answer to [`Hello`] (after a challenge, to [`crate::auth::Proof`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Welcome {
    /// The credential is known: the server proves it holds the key and
    /// waits for the client's proof.
    Challenge {
        /// The server's fresh random nonce.
        nonce: [u8; crate::auth::NONCE_LEN],
        /// HMAC-SHA256 with the key over the transcript, labelled "server".
        proof: [u8; 32],
        /// Whether frames will be encrypted (asked by the client or
        /// required by the server).
        encrypt: bool,
    },
    /// Accepted: the limits the client must respect.
    Ok {
        /// Protocol version the server speaks.
        version: u16,
        /// Its cluster.
        cluster_id: String,
        /// Its id.
        osd_id: u32,
        /// Largest payload it accepts.
        max_payload: u32,
        /// Requests it processes at once per connection.
        max_in_flight: u32,
        /// Every address the service answers on (an MDS group's members';
        /// else empty). Clients keep 16 at most, ≤ 255 bytes each.
        peers: Vec<String>,
    },
    /// Refused (version, cluster or OSD mismatch); the server closes.
    Refused(WireError),
}

/// Attributes with their values, as carried in replies and set lists.
pub type AttrList = Vec<(AttrKey, Vec<u8>)>;

/// An attribute address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AttrKey {
    /// Page.
    pub page: u32,
    /// Number within the page.
    pub number: u32,
}

/// The commands (T10 OSD-2 plus the Ali et al. atomics).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Erase the OSD and make an empty store (right FORMAT).
    Format {
        /// Allocation policy: "extent" or "region".
        policy: String,
    },
    /// Create a partition (rights CREATE|PARTITION).
    CreatePartition {
        /// Partition id.
        pid: u64,
    },
    /// Remove an empty partition (rights REMOVE|PARTITION).
    RemovePartition {
        /// Partition id.
        pid: u64,
    },
    /// Create `count` objects: from `oid` upward, or ids the OSD picks.
    Create {
        /// Partition.
        pid: u64,
        /// First id, or `None` to let the OSD pick.
        oid: Option<u64>,
        /// How many (1 ..= MAX_CREATE).
        count: u32,
    },
    /// Remove an object.
    Remove {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Read `len` bytes at `offset` (short at the end).
    Read {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Byte offset.
        offset: u64,
        /// Bytes wanted.
        len: u32,
    },
    /// Write the payload at `offset`.
    Write {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Byte offset.
        offset: u64,
    },
    /// Append the payload; the reply says where.
    Append {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Create an object holding the payload, in one commit.
    CreateAndWrite {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Make everything acknowledged so far durable (it already is; this also
    /// flushes the device).
    Flush {
        /// Partition.
        pid: u64,
    },
    /// List object ids in `[lo, hi]` after `after`, with attributes per entry.
    List {
        /// Partition.
        pid: u64,
        /// Lowest id.
        lo: u64,
        /// Highest id.
        hi: u64,
        /// Continuation from the previous page.
        after: Option<u64>,
        /// Most entries.
        max: u32,
        /// Attributes to return for each entry.
        attrs: Vec<AttrKey>,
    },
    /// Get attributes (the request's get list; empty = all).
    GetAttributes {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Set attributes (the request's set list).
    SetAttributes {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Compare-and-swap one attribute (empty expected = insert if absent;
    /// empty new = remove if still equal). The old value is returned.
    Cas {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Attribute.
        key: AttrKey,
        /// Value expected.
        expected: Vec<u8>,
        /// Value to store.
        new: Vec<u8>,
    },
    /// Fetch-and-add on an 8-byte little-endian counter attribute.
    FetchAdd {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Attribute.
        key: AttrKey,
        /// Amount added (wrapping).
        delta: u64,
    },
    /// Set an object's version (revocation; right REVOKE).
    SetVersion {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// New version.
        version: u64,
    },
    /// Space and population of the OSD (no capability object range; right LIST).
    Statfs,
    /// Set an object's length: cut it, or extend it with a hole (right WRITE).
    Truncate {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// New length in bytes.
        len: u64,
    },
    /// The user attributes of one page in number order, after `after`, at
    /// most `max` (1 ..= MAX_PAGE_ATTRS) and about MAX_PAGE_BYTES of values
    /// (right GET_ATTR). How a directory on OSDs is listed (Ali et al.).
    GetPage {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Attribute page (a user page).
        page: u32,
        /// Continue after this number (exclusive); `None` = from the start.
        after: Option<u32>,
        /// Most attributes.
        max: u32,
    },
    /// An object's size and version, and with `deep` a digest of its
    /// whole content read through the store's block checksums (right
    /// READ): how scrub compares copies.
    Digest {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Read every byte (else size and version only).
        deep: bool,
    },
    /// Make `[offset, offset + len)` read as zeros, size unchanged: whole
    /// allocation units inside are unmapped and freed (right WRITE).
    /// `fallocate` PUNCH_HOLE and ZERO_RANGE.
    Punch {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// The byte ranges of an object that hold data (right READ):
    /// SEEK_DATA and SEEK_HOLE.
    DataRanges {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
    /// Reserve room for `[offset, offset + len)` without writing it or
    /// changing the size; a missing object is created empty (rights WRITE
    /// and CREATE). `fallocate` mode 0 and KEEP_SIZE.
    Reserve {
        /// Partition.
        pid: u64,
        /// Object.
        oid: u64,
        /// Byte offset.
        offset: u64,
        /// Bytes (1 ..= 2^48).
        len: u64,
    },
    /// Copy `len` bytes (at most [`MAX_COPY`]) of object `src_oid` at
    /// `src_offset` to object `oid` at `offset` on this OSD, the bytes
    /// never leaving it (`copy_file_range`). The request's capability
    /// covers the destination (rights WRITE and CREATE: a missing one is
    /// created); `src_cap` covers the source (right READ). Bytes past the
    /// source's end copy as zeros; the two ranges of one object must not
    /// overlap. Answers [`Reply::Copied`].
    Copy {
        /// Partition of both objects.
        pid: u64,
        /// Destination object.
        oid: u64,
        /// Destination byte offset.
        offset: u64,
        /// Source object.
        src_oid: u64,
        /// Source byte offset.
        src_offset: u64,
        /// Bytes.
        len: u32,
        /// The capability for the source (absent only on an insecure OSD).
        src_cap: Option<Box<Capability>>,
    },
    /// An effect passed down a replica chain by the member before this
    /// one (see [`crate::chain`]); the request's capability covers the
    /// effect's object in the group's partition and names the sender's
    /// principal. The request's set list and payload are the effect's.
    Forward(#[serde(deserialize_with = "crate::nesting::once")] Box<crate::chain::Forward>),
    /// Compare every copy of replica group `group`'s objects with the
    /// head's and repair those that differ (sent to the head, by the MDS;
    /// right READ and WRITE on the group's partition). `deep` compares
    /// every byte, else sizes, versions and attributes. Answers
    /// [`Reply::Scrubbed`].
    ScrubGroup {
        /// The group.
        group: u32,
        /// Compare content too.
        deep: bool,
    },
    /// Remove many objects of one partition, in one request (right REMOVE
    /// over the range from the least id to the greatest): how the MDS
    /// empties its delete queue. Ids that name no object are passed over;
    /// answers [`Reply::Removed`]. Not for a replica group's partition.
    RemoveObjects {
        /// Partition.
        pid: u64,
        /// Objects (1 ..= [`MAX_REMOVE_OBJECTS`]).
        oids: Vec<u64>,
    },
    /// (Chains: from the member before or the head.) The copy of `oid` the
    /// sender built in its staging partition ([`crate::chain::staging_partition`])
    /// replaces the object in group partition `pid`, in one store record.
    Install {
        /// The group's partition.
        pid: u64,
        /// Object.
        oid: u64,
    },
}

/// Most objects one REMOVE OBJECTS names.
pub const MAX_REMOVE_OBJECTS: usize = 4096;

/// Most bytes one COPY moves.
pub const MAX_COPY: u32 = 16 << 20;

/// Most ranges a DATA RANGES answer carries (the rest are reported as data).
pub const MAX_DATA_RANGES: usize = 65_536;

impl Command {
    /// The opcode carried in the frame prefix.
    pub fn opcode(&self) -> u16 {
        match self {
            Command::Format { .. } => 1,
            Command::CreatePartition { .. } => 2,
            Command::RemovePartition { .. } => 3,
            Command::Create { .. } => 4,
            Command::Remove { .. } => 5,
            Command::Read { .. } => 6,
            Command::Write { .. } => 7,
            Command::Append { .. } => 8,
            Command::CreateAndWrite { .. } => 9,
            Command::Flush { .. } => 10,
            Command::List { .. } => 11,
            Command::GetAttributes { .. } => 12,
            Command::SetAttributes { .. } => 13,
            Command::Cas { .. } => 14,
            Command::FetchAdd { .. } => 15,
            Command::SetVersion { .. } => 16,
            Command::Statfs => 17,
            Command::Truncate { .. } => 18,
            Command::GetPage { .. } => 19,
            Command::Digest { .. } => 20,
            Command::Punch { .. } => 21,
            Command::DataRanges { .. } => 22,
            Command::Reserve { .. } => 23,
            Command::Copy { .. } => 24,
            Command::Forward(_) => 25,
            Command::ScrubGroup { .. } => 26,
            Command::RemoveObjects { .. } => 27,
            Command::Install { .. } => 28,
        }
    }

    /// A short name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Format { .. } => "format",
            Command::CreatePartition { .. } => "create_partition",
            Command::RemovePartition { .. } => "remove_partition",
            Command::Create { .. } => "create",
            Command::Remove { .. } => "remove",
            Command::Read { .. } => "read",
            Command::Write { .. } => "write",
            Command::Append { .. } => "append",
            Command::CreateAndWrite { .. } => "create_and_write",
            Command::Flush { .. } => "flush",
            Command::List { .. } => "list",
            Command::GetAttributes { .. } => "get_attributes",
            Command::SetAttributes { .. } => "set_attributes",
            Command::Cas { .. } => "cas",
            Command::FetchAdd { .. } => "fetch_add",
            Command::SetVersion { .. } => "set_version",
            Command::Statfs => "statfs",
            Command::Truncate { .. } => "truncate",
            Command::GetPage { .. } => "get_page",
            Command::Digest { .. } => "digest",
            Command::Punch { .. } => "punch",
            Command::DataRanges { .. } => "data_ranges",
            Command::Reserve { .. } => "reserve",
            Command::Copy { .. } => "copy",
            Command::Forward(_) => "forward",
            Command::ScrubGroup { .. } => "scrub_group",
            Command::RemoveObjects { .. } => "remove_objects",
            Command::Install { .. } => "install",
        }
    }

    /// Whether repeating the command after a lost reply is harmless.
    pub fn idempotent(&self) -> bool {
        matches!(
            self,
            Command::Read { .. }
                | Command::Flush { .. }
                | Command::List { .. }
                | Command::GetAttributes { .. }
                | Command::Statfs
                | Command::Truncate { .. }
                | Command::GetPage { .. }
                | Command::Digest { .. }
                | Command::Punch { .. }
                | Command::DataRanges { .. }
                | Command::Reserve { .. }
                | Command::Copy { .. }
                | Command::ScrubGroup { .. }
                | Command::RemoveObjects { .. }
                | Command::Install { .. }
        )
    }

    /// Whether the command carries a payload.
    pub fn takes_payload(&self) -> bool {
        match self {
            Command::Forward(f) => f.op.takes_payload(),
            c => matches!(
                c,
                Command::Write { .. } | Command::Append { .. } | Command::CreateAndWrite { .. }
            ),
        }
    }

    /// The partition and object a command acts on, when it acts on one
    /// (a FORWARD's effect's).
    pub fn object(&self) -> Option<(u64, u64)> {
        match *self {
            Command::Create {
                pid,
                oid: Some(oid),
                ..
            }
            | Command::Remove { pid, oid }
            | Command::Read { pid, oid, .. }
            | Command::Write { pid, oid, .. }
            | Command::Append { pid, oid }
            | Command::CreateAndWrite { pid, oid }
            | Command::GetAttributes { pid, oid }
            | Command::SetAttributes { pid, oid }
            | Command::Cas { pid, oid, .. }
            | Command::FetchAdd { pid, oid, .. }
            | Command::SetVersion { pid, oid, .. }
            | Command::Truncate { pid, oid, .. }
            | Command::GetPage { pid, oid, .. }
            | Command::Digest { pid, oid, .. }
            | Command::Punch { pid, oid, .. }
            | Command::DataRanges { pid, oid }
            | Command::Reserve { pid, oid, .. }
            | Command::Install { pid, oid }
            | Command::Copy { pid, oid, .. } => Some((pid, oid)),
            Command::Forward(ref f) => f.op.object(),
            _ => None,
        }
    }

    /// The command with its partition replaced by `pid` (a command that
    /// names none, or a FORWARD, is returned unchanged): how a client of a
    /// replica group addresses the group's partition.
    pub fn in_partition(mut self, to: u64) -> Command {
        match &mut self {
            Command::Create { pid, .. }
            | Command::Remove { pid, .. }
            | Command::Read { pid, .. }
            | Command::Write { pid, .. }
            | Command::Append { pid, .. }
            | Command::CreateAndWrite { pid, .. }
            | Command::Flush { pid }
            | Command::List { pid, .. }
            | Command::GetAttributes { pid, .. }
            | Command::SetAttributes { pid, .. }
            | Command::Cas { pid, .. }
            | Command::FetchAdd { pid, .. }
            | Command::SetVersion { pid, .. }
            | Command::Truncate { pid, .. }
            | Command::GetPage { pid, .. }
            | Command::Digest { pid, .. }
            | Command::Punch { pid, .. }
            | Command::DataRanges { pid, .. }
            | Command::Reserve { pid, .. }
            | Command::Copy { pid, .. }
            | Command::Install { pid, .. }
            | Command::RemoveObjects { pid, .. } => *pid = to,
            Command::Format { .. }
            | Command::CreatePartition { .. }
            | Command::RemovePartition { .. }
            | Command::Statfs
            | Command::ScrubGroup { .. }
            | Command::Forward(_) => {}
        }
        self
    }

    /// The partition a command names (a FORWARD's effect's).
    pub fn partition(&self) -> Option<u64> {
        match *self {
            Command::Create { pid, .. }
            | Command::Flush { pid }
            | Command::List { pid, .. }
            | Command::RemoveObjects { pid, .. } => Some(pid),
            Command::Forward(ref f) => f.op.partition(),
            Command::ScrubGroup { group, .. } => Some(crate::chain::group_partition(group)),
            ref c => c.object().map(|(p, _)| p),
        }
    }
}

/// A request header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The capability authorising it (absent only on an insecure OSD).
    pub cap: Option<Capability>,
    /// The caller's id for this request, the same on every retry of it
    /// (0 = none): a replica chain answers a retry of a change it already
    /// made with the answer it gave, not by making it again.
    pub id: u64,
    /// What to do.
    pub cmd: Command,
    /// Attributes to return with the reply (any command on one object).
    pub get: Vec<AttrKey>,
    /// Attributes to set after the command succeeds (any command on one object).
    pub set: Vec<(AttrKey, Vec<u8>)>,
}

/// What a successful command returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    /// Done.
    Done,
    /// Objects created.
    Created(Vec<u64>),
    /// Data read (in the payload); the object's size at the time.
    Read {
        /// Logical size of the object.
        size: u64,
    },
    /// Where an append landed.
    Appended {
        /// Offset.
        offset: u64,
    },
    /// A page of ids with their requested attributes.
    Listed {
        /// Entries: id and attributes (absent ones omitted).
        entries: Vec<(u64, AttrList)>,
        /// Continuation, if more.
        next: Option<u64>,
    },
    /// Outcome of a compare-and-swap.
    Cas {
        /// Whether it swapped.
        swapped: bool,
        /// Value before.
        old: Vec<u8>,
    },
    /// Counter value before a fetch-and-add.
    FetchAdd {
        /// Old value.
        old: u64,
    },
    /// A page of attributes (GET PAGE).
    Page {
        /// (number, value) in number order.
        attrs: Vec<(u32, Vec<u8>)>,
        /// Continuation (`after` of the next call), if more.
        next: Option<u32>,
    },
    /// Space of the OSD.
    Statfs {
        /// Data bytes.
        total_bytes: u64,
        /// Free bytes.
        free_bytes: u64,
        /// Objects.
        objects: u64,
    },
    /// An object's size, version and (deep) content digest.
    Digest {
        /// Logical size.
        size: u64,
        /// Capability version.
        version: u64,
        /// xxh3-64 of the content (zeros for holes); 0 when not deep.
        hash: u64,
    },
    /// Where an object holds data: (offset, len) in order, at most
    /// [`MAX_DATA_RANGES`] (the last then runs to the object's end).
    DataRanges(Vec<(u64, u64)>),
    /// Bytes a COPY wrote to the destination.
    Copied {
        /// Bytes.
        len: u32,
    },
    /// What a SCRUB GROUP found.
    Scrubbed {
        /// Objects compared.
        objects: u64,
        /// Copies compared (the head's not counted).
        copies: u64,
        /// Copies that differed from the head's, or were missing or extra.
        inconsistent: u64,
        /// Of those, repaired from the head's.
        repaired: u64,
        /// One line per problem, at most 100.
        problems: Vec<String>,
    },
    /// What a REMOVE OBJECTS removed.
    Removed {
        /// Objects removed.
        removed: u32,
        /// Ids that named no object.
        absent: u32,
    },
}

/// A response header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// Outcome.
    pub result: Result<Reply, WireError>,
    /// Attributes asked for in the request's get list (or all, for GET ATTRIBUTES).
    pub attrs: Vec<(AttrKey, Vec<u8>)>,
}

/// Encodes a header.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v)
        .unwrap_or_else(|e| unreachable!("postcard cannot fail on owned data: {e}"))
}

/// Decodes a header; trailing bytes are an error.
pub fn decode<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, WireError> {
    crate::nesting::take_refusal();
    let (v, rest) = postcard::take_from_bytes(b).map_err(|e| {
        if crate::nesting::take_refusal() {
            WireError::bad("header", crate::nesting::REFUSAL)
        } else {
            WireError::bad("header", e)
        }
    })?;
    if !rest.is_empty() {
        return Err(WireError::bad(
            "header",
            format!("{} trailing bytes", rest.len()),
        ));
    }
    Ok(v)
}

impl Request {
    /// Checks the bounds the protocol sets on a request.
    pub fn validate(&self, payload_len: usize) -> Result<(), WireError> {
        if self.get.len() > MAX_ATTR_LIST || self.set.len() > MAX_ATTR_LIST {
            return Err(WireError::bad(
                "attribute list",
                format!("more than {MAX_ATTR_LIST} entries"),
            ));
        }
        if let Some((k, v)) = self.set.iter().find(|(_, v)| v.len() > MAX_ATTR_VALUE) {
            return Err(WireError::bad(
                "attribute value",
                format!(
                    "{}:{} is {} bytes, limit {MAX_ATTR_VALUE}",
                    k.page,
                    k.number,
                    v.len()
                ),
            ));
        }
        if payload_len > 0 && !self.cmd.takes_payload() {
            return Err(WireError::bad(
                "payload",
                format!("{} takes no payload", self.cmd.name()),
            ));
        }
        match &self.cmd {
            Command::RemoveObjects { oids, .. }
                if oids.is_empty() || oids.len() > MAX_REMOVE_OBJECTS =>
            {
                Err(WireError::bad(
                    "oids",
                    format!("{} objects, not in 1..={MAX_REMOVE_OBJECTS}", oids.len()),
                ))
            }
            Command::RemoveObjects { pid, .. } if crate::chain::partition_group(*pid).is_some() => {
                Err(WireError::bad(
                    "partition",
                    format!("{pid:#x} is a replica group's: remove its objects one by one"),
                ))
            }
            Command::Install { pid, .. } if crate::chain::partition_group(*pid).is_none() => {
                Err(WireError::bad(
                    "partition",
                    format!("{pid:#x} is not a replica group's: nothing is staged for it"),
                ))
            }
            Command::Create { count, .. } if *count == 0 || *count > MAX_CREATE => Err(
                WireError::bad("count", format!("{count} not in 1..={MAX_CREATE}")),
            ),
            Command::List { max, attrs, .. } if *max > MAX_LIST || attrs.len() > MAX_ATTR_LIST => {
                Err(WireError::bad(
                    "max",
                    format!("lists return at most {MAX_LIST} entries"),
                ))
            }
            Command::GetPage { max, .. } if *max == 0 || *max > MAX_PAGE_ATTRS => Err(
                WireError::bad("max", format!("{max} not in 1..={MAX_PAGE_ATTRS}")),
            ),
            Command::Reserve { len, .. } if *len == 0 || *len > 1 << 48 => Err(WireError::bad(
                "len",
                format!("a reservation of {len} bytes is not in 1..=2^48"),
            )),
            Command::Copy { len, .. } if *len == 0 || *len > MAX_COPY => Err(WireError::bad(
                "len",
                format!("a copy of {len} bytes is not in 1..={MAX_COPY}"),
            )),
            Command::Copy {
                oid,
                offset,
                src_oid,
                src_offset,
                len,
                ..
            } if oid == src_oid
                && *offset < src_offset.saturating_add(u64::from(*len))
                && *src_offset < offset.saturating_add(u64::from(*len)) =>
            {
                Err(WireError::bad(
                    "copy",
                    "the source and destination ranges of one object overlap",
                ))
            }
            Command::Forward(f) if matches!(f.op, Command::Forward(_)) => Err(WireError::bad(
                "forward",
                "a forwarded effect cannot itself be a forward",
            )),
            Command::Forward(f) => Request {
                cap: None,
                id: 0,
                cmd: f.op.clone(),
                get: Vec::new(),
                set: self.set.clone(),
            }
            .validate(payload_len),
            Command::Cas { expected, new, .. }
                if expected.len() > MAX_ATTR_VALUE || new.len() > MAX_ATTR_VALUE =>
            {
                Err(WireError::bad(
                    "cas value",
                    format!("limit {MAX_ATTR_VALUE} bytes"),
                ))
            }
            _ => Ok(()),
        }
    }
}
