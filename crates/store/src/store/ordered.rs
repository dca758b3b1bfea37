//! Attributes set in journal order without waiting for them: a replica
//! chain marks each object with the change it last took this way (see
//! `osd::chain::stamp`). The journal keeps a prefix of what was logged
//! across a crash, so a change logged after the mark is never durable
//! without it, and the caller pays no flush of its own.

use super::objects::{attr_records, check_attr};
use super::{Store, commit, now_ns};
use crate::error::Result;

impl Store {
    /// Sets user attribute `(page, number)` of object `(pid, oid)` to
    /// `value` in journal order and returns without waiting for it to be
    /// durable: whatever is logged after it survives a crash only with it.
    /// It does not count against the object's attribute limit (it replaces
    /// itself). `Ok(false)` when the object does not exist.
    pub fn set_attr_ordered(
        &self,
        pid: u64,
        oid: u64,
        (page, number): (u32, u32),
        value: &[u8],
    ) -> Result<bool> {
        super::objects::check_ids(pid, oid)?;
        check_attr(page, number, value)?;
        let mut st = self.inner.lock_ok()?;
        if !st.meta.objects.contains_key(&(pid, oid)) {
            return Ok(false);
        }
        let recs = attr_records(pid, oid, &[((page, number), value.to_vec())], now_ns());
        commit::log(&self.inner, &mut st, &recs)?;
        Ok(true)
    }
}
