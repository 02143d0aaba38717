//! float16 storage (`shader-f16`): where the device has it, a session holds float16 values as
//! two-byte `f16` elements instead of widened `f32` ones, halving their buffers, uploads and
//! readbacks. Kernels are generated for f32 (every float is f32 in their arithmetic, as the
//! reference kernels accumulate in f32); `with_half_bindings` retypes the bindings that hold
//! float16 storage and converts at the boundary: each load becomes `f32(in0[i])`, each store
//! `out0[i] = f16(v)`. Only the binding declarations and element accesses change, so every kernel
//! computes exactly what it computes on f32 storage, from the same float16 values.
//!
//! A store rounds f32 → f16 as the device rounds it (WGSL leaves the direction of an inexact
//! conversion to the implementation); a Cast to float16 rounds to nearest even first
//! (`F16_ROUND`), so its result converts exactly.

/// `src` with binding `in{i}` (for each true `reads[i]`) and `out{j}` (each true `writes[j]`)
/// declared `array<f16>` and converted at each access; `enable f16;` first. An error where such a
/// binding is not declared `array<f32>` (a kernel that reads the bits of its input as words).
pub fn with_half_bindings(src: &str, reads: &[bool], writes: &[bool]) -> Result<String, String> {
    let mut names: Vec<String> = Vec::new();
    for (i, _) in reads.iter().enumerate().filter(|(_, &h)| h) {
        names.push(format!("in{i}"));
    }
    for (j, _) in writes.iter().enumerate().filter(|(_, &h)| h) {
        names.push(format!("out{j}"));
    }
    if names.is_empty() {
        return Ok(src.to_string());
    }
    let mut text = src.to_string();
    for n in &names {
        let decl = format!(" {n}: array<f32>;");
        if !text.contains(&decl) {
            return Err(format!(
                "binding {n} holds float16 but the kernel does not declare it array<f32>"
            ));
        }
        text = text.replacen(&decl, &format!(" {n}: array<f16>;"), 1);
    }
    // The declarations are rewritten: accesses start after the last binding line.
    let body_at = text
        .rfind("var<storage")
        .and_then(|p| text[p..].find('\n').map(|e| p + e + 1))
        .unwrap_or(0);
    let body = rewrite(&text[body_at..], &names)?;
    Ok(format!("enable f16;\n{}{}", &text[..body_at], body))
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The index of the `]` matching the `[` at `open`.
fn closing(s: &[u8], open: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    for (k, &c) in s.iter().enumerate().skip(open) {
        match c {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(k);
                }
            }
            _ => {}
        }
    }
    Err("unbalanced [ in a kernel".into())
}

/// The end (exclusive) of the statement whose right-hand side starts at `from`: its `;` outside
/// parentheses and brackets.
fn statement_end(s: &[u8], from: usize) -> Result<usize, String> {
    let mut depth = 0i32;
    for (k, &c) in s.iter().enumerate().skip(from) {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return Ok(k),
            _ => {}
        }
    }
    Err("a store without its ';' in a kernel".into())
}

/// `s` with every access `N[idx]` of a name in `names` converted: a load → `f32(N[idx])`; a
/// store `N[idx] = v;` → `N[idx] = f16(v);`; `N[idx] op= v;` → `N[idx] = f16(f32(N[idx]) op (v));`.
/// Index and value are rewritten too (an index may load from another binding).
fn rewrite(s: &str, names: &[String]) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    let mut i = 0;
    while i < b.len() {
        let hit = (i == 0 || !is_ident(b[i - 1]))
            .then(|| {
                names.iter().find(|n| {
                    let e = i + n.len();
                    b[i..].starts_with(n.as_bytes()) && b.get(e) == Some(&b'[')
                })
            })
            .flatten();
        let Some(name) = hit else {
            let c = s[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
            continue;
        };
        let open = i + name.len();
        let close = closing(b, open)?;
        let access = format!("{name}[{}]", rewrite(&s[open + 1..close], names)?);
        let mut k = close + 1;
        while k < b.len() && b[k].is_ascii_whitespace() {
            k += 1;
        }
        let op = match (b.get(k), b.get(k + 1)) {
            (Some(b'='), Some(&n)) if n != b'=' => Some(None),
            (Some(&c @ (b'+' | b'-' | b'*' | b'/')), Some(b'=')) => Some(Some(c as char)),
            _ => None,
        };
        match op {
            None => {
                out.push_str(&format!("f32({access})"));
                i = close + 1;
            }
            Some(compound) => {
                let from = k + if compound.is_some() { 2 } else { 1 };
                let end = statement_end(b, from)?;
                let value = rewrite(s[from..end].trim(), names)?;
                match compound {
                    None => out.push_str(&format!("{access} = f16({value})")),
                    Some(c) => {
                        out.push_str(&format!("{access} = f16(f32({access}) {c} ({value}))"))
                    }
                }
                i = end;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: &str = "@group(0) @binding(0) var<storage, read> in0: array<f32>;
@group(0) @binding(1) var<storage, read> in1: array<i32>;
@group(0) @binding(2) var<storage, read_write> out0: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  let in00 = 1.0;
  out0[i] = in0[u32(in1[i])] * 2.0 + in00;
  out0[i + 1u] += in0[i];
  if (out0[i] == 0.0) { out0[i] = 1.0; }
}
";

    #[test]
    fn loads_widen_stores_narrow_and_other_bindings_stay() {
        let got = with_half_bindings(K, &[true, false], &[true]).unwrap();
        assert!(got.starts_with("enable f16;\n"));
        assert!(got.contains("in0: array<f16>;") && got.contains("out0: array<f16>;"));
        assert!(got.contains("in1: array<i32>;"));
        assert!(
            got.contains("out0[i] = f16(f32(in0[u32(in1[i])]) * 2.0 + in00);"),
            "{got}"
        );
        assert!(
            got.contains("out0[i + 1u] = f16(f32(out0[i + 1u]) + (f32(in0[i])));"),
            "{got}"
        );
        assert!(
            got.contains("if (f32(out0[i]) == 0.0) { out0[i] = f16(1.0); }"),
            "{got}"
        );
        // `in00` is another name: left alone.
        assert!(got.contains("let in00 = 1.0;"));
    }

    #[test]
    fn only_the_named_bindings_change() {
        assert_eq!(with_half_bindings(K, &[false, false], &[false]).unwrap(), K);
        let got = with_half_bindings(K, &[false, false], &[true]).unwrap();
        assert!(got.contains("in0: array<f32>;") && got.contains("* 2.0"));
        assert!(got.contains("out0[i] = f16(in0[u32(in1[i])] * 2.0 + in00);"));
    }

    #[test]
    fn a_binding_read_as_words_is_refused() {
        let e = with_half_bindings(K, &[false, true], &[false]).unwrap_err();
        assert!(e.contains("in1") && e.contains("array<f32>"), "{e}");
    }
}
