// Orders a wasm module's functions so that similar function bodies sit next to each other, for
// gzip: its 32 KB window only finds a repeat that is close by, and this module has hundreds of
// near-copies (one generic function per element type or closure) spread across 2 MB of code.
//
//   node scripts/reorder_wasm_functions.mjs IN.wasm OUT.wasm
//
// It changes nothing but the name section: every defined function is renamed to its rank in the
// new order ("f00000", "f00001", ...), and `wasm-opt --reorder-functions-by-name` then moves the
// bodies (scripts/build_wasm.sh; that wasm-opt run drops the name section). IN must have a name
// section (wasm-opt -g keeps it) and should already be in name order: the order starts at its
// first function and breaks ties by its order.
//
// The order: a greedy chain, each next function the unplaced one whose body is most similar to
// the last placed one. Similarity is estimated by MinHash (K hash functions over the set of 4-byte
// substrings of the body: the fraction of equal minimums estimates the Jaccard similarity of the
// two sets). Deterministic: fixed seeds, ties broken by input order.
import { readFileSync, writeFileSync } from "node:fs";

const K = 256;

function readU32(buf, pos) {
  let result = 0;
  let shift = 0;
  for (;;) {
    const byte = buf[pos++];
    result += (byte & 0x7f) * 2 ** shift;
    shift += 7;
    if (byte < 0x80) return [result, pos];
  }
}

function writeU32(out, value) {
  do {
    let byte = value & 0x7f;
    value = Math.floor(value / 128);
    if (value !== 0) byte |= 0x80;
    out.push(byte);
  } while (value !== 0);
}

function readName(buf, pos) {
  const [len, p] = readU32(buf, pos);
  return [buf.subarray(p, p + len), p + len];
}

// The number of imported functions (they come first in the function index space).
function countFunctionImports(buf, start, end) {
  let [n, pos] = readU32(buf, start);
  let funcs = 0;
  for (let i = 0; i < n; i++) {
    [, pos] = readName(buf, pos);
    [, pos] = readName(buf, pos);
    const kind = buf[pos++];
    if (kind === 0) {
      [, pos] = readU32(buf, pos);
      funcs++;
    } else if (kind === 1 || kind === 2) {
      if (kind === 1) pos++; // reftype
      let flags;
      [flags, pos] = readU32(buf, pos);
      [, pos] = readU32(buf, pos);
      if (flags & 1) [, pos] = readU32(buf, pos);
    } else if (kind === 3) {
      pos += 2;
    } else if (kind === 4) {
      pos++;
      [, pos] = readU32(buf, pos);
    } else {
      throw new Error(`import kind ${kind} not understood`);
    }
  }
  if (pos !== end) throw new Error("import section not parsed to its end");
  return funcs;
}

function fmix32(h) {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function signature(body, seeds, out, offset) {
  out.fill(0xffffffff, offset, offset + K);
  const seen = new Set();
  const n = body.length;
  if (n < 4) seen.add(fmix32(n * 0x9e3779b9 + (n > 0 ? body[0] : 0)));
  for (let i = 0; i + 4 <= n; i++) {
    seen.add((body[i] | (body[i + 1] << 8) | (body[i + 2] << 16) | (body[i + 3] << 24)) >>> 0);
  }
  for (const x of seen) {
    for (let k = 0; k < K; k++) {
      const h = fmix32(x ^ seeds[k]);
      if (h < out[offset + k]) out[offset + k] = h;
    }
  }
}

function greedyOrder(bodies) {
  const n = bodies.length;
  const seeds = new Uint32Array(K);
  let s = 0x12345678;
  for (let k = 0; k < K; k++) {
    s = (s + 0x9e3779b9) >>> 0;
    seeds[k] = fmix32(s);
  }
  const sig = new Uint32Array(n * K);
  for (let i = 0; i < n; i++) signature(bodies[i], seeds, sig, i * K);
  const remaining = [];
  for (let i = 1; i < n; i++) remaining.push(i);
  const order = [0];
  let cur = 0;
  while (remaining.length > 0) {
    let best = -1;
    let bestScore = -1;
    let bestDist = Infinity;
    const c = cur * K;
    for (let j = 0; j < remaining.length; j++) {
      const cand = remaining[j];
      const o = cand * K;
      let score = 0;
      for (let k = 0; k < K; k++) if (sig[o + k] === sig[c + k]) score++;
      const dist = Math.abs(cand - cur);
      if (score > bestScore || (score === bestScore && dist < bestDist)) {
        best = j;
        bestScore = score;
        bestDist = dist;
      }
    }
    cur = remaining[best];
    remaining.splice(best, 1);
    order.push(cur);
  }
  return order;
}

function main() {
  const [input, output] = process.argv.slice(2);
  if (!input || !output) {
    console.error("usage: node scripts/reorder_wasm_functions.mjs IN.wasm OUT.wasm");
    process.exit(2);
  }
  const buf = readFileSync(input);
  let pos = 8;
  let imports = 0;
  let bodies = null;
  let nameSection = null; // [start of section (id byte), end, start of the subsections]
  while (pos < buf.length) {
    const sectionStart = pos;
    const id = buf[pos++];
    let size;
    [size, pos] = readU32(buf, pos);
    const end = pos + size;
    if (id === 2) imports = countFunctionImports(buf, pos, end);
    if (id === 10) {
      let [n, p] = readU32(buf, pos);
      bodies = [];
      for (let i = 0; i < n; i++) {
        let len;
        [len, p] = readU32(buf, p);
        bodies.push(buf.subarray(p, p + len));
        p += len;
      }
    }
    if (id === 0) {
      const [name, p] = readName(buf, pos);
      if (Buffer.from(name).toString() === "name") nameSection = [sectionStart, end, p];
    }
    pos = end;
  }
  if (!bodies) throw new Error(`${input}: no code section`);
  if (!nameSection) throw new Error(`${input}: no name section (run wasm-opt with -g)`);

  const order = greedyOrder(bodies);
  const width = String(bodies.length).length;
  const rankName = new Map();
  order.forEach((fn, rank) => rankName.set(imports + fn, `f${String(rank).padStart(width, "0")}`));

  // The name section with its function names (subsection 1) replaced: imports keep theirs.
  const [secStart, secEnd, subStart] = nameSection;
  const importNames = new Map();
  const subsections = [];
  let p = subStart;
  while (p < secEnd) {
    const sub = buf[p++];
    let size;
    [size, p] = readU32(buf, p);
    const body = buf.subarray(p, p + size);
    if (sub === 1) {
      let [n, q] = readU32(body, 0);
      for (let i = 0; i < n; i++) {
        let idx, name;
        [idx, q] = readU32(body, q);
        [name, q] = readName(body, q);
        if (idx < imports) importNames.set(idx, name);
      }
    } else {
      subsections.push([sub, body]);
    }
    p += size;
  }
  const funcNames = [];
  const total = imports + bodies.length;
  writeU32(funcNames, total);
  for (let idx = 0; idx < total; idx++) {
    const name =
      idx < imports
        ? (importNames.get(idx) ?? Buffer.from(`import${idx}`))
        : Buffer.from(rankName.get(idx));
    writeU32(funcNames, idx);
    writeU32(funcNames, name.length);
    for (const b of name) funcNames.push(b);
  }
  const after = subsections.findIndex(([id]) => id > 1); // subsection ids are in order
  subsections.splice(after < 0 ? subsections.length : after, 0, [1, Buffer.from(funcNames)]);
  const content = [];
  writeU32(content, 4);
  for (const b of Buffer.from("name")) content.push(b);
  const parts = [Buffer.from(content)];
  for (const [id, body] of subsections) {
    const head = [id];
    writeU32(head, body.length);
    parts.push(Buffer.from(head), Buffer.from(body));
  }
  const sectionBody = Buffer.concat(parts);
  const head = [0];
  writeU32(head, sectionBody.length);
  writeFileSync(
    output,
    Buffer.concat([
      buf.subarray(0, secStart),
      Buffer.from(head),
      sectionBody,
      buf.subarray(secEnd),
    ]),
  );
}

main();
