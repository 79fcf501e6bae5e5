//! A small deterministic generator (xorshift64*), so the workloads' weights
//! are the same on every run and backend without a dependency.

/// The generator's state.
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed` (not zero).
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next value, uniform in [-1, 1).
    pub fn value(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
        (bits as f32 / (1u64 << 23) as f32) - 1.0
    }

    /// `n` values, each `offset + scale * value()`.
    pub fn vec(&mut self, n: u32, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.value()).collect()
    }
}
