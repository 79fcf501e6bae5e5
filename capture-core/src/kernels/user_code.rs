//! Running the caller's own code (a host kernel's closure, a foreign
//! operation's): a panic in it is a failure of that operation, never the
//! end of the thread that ran it.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What a panic says: its `&str` or `String` message, else "a panic".
pub fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Run a foreign operation's code: its `Err` as it is, a panic as an `Err`
/// that says so, for the backend to refuse the operation with.
pub fn run_foreign_code(code: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    catch_unwind(AssertUnwindSafe(code))
        .unwrap_or_else(|panic| Err(format!("it panicked: {}", panic_message(&*panic))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_pass_and_panics_say_what_they_said() {
        assert_eq!(run_foreign_code(|| Ok(())), Ok(()));
        assert_eq!(run_foreign_code(|| Err("no".into())), Err("no".into()));
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let with_str = run_foreign_code(|| panic!("deliberate"));
        let with_string = run_foreign_code(|| panic!("deliberate {}", 2));
        let with_other = run_foreign_code(|| std::panic::panic_any(7u8));
        std::panic::set_hook(hook);
        assert_eq!(with_str, Err("it panicked: deliberate".into()));
        assert_eq!(with_string, Err("it panicked: deliberate 2".into()));
        assert_eq!(with_other, Err("it panicked: a panic".into()));
    }
}
