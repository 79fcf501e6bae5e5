//! The rows and their timing, the benches' chain's: shared file by file so
//! that this crate stays outside the workspace.

#[path = "../../benches/src/chain/measure.rs"]
pub mod measure;
#[path = "../../benches/src/chain/rows.rs"]
pub mod rows;
