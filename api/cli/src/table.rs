//! Tables for the client commands: columns are (header, JSON pointer) pairs
//! read from the server's JSON answers, padded to their widest cell. The
//! columns more than one command prints (an event log's) live here too.

use serde_json::Value;

/// A table's columns: header and the JSON pointer its cells come from.
pub type Cols = &'static [(&'static str, &'static str)];

/// The columns of recorded events: the audit log, a deployment's history,
/// and the events an admin or tenant command recorded.
pub(crate) const EVENT_COLS: Cols = &[
    ("POSITION", "/position"),
    ("TIME", "/recorded_at"),
    ("STREAM", "/stream_id"),
    ("EVENT", "/event_type"),
    ("ACTOR", "/actor"),
    ("REASON", "/reason"),
];

/// One cell: the value at a JSON pointer, `-` when absent or null.
pub fn cell(v: &Value, ptr: &str) -> String {
    match v.pointer(ptr) {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.1}"),
            _ => n.to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// Renders rows under headers, columns padded to their widest cell.
pub fn table(rows: &[Value], cols: Cols) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| cols.iter().map(|(_, p)| cell(r, p)).collect())
        .collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, (h, _))| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let line = |out: &mut String, items: Vec<&str>| {
        let parts: Vec<String> = items
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(&mut out, cols.iter().map(|(h, _)| *h).collect());
    for r in &cells {
        line(&mut out, r.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_pads_and_fills_missing_cells() {
        let rows = vec![json!({"a": "x", "b": 1}), json!({"a": "longer", "b": null})];
        let t = table(&rows, &[("A", "/a"), ("B", "/b")]);
        assert_eq!(t, "A       B\nx       1\nlonger  -\n");
    }
}
