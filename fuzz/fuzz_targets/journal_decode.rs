//! Fuzzes the store's on-disk decoders (journal records, checkpoint payload,
//! label, commit slot): damaged media must give an error, never a panic.
//! Run: cargo +nightly fuzz run journal_decode
#![no_main]

use libfuzzer_sys::fuzz_target;
use store::format::codec::Reader;
use store::journal::record::Record;

fuzz_target!(|data: &[u8]| {
    let mut r = Reader::new(data);
    while r.remaining() > 0 && Record::decode(&mut r).is_ok() {}
    let _ = store::meta::Meta::decode(data);
    let _ = store::format::label::Label::decode(data);
    let _ = store::format::slot::Slot::decode(data);
});
