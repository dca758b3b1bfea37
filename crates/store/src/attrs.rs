//! Attribute pages the store maintains itself (T10 OSD "information" and
//! "timestamps" pages). They are computed on read and refuse writes; user
//! attributes live on pages from [`FIRST_USER_PAGE`] up.

/// Lowest page users may write; pages below are the store's own.
pub const FIRST_USER_PAGE: u32 = 0x10;

/// Object information page.
pub const PAGE_INFO: u32 = 0x1;
/// Partition id (u64).
pub const INFO_PARTITION_ID: u32 = 0x1;
/// Object id (u64).
pub const INFO_OBJECT_ID: u32 = 0x2;
/// Used capacity in bytes (u64).
pub const INFO_USED_CAPACITY: u32 = 0x81;
/// Logical length in bytes (u64).
pub const INFO_LOGICAL_LENGTH: u32 = 0x82;
/// Object version for capability revocation (u64).
pub const INFO_VERSION: u32 = 0x83;

/// Timestamps page (all u64 nanoseconds since the Unix epoch).
pub const PAGE_TIMES: u32 = 0x3;
/// Creation time.
pub const TIME_CREATED: u32 = 0x1;
/// Attributes modification time.
pub const TIME_ATTR_MODIFIED: u32 = 0x3;
/// Data access time (relatime-like: persisted with checkpoints, not per read).
pub const TIME_DATA_ACCESSED: u32 = 0x4;
/// Data modification time.
pub const TIME_DATA_MODIFIED: u32 = 0x5;

/// Every (page, number) the store maintains, in order.
pub const STANDARD: [(u32, u32); 9] = [
    (PAGE_INFO, INFO_PARTITION_ID),
    (PAGE_INFO, INFO_OBJECT_ID),
    (PAGE_INFO, INFO_USED_CAPACITY),
    (PAGE_INFO, INFO_LOGICAL_LENGTH),
    (PAGE_INFO, INFO_VERSION),
    (PAGE_TIMES, TIME_CREATED),
    (PAGE_TIMES, TIME_ATTR_MODIFIED),
    (PAGE_TIMES, TIME_DATA_ACCESSED),
    (PAGE_TIMES, TIME_DATA_MODIFIED),
];
