//! Conditionals and loops inside a graph: which kind a node is, and the
//! bodies it holds as sub-recordings of their own.
//!
//! The condition is a `u32` in a device buffer, non-zero meaning true,
//! written by the caller's kernels; a node reads it each time the replay
//! reaches it (a loop, before each iteration).

/// What a conditional node does with its flag and its bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conditional {
    /// Run the one body when the flag is non-zero.
    If,
    /// Run the first body when the flag is non-zero, the second when it is
    /// zero.
    IfElse,
    /// Run the body while the flag is non-zero, checked before each
    /// iteration, at most `bound` times. A flag still set after the loop
    /// says the bound stopped it.
    While {
        /// Most iterations one run of the loop makes.
        bound: u32,
    },
}

impl Conditional {
    /// Bodies a node of this kind holds.
    pub fn bodies(self) -> usize {
        match self {
            Conditional::If | Conditional::While { .. } => 1,
            Conditional::IfElse => 2,
        }
    }

    /// The kind's name, as DOT and errors print it.
    pub fn name(self) -> &'static str {
        match self {
            Conditional::If => "if",
            Conditional::IfElse => "if/else",
            Conditional::While { .. } => "while",
        }
    }

    /// Most times a body of this kind runs per run of the node.
    pub fn most_runs(self) -> u32 {
        match self {
            Conditional::If | Conditional::IfElse => 1,
            Conditional::While { bound } => bound,
        }
    }
}

/// What a conditional did when it ran on the host's word, eagerly, or that
/// it was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// An `if` or `if/else` ran: which body (0 the first, 1 the `else`),
    /// or none.
    Branch(Option<usize>),
    /// A loop ran `iterations` times; `bound_reached` when its bound
    /// stopped it with the flag still set.
    Loop {
        /// Iterations made.
        iterations: u32,
        /// Whether the bound, not the flag, ended it.
        bound_reached: bool,
    },
    /// Recorded into the open capture window: each replay decides on the
    /// device. After a replay, a loop's flag still set says its bound
    /// stopped it.
    Recorded,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_know_their_bodies_names_and_runs() {
        assert_eq!(Conditional::If.bodies(), 1);
        assert_eq!(Conditional::IfElse.bodies(), 2);
        assert_eq!(Conditional::While { bound: 9 }.bodies(), 1);
        assert_eq!(Conditional::If.name(), "if");
        assert_eq!(Conditional::IfElse.name(), "if/else");
        assert_eq!(Conditional::While { bound: 9 }.name(), "while");
        assert_eq!(Conditional::If.most_runs(), 1);
        assert_eq!(Conditional::IfElse.most_runs(), 1);
        assert_eq!(Conditional::While { bound: 9 }.most_runs(), 9);
    }
}
