//! The sweep: cubecl's own bench shape, a chain of dependent add-one
//! kernels ping-ponging between two buffers, issued and then synced.
//!
//! One file for every side that runs it: the benches' chain, and the peers
//! crate (outside the workspace) through `#[path]`; the Python peers keep a
//! copy of the table, which `benches/tests/torch_peer.rs` compares.

/// One row: how many elements each kernel adds one to, how many kernels
/// chain into a pass, and how many rounds are timed.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// Elements per kernel.
    pub elems: usize,
    /// Kernels per pass.
    pub kernels: usize,
    /// Timed rounds per path.
    pub rounds: usize,
    /// Whether the row is GPU-bound, where a replay must show about 1.0x.
    pub control: bool,
}

impl Row {
    fn new(elems: usize, kernels: usize, control: bool) -> Self {
        // About the same device work per row: fewer rounds where a pass is
        // long, at least three.
        let rounds = (50_000_000 / (elems * kernels).max(1)).clamp(3, 50);
        Self {
            elems,
            kernels,
            rounds,
            control,
        }
    }

    /// `4 Ki x100`, `1 Mi x100 (control)`.
    pub fn name(&self) -> String {
        let elems = match self.elems {
            e if e >= 1 << 20 && e % (1 << 20) == 0 => format!("{} Mi", e >> 20),
            e if e >= 1 << 10 && e % (1 << 10) == 0 => format!("{} Ki", e >> 10),
            e => e.to_string(),
        };
        let control = if self.control { " (control)" } else { "" };
        format!("{elems} x{}{control}", self.kernels)
    }
}

/// Every row: 256, 4 Ki and 64 Ki elements by 10, 100 and 1,000 kernels,
/// then the GPU-bound control.
pub fn all() -> Vec<Row> {
    let mut rows = Vec::new();
    for elems in [256, 4 << 10, 64 << 10] {
        for kernels in [10, 100, 1000] {
            rows.push(Row::new(elems, kernels, false));
        }
    }
    rows.push(Row::new(1 << 20, 100, true));
    rows
}

/// The short row CI runs so that the crate cannot rot.
pub fn short() -> Vec<Row> {
    vec![Row {
        elems: 256,
        kernels: 10,
        rounds: 3,
        control: false,
    }]
}
