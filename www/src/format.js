// Text the page shows: attribute values in short form, and why parity could not be checked.

/**
 * Rust prints an f32 in full positional form: mask_filter_value -3.4028235e38 comes out as 39
 * digits. Numbers that can only be floats (a decimal point with many digits, or an integer
 * longer than any int64) are rewritten in the shortest form that reads back to the same f32,
 * with an exponent when large or small. Integers an int64 can hold stay as they are.
 */
export function shortNumbers(text) {
  return text.replace(/-?\d+(?:\.\d+)?(?:e[+-]?\d+)?/gi, (tok) => {
    const digits = tok.replace(/^-/, "").replace(/\./, "");
    const isFloat = tok.includes(".") || /e/i.test(tok) || digits.length > 19;
    if (!isFloat || digits.length <= 9) return tok;
    return shortFloat(Number(tok));
  });
}

export function shortFloat(v) {
  if (!Number.isFinite(v) || v === 0) return String(v);
  const f = Math.fround(v);
  const exp = Math.abs(v) >= 1e6 || Math.abs(v) < 1e-4;
  for (let p = 1; p <= 9; p++) {
    const s = exp ? v.toExponential(p - 1) : v.toPrecision(p);
    if (Math.fround(Number(s)) === f) return exp ? s.replace("e+", "e") : String(Number(s));
  }
  return String(v);
}

/** An op as "Op (domain)" from the wasm, shown without the default domain. */
const shortOp = (s) => s.replace(/ \((ai\.onnx)?\)$/, "");

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/**
 * A partial parity check (`parity.partial`: the reference backend lacks some ops) in the page's
 * words: `{ summary, detail }`, naming the ops and what was and was not compared.
 */
export function partialParity(parity) {
  const left = parity.partial;
  const ops = left.missing_ops.map(shortOp);
  const not = [];
  if (left.unchecked_outputs.length) {
    not.push(`${plural(left.unchecked_outputs.length, "output")} (${left.unchecked_outputs.join(", ")})`);
  }
  if (left.unchecked_nodes.length) not.push(plural(left.unchecked_nodes.length, "fused node"));
  return {
    summary: `the reference backend has no kernel for ${ops.join(", ")}`,
    detail: `Compared ${plural(parity.outputs.length, "output")} and ${plural(parity.nodes.length, "fused node")} ` +
      `that do not need ${ops.length === 1 ? "it" : "them"}; not compared: ${not.join(" and ") || "nothing else"}.`,
  };
}

/**
 * Why the reference backend could not check parity, from the wasm's error, in the page's words:
 * `{ summary, detail, ops }`. The CLI's "(use --no-parity …)" hint is dropped: the page has its
 * own "skip parity" choice.
 */
export function parityFailure(message) {
  const inner = message
    .replace(/^parity check: (original|optimized) model: /, "")
    .replace(/ \(use --no-parity to skip the check\)$/, "");
  const which = /^parity check: optimized model/.test(message) ? "the optimized model" : "the original model";
  const unsupported = inner.match(/unsupported op (\S+) \(domain '([^']*)'\) at node '([^']*)'(.*)$/);
  if (unsupported) {
    const [, op, domain, node, rest] = unsupported;
    const named = (o, d) => (d === "" || d === "ai.onnx" ? o : `${o} (${d})`);
    const also = (rest.match(/also missing: (.+)$/)?.[1]?.split(/,\s*/) ?? [])
      .map((s) => {
        const m = s.match(/^(\S+) \(([^)]*)\)$/);
        return m ? named(m[1], m[2]) : s;
      });
    const ops = [named(op, domain), ...also];
    return {
      summary: `the reference backend has no kernel for ${ops.join(", ")}`,
      detail: `It cannot run ${which} (first at node '${node}'), so original and optimized outputs were not ` +
        "compared. The graphs, fusions and download below do not depend on it.",
      ops,
    };
  }
  const index = inner.match(/index (-?\d+) is out of range for axis (\d+) of size (\d+)/);
  if (index) {
    const [, i, , size] = index;
    return {
      summary: `an input size is past a table of the model (index ${i}, but the table has ${size} entries)`,
      detail: `${inner}. Lower the input sizes above (a position table of ${size} entries takes a sequence of at most ${size}).`,
      ops: [],
    };
  }
  return { summary: `${which} did not run on the reference backend`, detail: inner, ops: [] };
}
