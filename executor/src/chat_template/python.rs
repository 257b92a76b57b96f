//! The Python behaviour chat templates rely on, for minijinja.
//!
//! Chat templates are written for Python's jinja2 as Hugging Face
//! `transformers.apply_chat_template` sets it up, and llama.cpp's engine copies
//! that setup. minijinja differs in a few places templates visibly depend on, so
//! this module supplies the Python side: `tojson` spaced and escaped like
//! `json.dumps` (transformers' filter, `ensure_ascii=False` by default), a
//! `strftime_now` on an injectable clock, the no-op `{% generation %}` tag, and
//! Python string/dict methods (minijinja-contrib's pycompat).

use std::fmt::Write as _;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

/// `value | tojson(ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`: transformers' filter, which is Python's `json.dumps` with
/// those arguments.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(if let Some(s) = v.as_str() {
            s.to_owned()
        } else {
            let n = i64::try_from(v.clone()).map_err(|_| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson indent must be an integer or a string, not {v}"),
                )
            })?;
            " ".repeat(usize::try_from(n).unwrap_or(0).min(64))
        }),
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_owned(),
                    b.as_str().unwrap_or_default().to_owned(),
                ),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson separators must be two strings",
                    ));
                }
            }
        }
        // json.dumps: (', ', ': ') without indent, (',', ': ') with it.
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let opts = JsonOpts {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    dump(&mut out, value, &opts, 0)?;
    Ok(Value::from(out))
}

struct JsonOpts {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// Deepest nesting `tojson` writes; deeper values are refused as Python refuses
/// circular ones.
const MAX_JSON_DEPTH: usize = 128;

fn not_serializable(value: &Value) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("Object of type {} is not JSON serializable", value.kind()),
    )
}

fn dump(out: &mut String, value: &Value, o: &JsonOpts, depth: usize) -> Result<(), Error> {
    if depth > MAX_JSON_DEPTH {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if value.is_integer() {
                write!(out, "{value}").ok();
            } else {
                let f = f64::try_from(value.clone())?;
                out.push_str(&py_float_repr(f));
            }
        }
        ValueKind::String => write_json_string(out, value.as_str().unwrap_or_default(), o),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, o, depth, '[', ']', &items, |out, item| {
                dump(out, item, o, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                pairs.push((json_key(&key)?, item));
            }
            if o.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, o, depth, '{', '}', &pairs, |out, (k, v)| {
                write_json_string(out, k, o);
                out.push_str(&o.key_sep);
                dump(out, v, o, depth + 1)
            })?;
        }
        _ => return Err(not_serializable(value)),
    }
    Ok(())
}

fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_owned(),
        ValueKind::None => "null".to_owned(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_owned(),
        ValueKind::Number => {
            let mut s = String::new();
            dump(
                &mut s,
                key,
                &JsonOpts {
                    ensure_ascii: false,
                    indent: None,
                    item_sep: String::new(),
                    key_sep: String::new(),
                    sort_keys: false,
                },
                0,
            )?;
            s
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "keys must be str, int, float, bool or None, not {}",
                    key.kind()
                ),
            ));
        }
    })
}

fn write_container<T>(
    out: &mut String,
    o: &JsonOpts,
    depth: usize,
    open: char,
    close: char,
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&o.item_sep);
        }
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..=depth {
                out.push_str(ind);
            }
        }
        write_item(out, item)?;
    }
    if let Some(ind) = &o.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
    out.push(close);
    Ok(())
}

/// A JSON string as `json.dumps` writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`,
/// `\f`, other control characters as `\u00XX`, and with `ensure_ascii` every
/// non-ASCII character (and DEL) as `\uXXXX`, astral ones as surrogate pairs.
fn write_json_string(out: &mut String, s: &str, o: &JsonOpts) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                write!(out, "\\u{:04x}", c as u32).ok();
            }
            c if o.ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    write!(out, "\\u{unit:04x}").ok();
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: the shortest round-tripping digits, positional for
/// exponents in -4..16, otherwise `d.ddde+XX`; `NaN`/`Infinity` as json.dumps
/// writes them.
fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_owned();
    }
    // `{:e}` gives the shortest round-tripping digits: "-1.2345e6".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if (point as usize) >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            let (a, b) = digits.split_at(point as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

/// `strftime_now(format)` at `now`, with Python's `strftime` directives.
pub(super) fn strftime(now: &chrono::NaiveDateTime, format: &str) -> Result<Value, Error> {
    let mut out = String::new();
    write!(out, "{}", now.format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(Value::from(out))
}

/// Python string, dict and list methods (`.strip()`, `.split()`, `.items()`,
/// `.get()`, ...) from minijinja-contrib. Anything else stays an unknown-method
/// error, as mutating methods (`.append`, `.pop`) are in transformers' immutable
/// sandbox.
pub(super) fn unknown_method(
    state: &State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// jinja2's `is iterable`: whatever `iter()` accepts, which includes undefined
/// (empty) but not none, unlike minijinja's test.
pub(super) fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::Undefined => true,
        ValueKind::None | ValueKind::Bool | ValueKind::Number | ValueKind::Invalid => false,
        ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map => true,
        _ => value.try_iter().is_ok(),
    }
}

/// jinja2's `is sequence`: whatever has a length and items, so strings, lists,
/// dicts and undefined, not none.
pub(super) fn is_sequence(value: &Value) -> bool {
    match value.kind() {
        ValueKind::Undefined
        | ValueKind::String
        | ValueKind::Bytes
        | ValueKind::Seq
        | ValueKind::Map => true,
        _ => value.len().is_some(),
    }
}

/// Prints `{{ value }}` as jinja2 does: none, true and false as Python writes
/// them (`None`, `True`, `False`); everything else as minijinja does.
pub(super) fn format_output(
    out: &mut minijinja::Output<'_>,
    state: &State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    let word = match value.kind() {
        ValueKind::None => "None",
        ValueKind::Bool if value.is_true() => "True",
        ValueKind::Bool => "False",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    out.write_str(word).map_err(Error::from)
}

/// Rewrites transformers' `{% generation %}` / `{% endgeneration %}` tags, which
/// mark the assistant's tokens for training masks and render their body
/// unchanged, into `{% if true %}` / `{% endif %}`: the same output, and the same
/// whitespace control (`-`, `+`, trim_blocks, lstrip_blocks) since the
/// delimiters are kept. Returns `None` when the source has no such tag.
pub(super) fn rewrite_generation_tags(source: &str) -> Option<String> {
    if !source.contains("generation") {
        return None;
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut changed = false;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start..start + len + 2];
        let inner = &tag[2..tag.len() - 2];
        let open_ctl = inner.starts_with(['-', '+']);
        let close_ctl = inner.ends_with(['-', '+']) && inner.len() > usize::from(open_ctl);
        let body = &inner[usize::from(open_ctl)..inner.len() - usize::from(close_ctl)];
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        out.push_str(&rest[..start]);
        match replacement {
            Some(r) => {
                changed = true;
                out.push_str("{%");
                out.push_str(&inner[..usize::from(open_ctl)]);
                out.push(' ');
                out.push_str(r);
                out.push(' ');
                out.push_str(&inner[inner.len() - usize::from(close_ctl)..]);
                out.push_str("%}");
            }
            None => out.push_str(tag),
        }
        rest = &rest[start + tag.len()..];
    }
    out.push_str(rest);
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_python_repr() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-2.25, "-2.25"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456789.0, "123456789.0"),
            (0.1, "0.1"),
        ] {
            assert_eq!(py_float_repr(f), s, "{f}");
        }
    }

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            rewrite_generation_tags("a{%- generation -%}b{% endgeneration %}c").as_deref(),
            Some("a{%- if true -%}b{% endif %}c")
        );
        assert_eq!(
            rewrite_generation_tags("{% if add_generation_prompt %}"),
            None
        );
    }
}
