//! Recognises what already lives on a device, so mkfs does not overwrite a
//! file system or another store by accident. Looks at the first 68 KiB only.

/// How many leading bytes [`detect`] needs.
pub const PROBE_LEN: usize = 68 * 1024;

/// Names what the first bytes of a device hold, if recognisable.
pub fn detect(head: &[u8]) -> Option<&'static str> {
    let at = |off: usize, magic: &[u8]| head.get(off..off + magic.len()) == Some(magic);
    if at(0, &super::label::LABEL_MAGIC) {
        return Some("a Tessera store");
    }
    if at(1080, &[0x53, 0xEF]) {
        return Some("an ext2/3/4 file system");
    }
    if at(0, b"XFSB") {
        return Some("an XFS file system");
    }
    if at(65600, b"_BHRfS_M") {
        return Some("a btrfs file system");
    }
    if at(0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume");
    }
    if at(4086, b"SWAPSPACE2") || at(4086, b"SWAP-SPACE") {
        return Some("a swap area");
    }
    if at(512, b"EFI PART") {
        return Some("a GPT partition table");
    }
    if at(0, b"\x28\xb5\x2f\xfd") || at(3, b"NTFS    ") || at(54, b"FAT") || at(82, b"FAT32") {
        return Some("a foreign file system");
    }
    if at(510, &[0x55, 0xAA]) {
        return Some("an MBR partition table or boot sector");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_ext4_and_xfs_and_blank() {
        let mut b = vec![0u8; PROBE_LEN];
        assert_eq!(detect(&b), None);
        b[1080] = 0x53;
        b[1081] = 0xEF;
        assert_eq!(detect(&b), Some("an ext2/3/4 file system"));
        let mut x = vec![0u8; PROBE_LEN];
        x[..4].copy_from_slice(b"XFSB");
        assert_eq!(detect(&x), Some("an XFS file system"));
    }
}
