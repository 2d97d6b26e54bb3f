//! The hasher of bprof's own tables: stack keys, frame keys, addresses.
//!
//! std's default (SipHash-1-3) is a large part of bprof's user-space CPU
//! (BENCHMARKS.md): the drains and symbolization hash every frame of every
//! stack a few times. This one folds a 64x64-bit multiply per
//! word instead. Its seed comes from std's random keys once per process, so
//! keys made of what profiled processes chose (their addresses) cannot be
//! picked to collide.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A std `HashMap` with [`FastState`].
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, FastState>;
/// A std `HashSet` with [`FastState`].
pub(crate) type HashSet<K> = std::collections::HashSet<K, FastState>;

/// Builds [`FastHasher`]s with this process's seed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FastState {
    seed: u64,
}

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            std::collections::hash_map::RandomState::new().hash_one(0x6270_726f_6600_u64)
        });
        FastState { seed }
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher { h: self.seed }
    }
}

/// Odd, with bits spread (2^64 / the golden ratio).
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

/// The 128-bit product's halves folded together: every input bit reaches
/// the output's high bits (hashbrown's tag) and its low bits (the bucket).
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

pub(crate) struct FastHasher {
    h: u64,
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.write_u64(u64::from_le_bytes(b));
        }
        let tail = words.remainder();
        if !tail.is_empty() {
            let mut b = [0u8; 8];
            b[..tail.len()].copy_from_slice(tail);
            // The tail's length in its unused top byte: "a" and "a\0" differ.
            self.write_u64(u64::from_le_bytes(b) ^ ((tail.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, x: u8) {
        self.write_u64(u64::from(x));
    }

    fn write_u16(&mut self, x: u16) {
        self.write_u64(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }

    fn write_u64(&mut self, x: u64) {
        // Plus x: a word equal to the state would fold to 0 and lose
        // every word before it.
        self.h = fold(self.h ^ x, MUL).wrapping_add(x);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        fold(self.h, MUL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_alike_and_near_keys_apart() {
        let s = FastState::default();
        assert_eq!(s.hash_one((7u32, [1u8; 20])), s.hash_one((7u32, [1u8; 20])));
        // Sequential keys (frames a few bytes apart in a file) spread over
        // the low bits a table indexes by and the high bits it tags with.
        let hashes: HashSet<u64> = (0..4096u64).map(|x| s.hash_one(x)).collect();
        assert_eq!(hashes.len(), 4096);
        let buckets: HashSet<u64> = (0..4096u64).map(|x| s.hash_one(x) & 4095).collect();
        assert!(buckets.len() > 2400, "{} of 4096 buckets", buckets.len());
        let tags: HashSet<u64> = (0..4096u64).map(|x| s.hash_one(x) >> 57).collect();
        assert_eq!(tags.len(), 128);
        assert_ne!(s.hash_one("a"), s.hash_one("a\0"));
    }
}
