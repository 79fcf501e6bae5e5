//! A graph drawn as Graphviz DOT: a node per recorded operation and the
//! edges of its dependency graph.

use std::fmt::Write as _;

use crate::kernels::signature::Access;
use crate::recorded::conditional::Conditional;
use crate::recorded::dependencies::Dependencies;
use crate::recorded::entries::{Entry, edges};

/// `log` as a Graphviz digraph named `name`: a node per operation, an
/// edge per edge of its dependency graph, labelled with the buffers and
/// kinds of the hazards behind it. A conditional is a diamond reading its
/// flag, with each body drawn as a cluster holding its own dependency graph.
pub fn dot(name: &str, log: &[Entry]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph \"{}\" {{", escape(name));
    let _ = writeln!(out, "  rankdir=TB;");
    let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
    draw(&mut out, log, "n", 1);
    out.push_str("}\n");
    out
}

/// The nodes and edges of `log`, each node named `prefix` and its place,
/// indented `depth` levels.
fn draw(out: &mut String, log: &[Entry], prefix: &str, depth: usize) {
    let pad = "  ".repeat(depth);
    for (i, entry) in log.iter().enumerate() {
        let node = format!("{prefix}{i}");
        let (label, shape) = match entry {
            Entry::Launch {
                kernel,
                groups,
                bindings,
                info_bytes,
                param_bytes,
                ..
            } => {
                let mut label = format!(
                    "{i}: {} [{}x{}x{}]",
                    escape(kernel),
                    groups[0],
                    groups[1],
                    groups[2]
                );
                for (span, access) in bindings {
                    let _ = write!(label, "\\n{} {span}", short(*access));
                }
                if *info_bytes > 0 {
                    let _ = write!(label, "\\ninfo {info_bytes} B");
                }
                if *param_bytes > 0 {
                    let _ = write!(label, "\\nparams {param_bytes} B");
                }
                (label, "box")
            }
            Entry::Write { span } => (format!("{i}: write {} B\\nw {span}", span.len), "note"),
            Entry::Conditional { kind, flag, bodies } => {
                let mut label = format!("{i}: {} {flag} != 0", kind.name());
                if let Conditional::While { bound } = kind {
                    let _ = write!(label, "\\nat most {bound}");
                }
                for (b, body) in bodies.iter().enumerate() {
                    let _ = writeln!(out, "{pad}subgraph cluster_{node}_{b} {{");
                    let what = if b == 0 { "body" } else { "else" };
                    let _ = writeln!(out, "{pad}  label=\"{i}: {what}\";");
                    draw(out, body, &format!("{node}_{b}_"), depth + 1);
                    let _ = writeln!(out, "{pad}}}");
                    if let Some(first) = (!body.is_empty()).then(|| format!("{node}_{b}_0")) {
                        let _ = writeln!(out, "{pad}{node} -> {first} [style=dashed];");
                    }
                }
                (label, "diamond")
            }
        };
        let _ = writeln!(out, "{pad}{node} [label=\"{label}\", shape={shape}];");
    }
    // The dependency graph's edges, each labelled with every hazard between
    // its two operations.
    let hazards = edges(log);
    for (from, to) in Dependencies::of(log).edges {
        let label: Vec<String> = hazards
            .iter()
            .filter(|e| (e.from, e.to) == (from, to))
            .map(|e| format!("{} {}", e.hazard.short(), e.buffer))
            .collect();
        let _ = writeln!(
            out,
            "{pad}{prefix}{from} -> {prefix}{to} [label=\"{}\"];",
            label.join("\\n")
        );
    }
}

fn short(access: Access) -> &'static str {
    match access {
        Access::Read => "r",
        Access::Write => "w",
        Access::ReadWrite => "rw",
    }
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::ids::BufferId;

    use crate::recorded::entries::test_launch as launch;

    #[test]
    fn dot_names_every_node_and_edge() {
        let log = vec![
            Entry::Write {
                span: crate::kernels::span::Span::whole(BufferId(1), 8),
            },
            launch("k\"1", &[(1, Access::Read), (2, Access::Write)]),
        ];
        let text = dot("graph 1", &log);
        assert!(text.starts_with("digraph \"graph 1\" {"));
        assert!(text.contains("n0 [label=\"0: write 8 B\\nw buffer 1 [0..8)\", shape=note];"));
        assert!(
            text.contains(
                "1: k\\\"1 [2x1x1]\\nr buffer 1 [0..64)\\nw buffer 2 [0..64)\\ninfo 16 B"
            )
        );
        assert!(text.contains("n0 -> n1 [label=\"RAW buffer 1\"];"));
        assert!(text.trim_end().ends_with('}'));
    }

    #[test]
    fn dot_draws_each_body_as_a_cluster_with_its_own_edges() {
        use Access::{Read, ReadWrite, Write};
        let flag = crate::kernels::span::Span::whole(BufferId(9), 4);
        let inner = Entry::Conditional {
            kind: Conditional::If,
            flag,
            bodies: vec![vec![launch("x", &[(3, Write)])]],
        };
        let log = vec![
            launch("a", &[(1, Write)]),
            Entry::Conditional {
                kind: Conditional::While { bound: 8 },
                flag,
                bodies: vec![vec![
                    launch("b", &[(1, ReadWrite)]),
                    launch("c", &[(1, Read), (9, Write)]),
                    inner,
                ]],
            },
        ];
        let text = dot("g", &log);
        assert!(
            text.contains("\n  subgraph cluster_n1_0 {\n    label=\"1: body\";"),
            "{text}"
        );
        assert!(
            text.contains("\n      n1_0_2_0_0 [label="),
            "three levels in: {text}"
        );
        assert!(text.contains("subgraph cluster_n1_0_2_0 {"), "{text}");
        assert!(
            text.contains(
                "n1 [label=\"1: while buffer 9 [0..4) != 0\\nat most 8\", shape=diamond];"
            ),
            "{text}"
        );
        assert!(
            text.contains("n1_0_0 -> n1_0_1 [label=\"RAW buffer 1\"];"),
            "{text}"
        );
        assert!(
            text.contains("n1_0_1 -> n1_0_2 [label=\"RAW buffer 9\"];"),
            "{text}"
        );
        assert!(text.contains("n1 -> n1_0_0 [style=dashed];"), "{text}");
        assert!(
            text.contains("n0 -> n1 [label=\"RAW buffer 1\"];"),
            "{text}"
        );
        assert_eq!(Entry::count(&log), (4, 0, 2));
        let both = Entry::Conditional {
            kind: Conditional::IfElse,
            flag,
            bodies: vec![
                vec![launch("t", &[(3, Write)]), launch("u", &[(4, Write)])],
                vec![
                    launch("e", &[(3, Write)]),
                    Entry::Write { span: flag },
                    Entry::Write { span: flag },
                    log[1].clone(),
                ],
            ],
        };
        let text = dot("g", std::slice::from_ref(&both));
        assert!(
            text.contains("label=\"0: body\";") && text.contains("label=\"0: else\";"),
            "{text}"
        );
        assert_eq!(
            Entry::count(&[both]),
            (6, 2, 3),
            "every body's, nested ones too"
        );
    }

    #[test]
    fn dot_draws_no_edge_another_path_implies() {
        use Access::{Read, ReadWrite, Write};
        let log = vec![
            launch("a", &[(1, Write)]),
            launch("b", &[(1, ReadWrite)]),
            launch("c", &[(1, Read)]),
        ];
        let text = dot("g", &log);
        assert!(
            text.contains("n0 -> n1 [label=\"RAW buffer 1\"];"),
            "{text}"
        );
        assert!(
            text.contains("n1 -> n2 [label=\"RAW buffer 1\"];"),
            "{text}"
        );
        assert!(!text.contains("n0 -> n2"), "implied through b: {text}");
    }

    #[test]
    fn dot_names_the_info_and_params_a_launch_passes_and_no_others() {
        let mut with_params = launch("p", &[(1, Access::Write)]);
        if let Entry::Launch {
            info_bytes,
            param_bytes,
            ..
        } = &mut with_params
        {
            (*info_bytes, *param_bytes) = (0, 8);
        }
        let text = dot("g", &[with_params, launch("i", &[(2, Access::Write)])]);
        assert!(
            text.contains("0: p [2x1x1]\\nw buffer 1 [0..64)\\nparams 8 B\""),
            "{text}"
        );
        assert!(
            text.contains("1: i [2x1x1]\\nw buffer 2 [0..64)\\ninfo 16 B\""),
            "{text}"
        );
    }
}
