//! The hasher of the core's maps.
//!
//! Every lookup on the replay and launch paths (a graph by id, a claim by
//! buffer id, launch info by content) goes through one of these maps, so
//! the hash is on the hot path. Keys are the core's own ids and short info
//! payloads, never attacker-chosen, so rustc's Fx hash (a multiply-rotate
//! over words, a few cycles) serves where the standard library's
//! DoS-resistant one takes tens of nanoseconds.

/// A map hashed with rustc's Fx hash.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// A set hashed with rustc's Fx hash.
pub type FastSet<K> = rustc_hash::FxHashSet<K>;
