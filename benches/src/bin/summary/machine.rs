//! What the measurements ran on.

/// The CPU's model name and the number of cores the process may use.
pub fn describe() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let listed = cpuinfo
        .lines()
        .filter(|line| {
            line.split(':')
                .next()
                .is_some_and(|k| k.trim() == "processor")
        })
        .count();
    let usable = std::thread::available_parallelism().map_or(0, usize::from);
    match (listed, usable) {
        (0, usable) => format!("{model}, {usable} usable cores"),
        (listed, usable) if listed == usable => format!("{model}, {listed} cores"),
        (listed, usable) => format!("{model}, {listed} cores ({usable} usable by this process)"),
    }
}
