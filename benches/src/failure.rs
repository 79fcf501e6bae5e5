//! What stops a measurement: a failed call or a wrong result.

use std::fmt;

use graph_capture::DriverError;

/// Why a measurement could not complete, said for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

/// A measurement's outcome.
pub type Result<T> = std::result::Result<T, Failure>;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<graph_capture::Error> for Failure {
    fn from(err: graph_capture::Error) -> Self {
        Self(err.to_string())
    }
}

impl From<DriverError> for Failure {
    fn from(err: DriverError) -> Self {
        Self(err.to_string())
    }
}
