//! The hasher of the core's maps.
//!
//! Every lookup on the replay and launch paths (a graph by id, a stream by
//! id, a claim by buffer id, launch info by content) goes through one of
//! these maps, so the hash is on the hot path. Keys are the core's own ids
//! and short info payloads; a multiply-rotate hash does them in a few cycles
//! where the standard library's DoS-resistant one takes tens of nanoseconds.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher over 64-bit words.
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

const K: u64 = 0x9e37_79b9_7f4a_7c15;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map hashed with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A set hashed with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_keys_spread_and_equal_keys_agree() {
        let hash = |bytes: &[u8]| {
            let mut h = FastHasher::default();
            h.write(bytes);
            h.finish()
        };
        assert_eq!(hash(b"sixteen bytes!!!"), hash(b"sixteen bytes!!!"));
        assert_ne!(hash(b"sixteen bytes!!!"), hash(b"sixteen bytes!!?"));
        let hashes: FastSet<u64> = (0u64..1000)
            .map(|i| {
                let mut h = FastHasher::default();
                h.write_u64(i);
                h.finish()
            })
            .collect();
        assert_eq!(hashes.len(), 1000);
    }
}
