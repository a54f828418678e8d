//! Small non-cryptographic hashes with fixed outputs: FNV-1a 64 for digests and identities that
//! must be stable everywhere, and the splitmix64 finalizer for jitter and ids.

/// FNV-1a 64 over bytes: a stable hash (unlike `DefaultHasher`) for digests and loop detection.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(FNV1A_OFFSET, bytes)
}

/// FNV-1a 64's starting value.
pub(crate) const FNV1A_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Continues an FNV-1a 64 hash with more bytes: hashing parts in turn equals hashing them joined.
pub(crate) fn fnv1a_extend(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A 64-bit finalizer (splitmix64) so consecutive seeds give unrelated jitter (and unrelated
/// trace and span ids).
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A second stable 64-bit hash, independent of FNV-1a: 8-byte words folded through the splitmix64
/// finalizer, seeded with the length. Two identities that must not collide use both.
pub(crate) fn words64(bytes: &[u8]) -> u64 {
    let mut hash = mix(bytes.len() as u64);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        hash = mix(hash ^ u64::from_le_bytes(word));
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    mix(hash ^ u64::from_le_bytes(tail))
}

/// Appends `bytes` as lowercase hex, two digits a byte (`{:016x}` of a `u64` is its big-endian
/// bytes), without the formatting machinery.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(2 * bytes.len());
    for byte in bytes {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_parts_in_turn_equals_hashing_them_joined() {
        let parts = fnv1a_extend(fnv1a_extend(FNV1A_OFFSET, b"NONE\0"), b"hello");
        assert_eq!(parts, fnv1a(b"NONE\0hello"));
    }

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn words64_sees_every_byte_and_the_length() {
        assert_ne!(words64(b""), words64(b"\0"));
        assert_ne!(words64(b"abcdefgh"), words64(b"abcdefgi"));
        assert_ne!(words64(b"abcdefghX"), words64(b"abcdefghY"));
        assert_eq!(words64(b"same input"), words64(b"same input"));
    }

    #[test]
    fn consecutive_seeds_mix_to_unrelated_values() {
        assert_ne!(mix(1) >> 32, mix(2) >> 32);
        assert_eq!(mix(7), mix(7));
    }

    #[test]
    fn hex_is_what_format_writes() {
        let mut out = String::from("x");
        push_hex(&mut out, &0x0123_4567_89ab_cdef_u64.to_be_bytes());
        assert_eq!(out, format!("x{:016x}", 0x0123_4567_89ab_cdef_u64));
    }
}
