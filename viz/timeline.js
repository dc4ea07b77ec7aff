/*
 * viz/timeline.js - the vramtrace timeline page (inlined by `vramtrace viz`).
 *
 * Plain, dependency-free JavaScript. The data comes from two tags the
 * renderer (viz/render.c) fills: #vt-meta (JSON: strings, frames, marks,
 * findings, section sizes) and #vt-data (base64 of little-endian unsigned
 * LEB128 varint columns, one section per column, deflated when the renderer
 * had zlib). Everything is decoded into typed arrays once (what only hover,
 * the panels and the table read, after the first paint); nothing per
 * allocation ever becomes a DOM node.
 *
 * Over 1,000 lines on purpose: the page is one self-contained, offline
 * HTML file without a module loader, and what the parts below (decoding,
 * the canvas timeline, the panels, the icicle, the findings, each under a
 * banner comment) share is this script's state; what stands alone is in
 * scripts of its own inlined before it (ticks.js: axis ticks; sweep.js:
 * what a draw walks).
 *
 * Drawing is a raster sweep: for each pixel column the renderer picks the
 * moment inside that column with the most bytes allocated (so peaks never
 * vanish when zoomed out), brings the live allocations up to that moment and
 * stacks them bottom-up. Level of detail is decided once per draw, per
 * allocation: one that would be thinner than a pixel (bytes / bytes-per-row)
 * or live for less than a pixel column is "small" and only adds its bytes to
 * its call site's running sum, kept up to date event by event; every other
 * allocation is an exact band, stacked in allocation order. Above the exact
 * bands each call site with small allocations alive gets one summary band
 * (dotted, in the site's colour, as tall as those bytes), in the order of
 * the site's first allocation. So a column costs O(exact bands + sites),
 * never O(live allocations), and zooming in (x or y) turns summaries back
 * into exact bands. An id buffer remembers which allocation or summary owns
 * each pixel, so hover and click are O(1).
 *
 * What a redraw walks stays bounded on 10M-event pages: a column's moment
 * comes from the allocated curve's block maxima (peakIn), the sweeps and
 * their level of detail are viz/sweep.js's (inlined before this script).
 *
 * Storages vramtrace did not allocate (a CPU tensor's under track()) are
 * lifetimes too, on page devices after the CUDA ones: never in the device
 * curves, the sweeps or the table, drawn in a lane of their own
 * (drawExternal) on the same x axis, every band exact.
 *
 * The first view is the run (runRange): from its first busy moment to its
 * last event. The y range fits the tallest allocated stack in view on every
 * draw (the reserved line joins it when close above, else leaves the top),
 * or the span of the allocated total in view, or is locked (the "y"
 * select); shift+wheel zooms bytes around the cursor (and locks), dragging
 * pans y while it is locked.
 */
'use strict';

(async function () {
  // ------------------------------------------------------------------ data
  const meta = JSON.parse(document.getElementById('vt-meta').textContent);
  const S = meta.strings;
  const str = (i) => (i > 0 && i < S.length ? S[i] : '');

  function base64Bytes(text) {
    if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(text);
    const bin = atob(text);
    const n = bin.length;
    const u = new Uint8Array(n);
    for (let i = 0; i < n; i++) u[i] = bin.charCodeAt(i);
    return u;
  }

  /* The columns: base64 of their bytes, deflated when the renderer had
   * zlib (meta.deflated), inflated natively. The page text is dropped once
   * read: a 10M-event page would hold it twice. */
  async function columnBytes() {
    const el = document.getElementById('vt-data');
    const raw = base64Bytes(el.textContent);
    el.textContent = '';
    if (!meta.deflated) return raw;
    if (typeof DecompressionStream !== 'function') {
      throw new Error('vramtrace: this browser cannot inflate the page\'s data (no DecompressionStream): open it in a current one');
    }
    const inflated = new Response(raw).body.pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(inflated).arrayBuffer());
  }
  const blob = await columnBytes();
  const sections = {};
  {
    let p = 0;
    for (const [name, len, rle] of meta.sec) {
      sections[name] = [p, p + len, rle];
      p += len;
    }
    if (p !== blob.length) throw new Error('vramtrace: data size ' + blob.length + ' != ' + p);
  }

  /* Decode `count` values of column `name` into `out`: unsigned varints,
   * or (value, run length) varint pairs for a run-length column. Values up
   * to 2^53 stay exact (no 32-bit shifts). With `sum` ({zig, scale, bias}),
   * a delta column summed as it is decoded: out[i] = (the first i + 1
   * values summed, zigzag-signed if zig) * scale + bias. Returns out. */
  function varints(name, count, out, sum) {
    const u = blob;
    const [start, end, rle] = sections[name];
    let p = start;
    let i = 0, acc = 0;
    const sumPlain = sum && !rle;
    while (i < count && p < end) {
      let b = u[p++];
      let v = b & 127;
      if (b >= 128) {
        let mul = 128;
        do {
          b = u[p++];
          v += (b & 127) * mul;
          mul *= 128;
        } while (b >= 128);
      }
      if (!rle) {
        out[i++] = sumPlain ? (acc += sum.zig ? unzig(v) : v) * sum.scale + sum.bias : v;
        continue;
      }
      b = u[p++];
      let run = b & 127;
      for (let mul = 128; b >= 128; mul *= 128) {
        b = u[p++];
        run += (b & 127) * mul;
      }
      const stop = Math.min(count, i + run);
      out.fill(v, i, stop);
      i = stop;
    }
    if (p > end || i < count) throw new Error('vramtrace: column ' + name + ' is damaged');
    if (sum && rle) {
      for (let j = 0; j < count; j++) out[j] = (acc += sum.zig ? unzig(out[j]) : out[j]) * sum.scale + sum.bias;
    }
    return out;
  }
  function unzig(v) { return v % 2 === 0 ? v / 2 : -(v + 1) / 2; }

  const nE = meta.nAxis;           // events on the x axis (allocator events)
  const nL = meta.nLife;           // allocations (lifetimes)
  const nK = meta.nStack;          // stack nodes

  // Axis: time of each event, ns since the first one.
  const evT = new Float64Array(nE);
  varints('ev_dt', nE, evT, { zig: false, scale: meta.tq > 1 ? meta.tq : 1, bias: 0 });
  const lastT = Math.max(nE ? evT[nE - 1] : 0, meta.info.snapshotTime || 0, 1);

  // Lifetimes, columnar. Each loop over the events or the allocations runs
  // in a small function of its own ((() => { ... })()): V8 never optimizes a
  // function as large as this page's, and its loops would run interpreted.
  const lAlloc = new Int32Array(nL);    // axis index of the alloc, -1 before the window
  const lEnd = new Int32Array(nL);      // axis index of the release, nE if never
  const lSize = new Float64Array(nL);
  const lSite = new Uint32Array(nL);    // allocation stack node
  const lDev = new Uint32Array(nL);     // index into meta.devices
  const lFlags = new Uint8Array(nL);
  const lLinger = new Float64Array(nL).fill(Infinity); // time from which a band is hatched
  const lFinding = new Int32Array(nL).fill(-1);
  const lTape = new Uint8Array(nL);     // its hatch is a tape finding's (violet)
  (() => {
    // Decoded in place: positions and their deltas fit 32 bits, flags 8.
    varints('l_pos', nL, lAlloc, { zig: true, scale: 1, bias: -1 });
    varints('l_end', nL, lEnd);
    for (let i = 0; i < nL; i++) lEnd[i] = lEnd[i] === 0 ? nE : lEnd[i] + lAlloc[i] - 1;
    varints('l_size', nL, lSize);
    const sizeMul = Math.pow(2, meta.sizeShift || 0);
    if (sizeMul > 1) for (let i = 0; i < nL; i++) lSize[i] *= sizeMul;
    varints('l_site', nL, lSite);
    varints('l_dev', nL, lDev);
    varints('l_flags', nL, lFlags);
  })();
  // The detail columns: what hover, the panels and the table read, never a
  // draw. Decoded after the first paint (detail()), or at the first hover or
  // click before that: a 10M-event page shows its timeline first.
  const lReq = new Float64Array(nL);
  const lFree = new Uint32Array(nL);    // free stack node
  const lName = new Uint32Array(nL);    // tensor name (string)
  const lStream = new Uint32Array(nL);  // index into meta.streams
  const lAddr = new Float64Array(nL);
  let detailDecoded = false;
  function detail() {
    if (detailDecoded) return;
    detailDecoded = true;
    const tmp = new Float64Array(nL);
    varints('l_req', nL, tmp);
    for (let i = 0; i < nL; i++) lReq[i] = tmp[i] === 0 ? 0 : lSize[i] - tmp[i] + 1;
    varints('l_fstk', nL, lFree);
    varints('l_name', nL, lName);
    varints('l_stream', nL, lStream);
    varints('l_addr', nL, tmp);
    let a = 0;
    const addrMul = Math.pow(2, meta.addrShift || 0);
    for (let i = 0; i < nL; i++) {
      a += unzig(tmp[i]);
      lAddr[i] = a * addrMul;
    }
  }
  // Storages vramtrace did not allocate (a CPU tensor's under track(),
  // vt_storage_external): lifetimes on page devices after the CUDA ones,
  // drawn in their own lane, never in the device curves. Per one: its last
  // use (ns, -1: never), uses and tensors bound, as the checker counts them.
  const nDev = meta.devices.length;
  const nX = meta.nExt || 0;
  const extKinds = meta.extKinds || [];
  const isExt = (l) => lDev[l] >= nDev;
  const extKind = (l) => extKinds[lDev[l] - nDev] || 'external';
  const xRow = new Int32Array(nL).fill(-1);
  const xUse = new Float64Array(nX), xNuse = new Float64Array(nX), xNt = new Float64Array(nX);
  if (nX) (() => {
    varints('x_use', nX, xUse);
    varints('x_nuse', nX, xNuse);
    varints('x_nt', nX, xNt);
    for (let i = 0; i < nX; i++) xUse[i] = xUse[i] === 0 ? -1 : (xUse[i] - 1) * (meta.tq || 1);
    for (let l = 0, k = 0; l < nL; l++) if (isExt(l)) xRow[l] = k++;
  })();
  const FL_ALIVE = 1, FL_BEFORE = 2, FL_PENDING = 4, FL_FREE_LOST = 8;
  const FL_FREE_UNSEEN = 32, FL_AFTER = 64;
  // Not one of an observed framework allocator's (PyTorch's) blocks: one of
  // its segments or a library's own buffer (cuBLAS), in the reserved line
  // and never in the allocated bytes, as the framework and `summary` count.
  const FL_OUTSIDE_POOL = 128;

  // Extra streams (record_stream), sparse: lifetime -> [stream index...].
  const extraStreams = new Map();
  (() => {
    const sec = sections.l_xs;
    const vals = [];
    for (let p = sec[0]; p < sec[1];) {
      let b = blob[p++], v = b & 127, mul = 128;
      while (b >= 128) { b = blob[p++]; v += (b & 127) * mul; mul *= 128; }
      vals.push(v);
    }
    let p = 0, l = 0;
    for (let k = 0; k < meta.nXs && p < vals.length; k++) {
      l += vals[p++];
      const cnt = vals[p++];
      extraStreams.set(l, vals.slice(p, p + cnt));
      p += cnt;
    }
  })();

  // Stack prefix tree: node -> (parent, frame).
  const kParent = new Uint32Array(nK);
  const kFrame = new Uint32Array(nK);
  (() => {
    const tmp = new Float64Array(2 * nK);
    varints('stk', 2 * nK, tmp);
    for (let i = 0; i < nK; i++) {
      kParent[i] = tmp[2 * i];
      kFrame[i] = tmp[2 * i + 1];
    }
  })();
  const F = meta.frames;

  // Reserved bytes per device: sparse steps (axis position, value).
  const devCurves = [];
  (() => {
    let total = 0;
    for (const d of meta.devices) total += d.npoints;
    const tmp = new Float64Array(2 * total);
    varints('curves', 2 * total, tmp);
    let p = 0;
    for (const d of meta.devices) {
      const pos = new Int32Array(d.npoints);
      const val = new Float64Array(d.npoints);
      let ax = 0;
      for (let k = 0; k < d.npoints; k++) {
        ax += tmp[p++];
        pos[k] = ax - 1;   // -1: the state before the first event
        val[k] = tmp[p++];
      }
      devCurves.push({ pos, val });
    }
  })();

  // Findings: mark the part of each band after its last use. A call-site
  // finding (`ls`) covers several allocations, each from its own moment.
  const findings = meta.findings;
  findings.forEach((f, i) => {
    const from = f.from != null ? f.from : (f.lastUse != null ? f.lastUse : null);
    const members = f.ls ? f.ls : (f.l >= 0 ? [[f.l, from]] : []);
    for (const [l, t] of members) {
      if (l < 0 || l >= nL) continue;
      if (lFinding[l] < 0) lFinding[l] = i;
      if (f.kind === 'tape' && lFinding[l] === i) lTape[l] = 1;
      if (t != null) lLinger[l] = Math.min(lLinger[l], t);
    }
  });

  // Sweep index: which lifetimes start / end at each axis event.
  let nBefore = 0;
  while (nBefore < nL && lAlloc[nBefore] < 0) nBefore++;
  const startOff = new Int32Array(nE + 1);   // lifetimes are in alloc order
  (() => {
    let l = nBefore;
    for (let e = 0; e <= nE; e++) {
      while (l < nL && lAlloc[l] < e) l++;
      startOff[e] = l;
    }
  })();
  const endOff = new Int32Array(nE + 1);     // counting sort by end event
  const endL = new Int32Array(nL);
  (() => {
    for (let l = 0; l < nL; l++) if (lEnd[l] < nE) endOff[lEnd[l] + 1]++;
    for (let e = 0; e < nE; e++) endOff[e + 1] += endOff[e];
    // Placed with each start as the cursor, which leaves it at the next
    // start: shifted back by one, without a copy of the offsets.
    for (let l = 0; l < nL; l++) if (lEnd[l] < nE) endL[endOff[lEnd[l]]++] = l;
    for (let e = nE; e > 0; e--) endOff[e] = endOff[e - 1];
    endOff[0] = 0;
  })();

  // ---------------------------------------------------------------- helpers
  function fmtBytes(b) {
    const a = Math.abs(b);
    if (a < 1024) return b + ' B';
    const u = ['KiB', 'MiB', 'GiB', 'TiB'];
    let v = b / 1024, i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2)) + ' ' + u[i];
  }
  /* A byte tick label precise enough to tell ticks `step` bytes apart
   * (a zoomed y range may start far above zero). */
  function fmtBytesTick(b, step) {
    if (b < 1024) return b + ' B';
    const u = ['KiB', 'MiB', 'GiB', 'TiB'];
    let div = 1024, i = 0;
    while (b / div >= 1024 && i < u.length - 1) { div *= 1024; i++; }
    const f = step / div;
    let decimals = 0;   // enough for the step's own digits (steps are powers of two)
    while (decimals < 3 && Math.abs(f * 10 ** decimals - Math.round(f * 10 ** decimals)) > 1e-6) decimals++;
    return (b / div).toFixed(decimals) + ' ' + u[i];
  }
  function fmtTime(ns) {
    const a = Math.abs(ns);
    if (a < 1e3) return ns.toFixed(0) + ' ns';
    if (a < 1e6) return (ns / 1e3).toPrecision(3) + ' µs';
    if (a < 1e9) return (ns / 1e6).toPrecision(4) + ' ms';
    return (ns / 1e9).toPrecision(5) + ' s';
  }
  /* A time tick label precise enough to tell ticks `step` ns apart. */
  function fmtTick(ns, step) {
    const units = [[1e9, 's'], [1e6, 'ms'], [1e3, 'µs'], [1, 'ns']];
    const scale = view.v1 >= 1e9 ? 0 : view.v1 >= 1e6 ? 1 : view.v1 >= 1e3 ? 2 : 3;
    const [div, name] = units[scale];
    const decimals = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / div) - 1e-9)));
    return (ns / div).toFixed(decimals) + ' ' + name;
  }
  const hex = (v) => '0x' + v.toString(16);
  /* Names and call sites can be any length: lists and tooltips show at most
   * n characters (the detail panel shows all). */
  const clip = (s, n) => (s.length > n ? s.slice(0, n - 1) + '\u2026' : s);
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

  function frameText(fr) {
    const fn = str(F.fn[fr]);
    const file = str(F.file[fr]);
    const mod = str(F.mod[fr]);
    const where = file ? file + (F.line[fr] ? ':' + F.line[fr] : '')
      : (mod ? mod.replace(/^.*\//, '') + '+' + hex(F.off[fr]) : '');
    // A Python function's first line, as the text views show it (0: none).
    const def = (F.def && F.def[fr]) || 0;
    return { fn: fn || (mod ? mod.replace(/^.*\//, '') + '+' + hex(F.off[fr]) : '??'), where, def };
  }
  /* "file:line (def at line N)": a frame's place in stacks and tooltips. */
  const whereDef = (t) => t.where + (t.def ? ' (def at line ' + t.def + ')' : '');
  // Python frames (the recorder's, or a PyTorch snapshot's) and what is
  // folded in a stack that has them: the interpreter's own native frames and
  // torch's Python dispatch plumbing (cli/report_util.c keeps the same list).
  const PLUMBING = [
    ['torch/nn/modules/module.py', '_call_impl'], ['torch/nn/modules/module.py', '_wrapped_call_impl'],
    ['torch/utils/_contextlib.py', 'decorate_context'], ['torch/_tensor.py', 'wrapped'],
    ['torch/_tensor.py', '_handle_torch_function_and_wrap_type_error_to_not_implemented'],
    ['torch/overrides.py', 'handle_torch_function'], ['torch/_ops.py', '__call__'],
    ['vramtrace/torch.py', '__torch_dispatch__'], ['vramtrace/torch.py', '_dispatch'],
    ['vramtrace/torch/_recording.py', '__torch_dispatch__'],
    ['vramtrace/torch/_recording.py', '_dispatch'],
  ];
  function isPython(fr) { return str(F.mod[fr]) === 'python'; }
  /* The program's own code (not torch, the standard library or site-packages). */
  function isUser(fr) { return !!(F.user && F.user[fr]); }
  function isPlumbing(fr) {
    const file = str(F.file[fr]), fn = str(F.fn[fr]);
    return PLUMBING.some(([f, n]) => fn === n && file.endsWith(f));
  }
  function isInterpreter(fr) {
    const b = str(F.mod[fr]).replace(/^.*\//, '');
    return b.startsWith('libpython') || (b.startsWith('python') && b !== 'python' && !b.includes('.so'));
  }
  function stackFrames(node) {
    const out = [];
    for (let k = node, guard = 0; k > 0 && k < nK && guard < 4096; k = kParent[k], guard++) out.push(kFrame[k]);
    return out;
  }
  const siteCache = new Map();
  function siteLabel(node) {
    if (node === 0) return '(no stack)';
    let s = siteCache.get(node);
    if (s) return s;
    const frs = stackFrames(node);
    // The innermost line of the program's own code, as the text views name
    // a site; else, where Python ran, its innermost line (not torch's
    // dispatch plumbing).
    let pick = frs.find(isUser);
    if (pick === undefined) pick = frs.find((fr) => isPython(fr) && !isPlumbing(fr));
    if (pick === undefined) pick = frs.find((fr) => F.fn[fr] > 0);
    if (pick === undefined) pick = frs[0];
    const t = frameText(pick);
    // The file's base name: labels sit in narrow columns and tooltips; the
    // detail panel's stacks show the full paths.
    s = t.fn + (t.where ? ' (' + t.where.replace(/^.*\//, '') + ')' : '');
    siteCache.set(node, s);
    return s;
  }
  function lifetimeTitle(l) {
    detail();
    return lName[l] ? str(lName[l]) : 'allocation #' + l;
  }

  // Site colours: a stable hue per call site (stack node), packed ABGR.
  const siteRGBA = new Uint32Array(Math.max(nK, 1));
  const siteDark = new Uint32Array(Math.max(nK, 1));
  function hsl2abgr(h, s, l) {
    const k = (n) => (n + h / 30) % 12;
    const a = s * Math.min(l, 1 - l);
    const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
    const r = Math.round(255 * f(0)), g = Math.round(255 * f(8)), b = Math.round(255 * f(4));
    return (0xff000000 | (b << 16) | (g << 8) | r) >>> 0;
  }
  for (let k = 0; k < nK; k++) {
    let h = Math.imul(k ^ 0x9e3779b9, 0x85ebca6b) >>> 0;
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35) >>> 0;
    const hue = (h % 360 + 360) % 360;
    const sat = 0.45 + ((h >>> 9) % 30) / 100;
    const lig = 0.55 + ((h >>> 17) % 15) / 100;
    siteRGBA[k] = hsl2abgr(hue, sat, lig);
    siteDark[k] = hsl2abgr(hue, sat, lig - 0.18);
  }
  siteRGBA[0] = hsl2abgr(0, 0, 0.72); siteDark[0] = hsl2abgr(0, 0, 0.55);   // no stack (or none at all)
  const HATCH_A = 0xff2f2fd3 >>> 0, HATCH_B = 0xff00007f >>> 0;   // reds (ABGR)
  const TAPE_A = 0xffd040a0 >>> 0, TAPE_B = 0xff5a1a4a >>> 0;     // violets: a tape finding
  const tapePeaks = findings.filter((f) => f.kind === 'tape' && f.peak != null).map((f) => f.peak);
  const SEL = 0xff00d7ff >>> 0, SEL_DARK = 0xff0090b0 >>> 0;         // amber

  // ----------------------------------------------------------------- state
  const view = {
    mode: 'time',          // 'time' | 'event'
    v0: 0, v1: lastT,      // visible x range (ns or event index)
    device: -1,            // index into meta.devices, -1 = all
    selected: -1,          // lifetime
    finding: -1,           // a finding shown alone (its storage is not on the page)
    moment: -2,            // axis state shown in the table (-1 initial, -2 none)
    flameRoot: 0,          // node of the icicle's tree drawn as its root
    flameAll: false,       // the icicle shows the frames the text views fold
    yMode: 'fit',          // 'fit': 0..tallest stack in view; 'span': lowest..highest allocated in view; 'lock'
    y0: 0, y1: 1,          // visible byte range of the timeline (of the last draw when fitting)
  };
  const use = new Uint8Array(nL);   // lifetime passes the device filter
  let allocCurve = new Float64Array(nE);
  let resvCurve = new Float64Array(nE);
  let initAlloc = 0, initResv = 0;
  let peakState = -1, peakAlloc = 0, peakResv = 0;

  /* The curves are summed in place from their steps: no second array of
   * the events' size (80 MB on 10M events). */
  function applyFilter() {
    for (let l = 0; l < nL; l++) {
      use[l] = !isExt(l) && !(lFlags[l] & FL_OUTSIDE_POOL) && (view.device < 0 || lDev[l] === view.device) ? 1 : 0;
    }
    const d = allocCurve;
    peakBlocks.delete(allocCurve);   // summed again below
    d.fill(0);
    initAlloc = 0;
    for (let l = 0; l < nL; l++) {
      if (!use[l]) continue;
      if (lAlloc[l] < 0) initAlloc += lSize[l]; else d[lAlloc[l]] += lSize[l];
      if (lEnd[l] < nE) d[lEnd[l]] -= lSize[l];
    }
    let v = initAlloc, best = initAlloc;
    peakState = -1;
    for (let e = 0; e < nE; e++) {
      v += d[e];
      allocCurve[e] = v;
      if (v > best) { best = v; peakState = e; }
    }
    const r = resvCurve;
    r.fill(0);
    initResv = 0;
    meta.devices.forEach((dev, i) => {
      if (view.device >= 0 && view.device !== i) return;
      const c = devCurves[i];
      let prev = 0;
      for (let k = 0; k < c.pos.length; k++) {
        if (c.pos[k] < 0) initResv += c.val[k] - prev;
        else r[c.pos[k]] += c.val[k] - prev;
        prev = c.val[k];
      }
    });
    v = initResv;
    peakAlloc = best;
    peakResv = initResv;
    for (let e = 0; e < nE; e++) { v += r[e]; resvCurve[e] = v; if (v > peakResv) peakResv = v; }
    applyReplay();
    checkpointsLater();
  }
  // A replay's reserved bytes (vramtrace viz --replay), drawn over the
  // recorded ones: steps (device index, axis position, bytes).
  const replay = meta.replay;
  let replayCurve = null, initReplay = 0, replayEnd = nE;
  function applyReplay() {
    if (!replay) return;
    replayCurve = new Float64Array(nE);
    const d = new Float64Array(nE + 1);
    const prev = new Map();
    initReplay = 0;
    replayEnd = -1;
    for (const [dev, pos, val] of replay.pts) {
      if (view.device >= 0 && view.device !== dev) continue;
      const delta = val - (prev.get(dev) || 0);
      prev.set(dev, val);
      if (pos < 0) initReplay += delta; else d[pos] += delta;
    }
    // the replay ends where it ran out of memory, if it did
    replayEnd = replay.oom >= 0 ? replay.oom : nE - 1;
    let v = initReplay;
    for (let e = 0; e < nE; e++) { v += d[e]; replayCurve[e] = v; }
  }
  // Bytes of the external storages alive after each axis event.
  const extCurve = new Float64Array(nE);
  let initExt = 0, peakExt = 0;
  if (nX) {
    const d = new Float64Array(nE + 1);
    for (let l = 0; l < nL; l++) {
      if (!isExt(l)) continue;
      if (lAlloc[l] < 0) initExt += lSize[l]; else d[lAlloc[l]] += lSize[l];
      if (lEnd[l] < nE) d[lEnd[l]] -= lSize[l];
    }
    let v = initExt;
    peakExt = initExt;
    for (let e = 0; e < nE; e++) { v += d[e]; extCurve[e] = v; if (v > peakExt) peakExt = v; }
  }
  const extAt = (s) => (s < 0 ? initExt : extCurve[s]);
  const replayAt = (s) => (s < 0 ? initReplay : replayCurve[s]);
  const allocAt = (s) => (s < 0 ? initAlloc : allocCurve[s]);
  const resvAt = (s) => (s < 0 ? initResv : resvCurve[s]);
  const timeAt = (s) => (s < 0 ? 0 : evT[s]);

  /* Level of detail. Precomputed once: each allocation's call site clamped
   * to the stack table, and each site's stacking rank (the order of its
   * first allocation). */
  const lSiteC = new Uint32Array(nL);
  const NS = Math.max(nK, 1);
  const siteRank = new Int32Array(NS).fill(-1);
  /* How long lifetime l lives on the x axis (ns or events); one allocated
   * before the window or never freed, forever. */
  const lifeWidth = (l, timeMode) => (lAlloc[l] < 0 || lEnd[l] >= nE ? Infinity
    : timeMode ? evT[lEnd[l]] - evT[lAlloc[l]] : lEnd[l] - lAlloc[l]);
  (() => {
    let r = 0;
    for (let l = 0; l < nL; l++) {
      const k = lSite[l] < nK ? lSite[l] : 0;
      lSiteC[l] = k;
      if (siteRank[k] < 0) siteRank[k] = r++;
    }
  })();

  // What a draw walks (viz/sweep.js): the sweeps, their checkpoints, the
  // draw's level of detail.
  const {
    makeSweep, buildCheckpoints, checkpointsLater, ckpt, LONG_W, dsw, columnSums, lowerBound,
    BLK, BLK_SHIFT, LOD_OFF, LOD_EXACT,
  } = vtSweep.create({
    nL, nE, nBefore, lAlloc, lEnd, lSize, lSiteC, lLinger, lFinding, startOff, endOff, endL,
    siteRank, NS, use, lifeWidth,
  });
  const sweep = makeSweep(use);
  const extLife = new Uint8Array(nL);
  (() => { for (let l = 0; l < nL; l++) extLife[l] = isExt(l) ? 1 : 0; })();
  const xsweep = makeSweep(extLife);

  const domainMax = () => (view.mode === 'time' ? lastT : Math.max(nE, 1));

  // ------------------------------------------------------------- canvases
  const $ = (id) => document.getElementById(id);
  const tl = $('tl'), seg = $('seg'), flame = $('flame'), ext = $('ext');
  const tip = $('tooltip');
  const M = { l: 66, r: 10, t: 16, b: 20 };   // plot margins, CSS px
  let dpr = 1;
  let plot = null;   // geometry + per-column states + id buffer of the last draw

  function sizeCanvas(c) {
    const r = c.parentElement.getBoundingClientRect();
    // Exactly the CSS box: a bigger backing store would be squeezed into it
    // (distorted text on a short icicle).
    const w = Math.max(1, Math.round(r.width * dpr)), h = Math.max(1, Math.round(r.height * dpr));
    if (c.width !== w) c.width = w;
    if (c.height !== h) c.height = h;
  }

  /* Pick, for each pixel column, the axis state it shows: the moment inside
   * the column with the most bytes allocated (by `at` / `curve`: the device
   * filter's allocations, or the external storages). -2 = no data there. */
  function columnStates(PW, at = allocAt, curve = allocCurve) {
    const st = new Int32Array(PW);
    const span = view.v1 - view.v0;
    for (let c = 0; c < PW; c++) {
      const xa = view.v0 + (c / PW) * span, xb = view.v0 + ((c + 1) / PW) * span;
      let e0, e1, best;
      if (view.mode === 'event') {
        if (xb <= 0 || xa >= nE) { st[c] = -2; continue; }
        e0 = Math.max(0, Math.floor(xa));
        e1 = Math.min(nE, Math.max(e0 + 1, Math.ceil(xb)));
        best = e0;
      } else {
        if (xb < 0 || xa > lastT) { st[c] = -2; continue; }
        e0 = lowerBound(evT, nE, xa);
        e1 = lowerBound(evT, nE, xb);
        best = e0 - 1;                      // the state carried into the column
      }
      st[c] = peakIn(curve, e0, e1, best, at(best));
    }
    return st;
  }
  /* The first event of [e0, e1) where `curve` is highest, if above bv (the
   * value at `best`), else best. Whole blocks of PEAK_BLK events are
   * looked up in the curve's block maxima, so a zoomed-out column costs
   * its blocks, not its events. */
  const PEAK_SHIFT = 8, PEAK_BLK = 1 << PEAK_SHIFT;
  const peakBlocks = new Map();   // curve -> index of the first maximum of each block
  function blockPeaks(curve) {
    let m = peakBlocks.get(curve);
    if (m) return m;
    m = new Int32Array((curve.length >> PEAK_SHIFT) + 1);
    for (let b = 0; b < m.length; b++) {
      let best = b << PEAK_SHIFT;
      for (let e = best + 1, e1 = Math.min(curve.length, (b + 1) << PEAK_SHIFT); e < e1; e++) if (curve[e] > curve[best]) best = e;
      m[b] = best;
    }
    peakBlocks.set(curve, m);
    return m;
  }
  function peakIn(curve, e0, e1, best, bv) {
    let e = e0;
    if (e1 - e0 >= 2 * PEAK_BLK) {
      const m = blockPeaks(curve);
      for (; e & (PEAK_BLK - 1); e++) if (curve[e] > bv) { bv = curve[e]; best = e; }
      for (; e + PEAK_BLK <= e1; e += PEAK_BLK) {
        const k = m[e >> PEAK_SHIFT];
        if (curve[k] > bv) { bv = curve[k]; best = k; }
      }
    }
    for (; e < e1; e++) if (curve[e] > bv) { bv = curve[e]; best = e; }
    return best;
  }
  const xOf = (s) => (view.mode === 'time' ? timeAt(s) : s + 0.5);

  const { niceStep, niceBytesStep } = vtTicks;   /* viz/ticks.js */

  let drawCount = 0, firstPaint = 0, lastDrawMs = 0;
  let lodWindow = null;   // window mode: null as the view asks, true / false forced (tests)
  let lastLod = { exact: 0, summary: 0, minBytes: 0, minWidth: 0 };

  /* The y range to draw. 'fit': from 0 to the tallest allocated stack in
   * the visible columns; the reserved line (and a replay's) joins the range
   * only while it stays within RESERVED_ROOM of that stack, else it leaves
   * the top of the plot (drawTimeline says how high it goes): a cache that
   * holds twice what is allocated must not squash the bands into the bottom
   * of the plot. 'span': from a little below the lowest to a little above
   * the highest allocated total in view, so the activity of a deep zoom on
   * top of a large base fills the plot. 'lock': the range as it is. */
  const RESERVED_ROOM = 1.3;
  function yRange(st, PW) {
    if (view.yMode === 'lock' && view.y1 > view.y0) return [view.y0, view.y1];
    let amin = Infinity, amax = 0, rmax = 0;
    for (let c = 0; c < PW; c++) {
      if (st[c] === -2) continue;
      const a = allocAt(st[c]);
      rmax = Math.max(rmax, resvAt(st[c]), replayCurve && st[c] <= replayEnd ? replayAt(st[c]) : 0);
      amin = Math.min(amin, a);
      amax = Math.max(amax, a);
    }
    // Nothing allocated in view: the reserved line is all there is to show.
    const top = amax > 0 ? (rmax <= amax * RESERVED_ROOM ? Math.max(amax, rmax) : amax) : rmax;
    view.y0 = 0;
    view.y1 = Math.max(1, top) * 1.04;
    if (view.yMode === 'span' && amax > amin) {
      const pad = (amax - amin) * 0.08;
      view.y0 = Math.max(0, amin - pad);
      view.y1 = amax + pad;
    }
    return [view.y0, view.y1];
  }

  function drawTimeline() {
    const t0 = performance.now();
    sizeCanvas(tl);
    const W = tl.width, H = tl.height;
    const L = Math.round(M.l * dpr), R = Math.round(M.r * dpr), T = Math.round(M.t * dpr), B = Math.round(M.b * dpr);
    const PW = Math.max(1, W - L - R), PH = Math.max(1, H - T - B);
    const ctx = tl.getContext('2d');
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, W, H);

    const st = columnStates(PW);
    const [y0, y1] = yRange(st, PW);
    const ys = PH / (y1 - y0);
    const yOf = (bytes) => Math.round(PH - (bytes - y0) * ys);   // plot row of a stack height

    const img = ctx.createImageData(PW, PH);
    const px = new Uint32Array(img.data.buffer);
    // > 0: lifetime + 1; < 0: -(summary record + 1); 0: nothing.
    const ids = new Int32Array(PW * PH);
    // Summary records: one per (column, site) band drawn.
    const sum = { site: [], n: [], bytes: [], linger: [], state: [], col: [], top: [], bot: [] };
    const sel = view.selected;
    // Small: thinner than one pixel row, or alive for less than one column.
    let s0 = nE, s1 = nE;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) { s0 = st[c]; break; }
    for (let c = PW - 1; c >= 0; c--) if (st[c] !== -2) { s1 = st[c]; break; }
    // Window mode (sweep.js) once the view holds more events than a column
    // by column walk of the last LONG_W events costs.
    const win = lodWindow !== false && (lodWindow === true || s1 - s0 > PW * LONG_W) ? LONG_W : 0;
    const minBytes = 1 / ys, minW = (view.v1 - view.v0) / PW, timeMode = view.mode === 'time';
    dsw.reset(minBytes, minW, timeMode, sel, s0, win);
    const list = dsw.list, lst = dsw.st, blkB = dsw.blkB;
    // Small ones counted in this column only (with findings: past their last
    // use or not by the column's time; in window mode, all the recent ones).
    const col = columnSums();
    const { B: colB, N: colN, LB: colLB, LN: colLN, touched } = col;
    const recent = [];   // window mode: exact bands born in the last LONG_W events, after the list's
    let nExact = 0;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      const t = timeAt(s);
      dsw.column(s, t, col, recent);
      let off = 0, yPrev = PH;
      const n = dsw.len;
      for (let i = 0; i < n; i++) {
        if ((i & (BLK - 1)) === 0) {
          // Whole blocks whose bands all round below what is drawn: their
          // bytes only lift what comes after.
          let b = i >> BLK_SHIFT;
          while (i < n && yOf(off + blkB[b]) >= yPrev) { off += blkB[b]; i = ++b << BLK_SHIFT; }
          if (i >= n) break;
        }
        const l = list[i];
        const v = lst[l];
        if (v === LOD_OFF) continue;
        off += lSize[l];
        if (yPrev <= 0) break;              // the plot is full: nothing above shows
        let top = yOf(off);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;         // below the y range (or rounded away)
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        nExact++;
        yPrev = top;
      }
      for (let i = 0; i < recent.length && yPrev > 0; i++) {
        const l = recent[i];
        off += lSize[l];
        let top = yOf(off);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        nExact++;
        yPrev = top;
      }
      // One summary band per site on top: the plain bytes, then the part
      // past its last use hatched. A site with only recent small ones
      // (window mode) is not among the sweep's.
      let sites = dsw.sites();
      if (win) {
        const extra = touched.filter((k) => !dsw.siteOn[k]);
        if (extra.length) sites = sites.concat(extra).sort((a, b) => siteRank[a] - siteRank[b]);
      }
      for (let i = 0; i < sites.length && yPrev > 0; i++) {
        const k = sites[i];
        const cnt = dsw.siteN[k] + colN[k];
        if (cnt === 0) continue;
        const lb = dsw.siteLB[k] + colLB[k];
        const plain = dsw.siteB[k] + colB[k] - lb;
        const bot = yPrev;
        const r = sum.site.length;
        for (let part = 0; part < 2; part++) {
          off += part ? lb : plain;
          if (part && !lb) break;
          let top = yOf(off);
          if (top < 0) top = 0;
          if (top >= yPrev) continue;
          const col = siteRGBA[k], dark = siteDark[k];
          for (let y = top; y < yPrev; y++) {
            const p = y * PW + c;
            if (part) px[p] = ((c + y) & 7) < 4 ? HATCH_A : HATCH_B;
            else px[p] = y === top && yPrev - top >= 4 ? dark : ((c | y) & 1) ? col : dark;
            ids[p] = -(r + 1);
          }
          yPrev = top;
        }
        if (yPrev < bot) {
          sum.site.push(k); sum.n.push(cnt); sum.bytes.push(plain + lb); sum.linger.push(dsw.siteLN[k] + colLN[k]);
          sum.state.push(s); sum.col.push(c); sum.top.push(yPrev); sum.bot.push(bot);
        }
      }
      col.clear();
    }
    ctx.putImageData(img, L, T);

    // Reserved memory as a line.
    ctx.save();
    ctx.beginPath(); ctx.rect(L, T - 1, PW, PH + 2); ctx.clip();
    ctx.strokeStyle = '#111';
    ctx.lineWidth = Math.max(1, dpr * 1.2);
    ctx.beginPath();
    let pen = false, rAbove = 0;
    for (let c = 0; c < PW; c++) {
      if (st[c] === -2) { pen = false; continue; }
      const r = resvAt(st[c]);
      if (r > y1) rAbove = Math.max(rAbove, r);
      const y = T + PH - (r - y0) * ys;
      if (!pen) { ctx.moveTo(L + c, y); pen = true; } else ctx.lineTo(L + c, y);
      ctx.lineTo(L + c + 1, y);
    }
    ctx.stroke();
    if (rAbove) {
      // The y range follows the allocated bytes: say where the cache went.
      ctx.fillStyle = '#111';
      ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      ctx.textAlign = 'right';
      ctx.fillText('\u25b2 reserved above the plot, up to ' + fmtBytes(rAbove), L + PW - 6 * dpr, T + 4 * dpr);
    }
    if (replayCurve) {
      // the replay's reserved bytes: dashed, until it ran out of memory
      ctx.strokeStyle = '#d9480f';
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.beginPath();
      pen = false;
      for (let c = 0; c < PW; c++) {
        if (st[c] === -2 || st[c] > replayEnd) { pen = false; continue; }
        const y = T + PH - (replayAt(st[c]) - y0) * ys;
        if (!pen) { ctx.moveTo(L + c, y); pen = true; } else ctx.lineTo(L + c, y);
        ctx.lineTo(L + c + 1, y);
      }
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = '#d9480f';
      ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      ctx.textAlign = 'left';
      ctx.fillText('- - replayed reserved: ' + replay.label, L + 6 * dpr, T + 4 * dpr);
    }
    ctx.restore();

    drawAxes(ctx, L, T, PW, PH, y0, y1, dpr);
    if (nL - nX === 0) {
      ctx.save();
      ctx.fillStyle = '#6b6b70';
      ctx.font = (13 * dpr) + 'px system-ui, sans-serif';
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      ctx.fillText(nX ? 'no device allocation recorded; the ' + nX.toLocaleString() + ' tracked ' + (extKinds.join(', ') || 'external') +
        ' storage' + (nX === 1 ? ' is' : 's are') + ' in their own lane'
        : 'no allocation recorded in this snapshot' + (meta.marks.length ? ' (marks only)' : ''), L + PW / 2, T + PH / 2);
      ctx.restore();
    }
    drawMarks(ctx, L, T, PW, PH);
    drawTapePeaks(ctx, L, T, PW);
    drawOom(ctx, L, T, PW, PH);
    drawMoment(ctx, L, T, PW, PH);
    drawLeftOut(ctx, L, T, PH);
    plot = { L, T, PW, PH, st, ids, ys, y0, y1, sum, rAbove };
    // A zoom under a still mouse: what is under it changed.
    if (tipEv && !tip.hidden) timelineTip(tipEv);
    lastLod = { exact: nExact, summary: sum.site.length, minBytes, minWidth: minW, window: win };
    drawSegments(st, PW, L, R);
    drawExternal(L, R);
    drawCount++;
    lastDrawMs = performance.now() - t0;
    if (!firstPaint) {
      firstPaint = performance.now();
      performance.mark('vt-first-paint');
    }
  }

  function pxOfX(x, L, PW) { return L + ((x - view.v0) / (view.v1 - view.v0)) * PW; }

  function drawAxes(ctx, L, T, PW, PH, y0, y1, k) {
    ctx.fillStyle = '#6b6b70';
    ctx.strokeStyle = '#e3e3e8';
    ctx.lineWidth = 1;
    ctx.font = (11 * k) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    ctx.textAlign = 'right';
    const step = niceBytesStep(y1 - y0, Math.max(2, Math.floor(PH / (40 * k))));
    for (let v = Math.ceil(y0 / step) * step; v <= y1; v += step) {
      const y = Math.round(T + PH - ((v - y0) / (y1 - y0)) * PH) + 0.5;
      ctx.beginPath(); ctx.moveTo(L - 4 * k, y); ctx.lineTo(L, y); ctx.stroke();
      ctx.fillText(fmtBytesTick(v, step), L - 6 * k, y);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    const span = view.v1 - view.v0;
    const xs = niceStep(span, Math.max(2, Math.floor(PW / (110 * k))));
    for (let v = Math.ceil(view.v0 / xs) * xs; v <= view.v1; v += xs) {
      const x = Math.round(pxOfX(v, L, PW)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, T + PH); ctx.lineTo(x, T + PH + 4 * k); ctx.stroke();
      // Keep the label inside the canvas (the last tick often sits on the right edge).
      const label = view.mode === 'time' ? fmtTick(v, xs) : '#' + Math.round(v);
      const half = ctx.measureText(label).width / 2;
      ctx.fillText(label, Math.min(x, ctx.canvas.width - half - 1), T + PH + 5 * k);
    }
    ctx.strokeStyle = '#999';
    ctx.strokeRect(L - 0.5, T - 0.5, PW + 1, PH + 1);
  }

  /* The events left of the view (the first view leaves out a quiet start):
   * how many, over how long, at the plot's bottom left. */
  function drawLeftOut(ctx, L, T, PH) {
    const before = view.mode === 'time' ? lowerBound(evT, nE, view.v0) : Math.max(0, Math.min(nE, Math.ceil(view.v0 - 0.5)));
    leftOut = before;
    if (before === 0) return;
    const t = (view.mode === 'time' ? view.v0 : evT[before]) - evT[0];
    ctx.save();
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'bottom';
    ctx.textAlign = 'left';
    const text = '\u25c0 ' + before.toLocaleString() + ' event' + (before === 1 ? '' : 's') + ' in the ' + fmtTime(t) + ' before (show all)';
    const w = ctx.measureText(text).width;
    ctx.fillStyle = 'rgba(255, 255, 255, 0.85)';
    ctx.fillRect(L + 2 * dpr, T + PH - 17 * dpr, w + 8 * dpr, 15 * dpr);
    ctx.fillStyle = '#444';
    ctx.fillText(text, L + 6 * dpr, T + PH - 4 * dpr);
    ctx.restore();
  }
  let leftOut = 0;

  /* `text` cut to at most `w` canvas pixels in ctx's font, with an ellipsis. */
  function fitText(ctx, text, w) {
    if (ctx.measureText(text).width <= w) return text;
    if (w < ctx.measureText('\u2026').width) return '';
    let lo = 0, hi = Math.min(text.length, 400);
    while (lo < hi) {
      const m = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, m) + '\u2026').width <= w) lo = m; else hi = m - 1;
    }
    return text.slice(0, lo) + '\u2026';
  }

  function drawMarks(ctx, L, T, PW, PH) {
    ctx.save();
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'bottom';
    ctx.textAlign = 'left';
    // Only the marks in view: they are in axis order.
    const marks = meta.marks, xAt = (i) => Math.round(pxOfX(xOf(marks[i][0]), L, PW)) + 0.5;
    let i0 = 0, hi = marks.length;
    while (i0 < hi) { const m = (i0 + hi) >>> 1; if (xAt(m) < L) i0 = m + 1; else hi = m; }
    const xs = [];
    for (let i = i0; i < marks.length; i++) {
      const x = xAt(i);
      if (x > L + PW) break;
      xs.push([x, marks[i][1]]);
    }
    // Thousands of marks (one per step) would paint the plot over: then
    // draw ticks along the top edge and lines only where there is room,
    // each kind as one path (a path per mark costs more than the draw).
    const dense = xs.length > PW / (8 * dpr);
    ctx.strokeStyle = 'rgba(90, 30, 160, 0.75)';
    ctx.lineWidth = dpr;
    let lastLine = -1e9, lastRight = -1e9, lastTick = -1e9;
    if (dense) {
      const lines = new Path2D(), ticks = new Path2D();
      for (const [x] of xs) {
        if (x - lastLine >= 60 * dpr) {
          lines.moveTo(x, T); lines.lineTo(x, T + PH);
          lastLine = x;
        } else if (x !== lastTick) {
          ticks.moveTo(x, T); ticks.lineTo(x, T + 5 * dpr);
          lastTick = x;
        }
      }
      ctx.stroke(lines);
      ctx.stroke(ticks);
    } else {
      for (const [x] of xs) {
        ctx.beginPath();
        ctx.moveTo(x, T);
        ctx.lineTo(x, T + PH);
        ctx.stroke();
      }
    }
    ctx.fillStyle = '#5a1ea0';
    for (const [x, label] of xs) {
      if (x > lastRight + 4 * dpr) {
        // A long label is cut (with an ellipsis) so that it never hides
        // the labels of the marks after it nor runs off the plot.
        const text = fitText(ctx, str(label), Math.min(240 * dpr, L + PW - x - 2 * dpr));
        ctx.fillText(text, x + 2 * dpr, T - 1 * dpr);
        lastRight = x + 2 * dpr + ctx.measureText(text).width;
      }
    }
    ctx.restore();
  }


  /* The out-of-memory (vramtrace oom, meta.oom): a red line across the
   * plot, labelled at its top; where it is drawn, for the tests. */
  const oom = meta.oom;
  let oomX = null;
  function oomShown() {
    if (!oom || oom.ax < 0) return false;
    const d = view.device >= 0 ? meta.devices[view.device] : null;
    return !d || d.ord === oom.x.request.device;
  }
  function drawOom(ctx, L, T, PW, PH) {
    oomX = null;
    if (!oomShown()) return;
    const x = Math.round(pxOfX(xOf(oom.ax), L, PW)) + 0.5;
    if (x < L || x > L + PW) return;
    oomX = x;
    ctx.save();
    ctx.strokeStyle = '#d32f2f';
    ctx.lineWidth = 2 * dpr;
    ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + PH); ctx.stroke();
    ctx.fillStyle = '#d32f2f';
    ctx.font = 'bold ' + (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'top';
    const label = 'OOM: ' + fmtBytes(oom.x.request.size);
    const w = ctx.measureText(label).width;
    ctx.fillText(label, x + 3 * dpr + w > L + PW ? x - 3 * dpr - w : x + 3 * dpr, T + 2 * dpr);
    ctx.restore();
  }

  /* The OOM explained, as `vramtrace oom` says it: the request, the device,
   * what was alive by line, and what would have fit (only what the replay
   * verified as fixes). */
  function oomHTML(x) {
    const q = x.request, d = x.device, o = x.outside;
    const conf = (f) => f.kind === 'setting' ? (x.allocator === 'pytorch' ? 'PYTORCH_CUDA_ALLOC_CONF=' : 'VRAMTRACE_CONF=') + f.conf : f.conf;
    let h = '<div class="t">' + fmtBytes(q.size) + ' asked on cuda:' + q.device + ', stream ' + esc(q.stream) +
      (q.ooms_recorded > 1 ? ' (the first of ' + q.ooms_recorded + ' OOMs)' : '') + '</div>';
    h += '<div class="loc">' + esc(q.line || 'no stack recorded') + '</div>';
    h += '<div>device: ' + fmtBytes(d.capacity) + (d.total ? '' : ' for this process') + ', ' + fmtBytes(d.free) + ' free at the OOM</div>';
    h += '<div>reserved ' + fmtBytes(d.reserved) + ': ' + fmtBytes(d.allocated) + ' allocated, ' +
      fmtBytes(d.pending_free) + ' pending free, ' + fmtBytes(d.cache_free) + ' free in the cache</div>';
    if (d.cache_free_pieces) {
      h += '<div>free in ' + d.cache_free_pieces + ' piece' + (d.cache_free_pieces === 1 ? '' : 's') + ', the largest ' +
        fmtBytes(d.largest_free) + '; <b>' + fmtBytes(d.free_in_smaller_pieces) + '</b> in pieces smaller than the request</div>';
    }
    const out = [];
    if (o.libraries_reserved) out.push(fmtBytes(o.libraries_reserved) + ' for libraries\' own allocations');
    if (o.uncached) out.push(fmtBytes(o.uncached) + ' not served by the cache');
    if (o.other) out.push(fmtBytes(o.other) + ' other processes or contexts');
    h += '<div>outside the cache: ' + (out.length ? esc(out.join('; ')) : 'nothing seen') + '</div>';
    h += '<div class="t">alive: ' + fmtBytes(x.alive.bytes) + ' in ' + x.alive.count + ' allocation' + (x.alive.count === 1 ? '' : 's') + '</div><ol class="oom-lines">';
    for (const s of x.alive.lines.slice(0, 6)) {
      h += '<li>' + fmtBytes(s.bytes) + ' &times;' + s.count + ' <span class="loc">' + esc(s.line || 'no stack') + '</span>' +
        (s.flagged ? '<div class="why">check: ' + s.flagged + ' alive after their last use (' + fmtBytes(s.flagged_bytes) + ')' +
          (s.held_by ? '; held by ' + esc(s.held_by) : '') + '</div>' : s.tensor ? '<div class="none">' + esc(s.tensor) + '</div>' : '') + '</li>';
    }
    h += '</ol>';
    const rp = x.replay;
    if (rp.error) return h + '<div class="none">not replayed: ' + esc(rp.error) + '</div>';
    h += '<div class="t">what would have fit, replayed in ' + fmtBytes(rp.capacity) +
      (rp.rules === 'pytorch' ? ' (PyTorch\'s rules)' : ' (vramtrace\'s rules)') + '</div>';
    if (!rp.reproduced) h += '<div class="why">the replay of the recorded settings does not run out of memory there: no fix is verified</div>';
    const fixes = x.fixes.filter((f) => f.verified), tried = x.fixes.filter((f) => !f.verified);
    h += fixes.length ? '<ul class="fixes">' + fixes.map((f) => '<li class="fix">' + esc(conf(f)) + ' <span class="sub">fits, peak reserved ' +
      fmtBytes(f.peak_reserved) + '</span></li>').join('') + '</ul>' : '<div class="none">nothing tried fits</div>';
    if (tried.length) h += '<div>tried, would not fit:</div><ul class="tried">' + tried.map((f) => '<li>' + esc(conf(f)) +
      ' <span class="sub">' + (f.error ? esc(f.error) : (f.fits ? 'fits in replay, not verified' : 'OOM at event ' + f.oom_event) +
        ', peak reserved ' + fmtBytes(f.peak_reserved)) + '</span></li>').join('') + '</ul>';
    return h;
  }
  function showOom() {
    if (!oom) return;
    $('oom-panel').hidden = false;
    $('oom').innerHTML = oomHTML(oom.x);
    $('oom-go').addEventListener('click', () => {
      view.moment = oom.ax;
      showTop();
      schedule();
    });
  }

  /* A tape finding's step peak (the moment it was alive and idle at):
   * a violet triangle on the plot's top edge. */
  function drawTapePeaks(ctx, L, T, PW) {
    if (!tapePeaks.length) return;
    ctx.save();
    ctx.fillStyle = '#8e24aa';
    let last = -1e9;
    for (const t of tapePeaks.slice().sort((a, b) => a - b)) {
      const x = Math.round(pxOfX(view.mode === 'time' ? t : lowerBound(evT, nE, t) + 0.5, L, PW));
      if (x < L || x > L + PW || x - last < 3 * dpr) continue;
      last = x;
      ctx.beginPath();
      ctx.moveTo(x - 4 * dpr, T); ctx.lineTo(x + 4 * dpr, T); ctx.lineTo(x, T + 7 * dpr); ctx.closePath();
      ctx.fill();
    }
    ctx.restore();
  }

  /* The lane of the storages vramtrace did not allocate: bands stacked in
   * allocation order, coloured by call site, under the same x axis as the
   * device timeline; the top of the stack is their memory curve. Every
   * band is exact (a band thinner than a pixel still adds its height). */
  let extPlot = null;
  function drawExternal(L, R) {
    if (!nX) return;
    sizeCanvas(ext);
    const W = ext.width, H = ext.height;
    const T = Math.round(M.t * dpr), B = Math.round(M.b * dpr);
    const PW = Math.max(1, W - L - R), PH = Math.max(1, H - T - B);
    const ctx = ext.getContext('2d');
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const st = columnStates(PW, extAt, extCurve);
    let ymax = 1;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) ymax = Math.max(ymax, extAt(st[c]));
    ymax *= 1.04;
    const ys = PH / ymax;
    const img = ctx.createImageData(PW, PH);
    const px = new Uint32Array(img.data.buffer);
    const ids = new Int32Array(PW * PH);
    const sel = view.selected;
    xsweep.reset();
    const list = xsweep.list, on = xsweep.on;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      xsweep.to(s);
      const t = timeAt(s);
      let off = 0, yPrev = PH;
      for (let i = 0, n = xsweep.len; i < n && yPrev > 0; i++) {
        const l = list[i];
        if (!on[l]) continue;
        off += lSize[l];
        let top = Math.round(PH - off * ys);
        if (top < 0) top = 0;
        if (top >= yPrev) continue;
        paintBand(px, ids, PW, c, top, yPrev, l, lLinger[l] <= t, l === sel);
        yPrev = top;
      }
    }
    ctx.putImageData(img, L, T);
    drawAxes(ctx, L, T, PW, PH, 0, ymax, dpr);
    drawMarks(ctx, L, T, PW, PH);
    drawTapePeaks(ctx, L, T, PW);
    drawMoment(ctx, L, T, PW, PH);
    extPlot = { L, T, PW, PH, st, ids };
    if (extTipEv && !tip.hidden) extTip(extTipEv);
  }

  function drawSegments(st, PW, L, R) {
    sizeCanvas(seg);
    const W = seg.width, H = seg.height;
    const T = Math.round(6 * dpr), B = Math.round(18 * dpr);
    const PH = Math.max(1, H - T - B);
    const ctx = seg.getContext('2d');
    ctx.clearRect(0, 0, W, H);
    let ymax = 1;
    for (let c = 0; c < PW; c++) if (st[c] !== -2) ymax = Math.max(ymax, resvAt(st[c]), allocAt(st[c]));
    ymax *= 1.05;
    const ys = PH / ymax;
    for (let c = 0; c < PW; c++) {
      const s = st[c];
      if (s === -2) continue;
      const a = allocAt(s), r = Math.max(resvAt(s), a);
      const ya = ys * a, yr = ys * r;
      ctx.fillStyle = '#4f7fd8';
      ctx.fillRect(L + c, T + PH - ya, 1, ya);
      ctx.fillStyle = '#f0b35a';
      ctx.fillRect(L + c, T + PH - yr, 1, yr - ya);
    }
    drawAxes(ctx, L, T, PW, PH, 0, ymax, dpr);
    segPlot = { L, T, PW, PH, st };
  }
  let segPlot = null;

  // -------------------------------------------------------------- icicle
  // Depth of every stack node (parents are not promised to come before
  // their children in the page's data).
  const kDepth = new Int32Array(nK).fill(-1);
  if (nK) kDepth[0] = 0;
  for (let k = 1; k < nK; k++) {
    const path = [];
    let j = k;
    while (j > 0 && kDepth[j] < 0 && path.length < 4096) { path.push(j); j = kParent[j]; }
    let d = j > 0 ? kDepth[j] : 0;
    for (let i = path.length - 1; i >= 0; i--) kDepth[path[i]] = ++d;
  }
  const kByDepth = Array.from({ length: nK }, (_, i) => i).sort((a, b) => kDepth[a] - kDepth[b]);
  // The icicle's tree: the stack prefix tree, less (unless view.flameAll)
  // the frames the text views fold on paths with Python frames (the
  // interpreter's own and torch's dispatch plumbing, as stackHTML does): a
  // folded node's bytes and callees go to its nearest kept caller, and
  // callees that then name the same frame there are one box.
  const flameTrees = {};
  function flameTree(all) {
    const key = all ? 'all' : 'folded';
    if (flameTrees[key]) return flameTrees[key];
    const fold = new Uint8Array(nK);
    let nfolded = 0;
    if (!all) {
      // A node is on a path with Python frames when one is at it, among
      // its callers (above) or among its callees (below).
      const above = new Uint8Array(nK), below = new Uint8Array(nK);
      for (const k of kByDepth) if (k > 0) above[k] = isPython(kFrame[k]) || above[kParent[k]] ? 1 : 0;
      for (let i = nK - 1; i >= 0; i--) {
        const k = kByDepth[i];
        if (k > 0 && (below[k] || isPython(kFrame[k]))) { below[k] = 1; below[kParent[k]] = 1; }
      }
      for (let k = 1; k < nK; k++) {
        const fr = kFrame[k];
        if ((above[k] || below[k]) && (isPython(fr) ? isPlumbing(fr) : isInterpreter(fr))) { fold[k] = 1; nfolded++; }
      }
    }
    const of = new Int32Array(nK);          // stack node -> tree node
    const parent = [0], frame = [0], rep = [0];   // per tree node; rep: a stack node of it
    const byKey = new Map();
    for (const k of kByDepth) {
      if (k === 0) continue;
      const p = of[kParent[k]];
      if (fold[k]) { of[k] = p; continue; }
      const id = p + ':' + kFrame[k];
      let d = byKey.get(id);
      if (d === undefined) {
        d = parent.length;
        byKey.set(id, d);
        parent.push(p); frame.push(kFrame[k]); rep.push(k);
      }
      of[k] = d;
    }
    return (flameTrees[key] = { n: parent.length, parent, frame, rep, of, nfolded });
  }
  let flameRects = [];
  function drawFlame() {
    sweep.reset();
    sweep.to(peakState);
    const T = flameTree(view.flameAll);
    const nT = T.n;
    const bytes = new Float64Array(nT);
    let total = 0;
    for (const l of sweep.alive()) { bytes[lSite[l] < nK ? T.of[lSite[l]] : 0] += lSize[l]; total += lSize[l]; }
    const cum = bytes.slice();
    for (let d = nT - 1; d > 0; d--) if (cum[d] > 0) cum[T.parent[d]] += cum[d];   // children after parents
    const children = new Map();
    for (let d = 1; d < nT; d++) {
      if (cum[d] <= 0) continue;
      const p = T.parent[d];
      if (!children.has(p)) children.set(p, []);
      children.get(p).push(d);
    }
    const root = view.flameRoot < nT && cum[view.flameRoot] > 0 ? view.flameRoot : 0;
    const tog = $('flame-all');
    tog.parentNode.hidden = flameTree(false).nfolded === 0;
    tog.checked = view.flameAll;
    const wrap = $('flame-wrap');
    const rowH = 17;
    let rows = 1;
    (function depthOf(k, d) {
      rows = Math.max(rows, d + 1);
      if (d > 60) return;
      for (const c of children.get(k) || []) depthOf(c, d + 1);
    })(root, 0);
    wrap.style.height = Math.min(Math.max(rows, 2) * rowH + 4, 640) + 'px';
    sizeCanvas(flame);
    const ctx = flame.getContext('2d');
    const W = flame.width;
    ctx.clearRect(0, 0, W, flame.height);
    ctx.font = (11 * dpr) + 'px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    flameRects = [];
    const rh = rowH * dpr;
    const rootBytes = cum[root] || 1;
    $('flame-label').textContent = peakState >= -1 && total > 0
      ? '(' + fmtBytes(total) + ' live at ' + (peakState < 0 ? 'start' : fmtTime(evT[peakState])) + ')' : '';
    function box(k, x, w, d) {
      if (w < 0.5) return;
      const y = d * rh;
      const frLabel = k === 0 ? 'all live allocations' : frameText(T.frame[k]).fn;
      const col = siteRGBA[T.rep[k]];
      ctx.fillStyle = k === 0 ? '#c9c9d1' : '#' + (col & 0xffffff).toString(16).padStart(6, '0').replace(/(..)(..)(..)/, '$3$2$1');
      ctx.fillRect(x, y, Math.max(w - 1, 0.5), rh - 1);
      if (w > 40 * dpr) {
        ctx.fillStyle = '#111';
        const label = frLabel + ' ' + fmtBytes(cum[k]);
        ctx.save();
        ctx.beginPath(); ctx.rect(x, y, w - 2, rh); ctx.clip();
        ctx.fillText(label, x + 3 * dpr, y + rh / 2);
        ctx.restore();
      }
      flameRects.push({ k, x, y, w, h: rh, bytes: cum[k], self: bytes[k] });
      if (d > 60) return;
      const ch = (children.get(k) || []).slice().sort((a, b) => cum[b] - cum[a]);
      let cx = x;
      for (const c of ch) {
        const cw = (cum[c] / cum[k]) * w;
        box(c, cx, cw, d + 1);
        cx += cw;
      }
    }
    if (total > 0) box(root, 0, (cum[root] / rootBytes) * W, 0);
    else { ctx.fillStyle = '#6b6b70'; ctx.fillText('nothing allocated', 6 * dpr, rh / 2); }
  }

  // ------------------------------------------------------------- panels
  /* A stack as the text views show it: where the program's own code is on
   * it, its lines first (innermost first) and the rest (the libraries'
   * Python frames, the native frames) under one line that opens; else every
   * frame, the interpreter's and torch's dispatch plumbing folded. */
  function stackHTML(node) {
    if (!node) return '<div class="none">no stack recorded</div>';
    const frs = stackFrames(node);
    const list = (xs) => '<ol class="stack">' + xs.map((fr) => {
      const t = frameText(fr);
      return '<li>' + esc(t.fn) + (t.where ? ' <span class="loc">' + esc(whereDef(t)) + '</span>' : '') + '</li>';
    }).join('') + '</ol>';
    // the interpreter's own frames and torch's dispatch plumbing, folded
    const python = frs.some(isPython);
    const fold = (xs) => python ? xs.filter((fr) => isPython(fr) ? !isPlumbing(fr) : !isInterpreter(fr)) : xs;
    const own = frs.filter(isUser);
    const rest = own.length ? frs.filter((fr) => !isUser(fr)) : frs;
    const kept = fold(rest), folded = rest.length - kept.length;
    const note = folded ? '<div class="none">' + folded + ' interpreter and dispatch frames hidden</div>' : '';
    if (!own.length)
      return note + list(kept);
    return list(own) + '<details class="stack-rest"><summary>' + kept.length +
      ' library and native frames under them</summary>' + note + list(kept) + '</details>';
  }
  function streamName(i) { return meta.streams[i] === '0x0' ? 'default (0x0)' : meta.streams[i]; }

  /* A finding as `vramtrace check` tells it: what, why (a cycle: "held by
   * a reference cycle until gc ran"; a tape: its step and peak), and every
   * holder chain, in the checker's own text ("(cycle) Node.link → ..."). */
  const CHAIN_RULES = ['linger', 'pinned', 'cycle', 'tape'];
  function findingHTML(fi) {
    const f = findings[fi];
    let h = '<div class="t">' + esc(f.title || f.kind || 'finding') + '</div>';
    if (f.msg) h += '<div>' + esc(f.msg) + '</div>';
    if (f.why) h += '<div class="why">' + esc(f.why) + '</div>';
    if (f.lastUse != null) h += '<div>last use at ' + fmtTime(f.lastUse) + '</div>';
    if (f.peak != null) h += '<div>alive and unused at its step\'s peak, at ' + fmtTime(f.peak) + '</div>';
    else if (f.from != null) h += '<div>alive after its last use since ' + fmtTime(f.from) + '</div>';
    if (f.path && f.path.length) {
      h += '<div>held by' + (f.pathAt ? ' (' + esc(f.pathAt) + ')' : '') + ':</div><ol class="path">' +
        f.path.map((p) => '<li' + (p.startsWith('(cycle)') ? ' class="cycle"' : '') + '>' + esc(p) + '</li>').join('') + '</ol>';
    } else if (f.src === 'check' && CHAIN_RULES.includes(f.kind)) {
      h += '<div class="none">held by: no recorded reference (every tensor on it was dropped)</div>';
    }
    return h;
  }
  const findingBox = (fi) => '<div class="finding' + (findings[fi].kind === 'tape' ? ' tape' : '') + '">' + findingHTML(fi) + '</div>';
  /* A finding whose storage is not on the page (nothing drawn to select):
   * the finding alone. */
  function showFindingDetail(fi) {
    view.selected = -1;
    view.finding = fi;
    $('detail').innerHTML = '<h3>Checker finding</h3>' + findingBox(fi);
    showFindings();
    schedule();
  }

  function showDetail(l) {
    detail();
    const el = $('detail');
    if (l < 0) { el.innerHTML = 'Click a band in the timeline.'; return; }
    if (isExt(l)) { showExternalDetail(l); return; }
    const alive = lEnd[l] >= nE;
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    const te = alive ? null : evT[lEnd[l]];
    const fl = [];
    if (lFlags[l] & FL_ALIVE) fl.push('alive at the snapshot');
    if (lFlags[l] & FL_BEFORE) fl.push('allocated before the recorded window');
    if (lFlags[l] & FL_PENDING) fl.push('free pending stream events');
    if (lFlags[l] & FL_FREE_LOST) fl.push('free never recorded');
    if (lFlags[l] & FL_FREE_UNSEEN) fl.push('freed where the kept events do not show it (a gap, or after they were copied): not alive');
    if (lFlags[l] & FL_AFTER) fl.push('allocated after the last kept event');
    const streams = [streamName(lStream[l])].concat((extraStreams.get(l) || []).map(streamName));
    const dev = meta.devices[lDev[l]];
    let h = '<dl>';
    h += '<dt>allocation</dt><dd>' + esc(lifetimeTitle(l)) + '</dd>';
    h += '<dt>size</dt><dd>' + fmtBytes(lSize[l]) + ' (' + lSize[l] + ' B' + (lReq[l] ? ', requested ' + lReq[l] + ' B' : '') + ')</dd>';
    h += '<dt>address</dt><dd>' + hex(lAddr[l]) + (dev ? ' on cuda:' + dev.ord : '') + '</dd>';
    h += '<dt>allocated</dt><dd>' + (ta == null ? 'before the window' : fmtTime(ta) + ' (event #' + lAlloc[l] + ')') + '</dd>';
    h += '<dt>released</dt><dd>' + (te != null ? fmtTime(te) + ' (event #' + lEnd[l] + ')'
      : lFlags[l] & FL_PENDING ? 'freed by the program; the block still waits for stream work at the end'
        : 'never (alive at the end)') + '</dd>';
    h += '<dt>lifetime</dt><dd>' + (ta == null ? '?' : fmtTime((te == null ? lastT : te) - ta)) + (te == null ? '+' : '') + '</dd>';
    h += '<dt>streams</dt><dd>' + esc(streams.join(', ')) + '</dd>';
    if (fl.length) h += '<dt>state</dt><dd>' + esc(fl.join('; ')) + '</dd>';
    h += '</dl>';
    if (lFinding[l] >= 0) {
      h += '<h3>Checker finding</h3>' + findingBox(lFinding[l]);
    }
    h += '<h3>Allocation stack</h3>' + stackHTML(lSite[l]);
    h += '<h3>Free stack</h3>' + (alive ? '<div class="none">not freed</div>' : stackHTML(lFree[l]));
    el.innerHTML = h;
  }

  /* A storage vramtrace did not allocate: its life as the checker sees it. */
  function showExternalDetail(l) {
    detail();
    const alive = lEnd[l] >= nE;
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    const te = alive ? null : evT[lEnd[l]];
    const k = xRow[l];
    let h = '<dl>';
    h += '<dt>storage</dt><dd>' + esc(lName[l] ? 'tensor \'' + str(lName[l]) + '\'' : 'storage #' + l) + '</dd>';
    h += '<dt>size</dt><dd>' + fmtBytes(lSize[l]) + ' (' + lSize[l] + ' B)</dd>';
    h += '<dt>address</dt><dd>' + hex(lAddr[l]) + ' on ' + esc(extKind(l)) + ' (tracked; not allocated by vramtrace)</dd>';
    h += '<dt>allocated</dt><dd>' + (ta == null ? 'before the window' : fmtTime(ta) + ' (event #' + lAlloc[l] + ')') + '</dd>';
    h += '<dt>last use</dt><dd>' + (k >= 0 && xUse[k] >= 0 ? fmtTime(xUse[k]) : 'never used') +
      (k >= 0 ? ' (' + xNuse[k] + ' use' + (xNuse[k] === 1 ? '' : 's') + ', ' + xNt[k] + ' tensor' + (xNt[k] === 1 ? '' : 's') + ' bound)' : '') + '</dd>';
    h += '<dt>released</dt><dd>' + (te != null ? fmtTime(te) + ' (event #' + lEnd[l] + ')' : 'never (alive at the end)') + '</dd>';
    h += '<dt>lifetime</dt><dd>' + (ta == null ? '?' : fmtTime((te == null ? lastT : te) - ta)) + (te == null ? '+' : '') + '</dd>';
    h += '</dl>';
    if (lFinding[l] >= 0) {
      h += '<h3>Checker finding</h3>' + findingBox(lFinding[l]);
    }
    h += '<h3>Allocation stack</h3>' + stackHTML(lSite[l]);
    h += '<h3>Free stack</h3>' + (alive ? '<div class="none">not freed</div>' : stackHTML(lFree[l]));
    $('detail').innerHTML = h;
  }

  function showTop() {
    detail();
    const tbl = $('top');
    const m = view.moment > -2 ? view.moment : peakState;
    $('moment-label').textContent = (m < 0 ? 'the start' : fmtTime(evT[m]) + ' (event #' + m + ')') +
      (view.moment > -2 ? '' : ', the peak');
    sweep.reset();
    sweep.to(m);
    const alive = sweep.alive();
    alive.sort((a, b) => lSize[b] - lSize[a] || a - b);
    let sum = 0;
    for (const l of alive) sum += lSize[l];
    let h = '<tr><th class="num">size</th><th>name</th><th>call site</th><th class="num">age</th></tr>';
    for (const l of alive.slice(0, 40)) {
      const age = lAlloc[l] < 0 ? '?' : fmtTime(timeAt(m) - evT[lAlloc[l]]);
      h += '<tr class="row' + (l === view.selected ? ' sel' : '') + '" data-l="' + l + '"><td class="num">' + fmtBytes(lSize[l]) +
        '</td><td class="name" title="' + esc(lName[l] ? str(lName[l]) : '') + '">' +
        (lFinding[l] >= 0 ? '<b style="color:#d32f2f" title="checker finding">!</b> ' : '') + esc(lName[l] ? str(lName[l]) : '') +
        '</td><td class="site" title="' + esc(siteLabel(lSite[l])) + '">' + esc(siteLabel(lSite[l])) +
        '</td><td class="num">' + age + '</td></tr>';
    }
    h += '<tr><td class="num"><b>' + fmtBytes(sum) + '</b></td><td colspan="3">' + alive.length.toLocaleString() + ' allocation' + (alive.length === 1 ? '' : 's') + ' alive</td></tr>';
    tbl.innerHTML = h;
  }

  /* Memory the program holds that the cache did not serve (managed, pinned
   * host, pitched, arrays, explicit pools, VMM): per kind, then what is
   * alive at the snapshot, largest first. Not in the curves above. */
  function showUncached() {
    const u = meta.uncached || [];
    $('nuncached').textContent = '(' + u.length + ')';
    const tbl = $('uncached');
    if (!u.length) { tbl.innerHTML = '<tr><td class="none">none</td></tr>'; return; }
    const kinds = new Map();
    for (const [kind, size, , alive] of u) {
      const k = kinds.get(kind) || { n: 0, alive: 0, nAlive: 0 };
      k.n++;
      if (alive) { k.alive += size; k.nAlive++; }
      kinds.set(kind, k);
    }
    let h = '<tr><th>kind</th><th class="num">allocations</th><th class="num">alive</th></tr>';
    for (const [kind, k] of kinds) {
      h += '<tr class="ukind"><td>' + esc(kind) + '</td><td class="num">' + k.n.toLocaleString() +
        '</td><td class="num">' + fmtBytes(k.alive) + ' in ' + k.nAlive.toLocaleString() + '</td></tr>';
    }
    const alive = u.filter((x) => x[3]).sort((a, b) => b[1] - a[1]);
    h += '<tr><th class="num">size</th><th>kind</th><th>call site (alive at the snapshot)</th></tr>';
    for (const [kind, size, node] of alive.slice(0, 40)) {
      h += '<tr class="ualive"><td class="num">' + fmtBytes(size) + '</td><td>' + esc(kind) +
        '</td><td class="site" title="' + esc(siteLabel(node)) + '">' + esc(siteLabel(node)) + '</td></tr>';
    }
    tbl.innerHTML = h;
  }

  /* Findings by cause, as `vramtrace check` groups them (rule, owner name
   * and first holder path: one bug leaks one storage per step, each its
   * own finding): the checker's group of each (f.g), largest bytes first,
   * then the snapshot's recorded findings, one group per title. */
  const findingGroups = (() => {
    const byKey = new Map();
    findings.forEach((f, i) => {
      const key = f.g != null ? 'g' + f.g : 'r' + (f.kind || '') + '\u001f' + (f.title || '');
      let grp = byKey.get(key);
      if (!grp) byKey.set(key, (grp = { key, order: f.g != null ? f.g : Infinity, members: [], bytes: 0 }));
      grp.members.push(i);
      grp.bytes += f.bytes != null ? f.bytes : (f.l >= 0 && f.l < nL ? lSize[f.l] : 0);
    });
    return Array.from(byKey.values()).sort((a, b) => a.order - b.order || a.members[0] - b.members[0]);
  })();
  const openGroups = new Set();   // groups the user expanded

  function findingLine(f, i) {
    const sel = (f.l >= 0 && f.l === view.selected) || (f.l < 0 && view.finding === i);
    return '<div class="finding' + (f.kind === 'tape' ? ' tape' : '') + (sel ? ' sel' : '') + '" data-f="' + i + '">' +
      '<div class="t">' + esc(clip(f.title || f.kind, 200)) + '</div>' +
      (f.l >= 0 && f.l < nL ? '<div>' + esc(clip(lifetimeTitle(f.l), 120)) + ', ' + fmtBytes(lSize[f.l]) +
        (isExt(f.l) ? ' on ' + esc(extKind(f.l)) : '') + ' &middot; ' + esc(clip(siteLabel(lSite[f.l]), 160)) + '</div>' : '') +
      '</div>';
  }
  function showFindings() {
    const nG = findingGroups.length;
    $('nfindings').textContent = '(' + findings.length + (nG < findings.length ? ' from ' + nG + ' cause' + (nG === 1 ? '' : 's') : '') + ')';
    const el = $('findings');
    if (!findings.length) { el.innerHTML = '<div class="none">none' + (meta.checked ? '' : ' (run with --check to look for them)') + '</div>'; return; }
    el.innerHTML = findingGroups.map((g) => {
      if (g.members.length === 1) return findingLine(findings[g.members[0]], g.members[0]);
      const i = g.members[0], f = findings[i];
      const n = g.members.length;
      const held = f.path && f.path.length ? '<div class="path1">the first held by: ' + esc(clip(f.path[0], 200)) + '</div>' : '';
      return '<details class="fgroup' + (f.kind === 'tape' ? ' tape' : '') + '" data-g="' + esc(g.key) + '"' + (openGroups.has(g.key) ? ' open' : '') + '>' +
        '<summary class="finding' + (f.kind === 'tape' ? ' tape' : '') + '" data-f="' + i + '"><span class="count">' + n + ' &times;</span> ' +
        '<span class="t">' + esc(clip(f.title || f.kind, 200)) + '</span>' +
        '<div>' + n + ' findings from one cause, ' + fmtBytes(g.bytes) + ' in all (' + fmtBytes(g.bytes / n) + ' each on average); open to list them</div>' +
        held + '</summary>' +
        g.members.map((m) => findingLine(findings[m], m)).join('') + '</details>';
    }).join('');
  }

  function select(l, moment) {
    view.selected = l;
    view.finding = -1;
    if (moment !== undefined) view.moment = moment;
    showDetail(l);
    showTop();
    showFindings();
    schedule();
  }

  // ------------------------------------------------------------- tooltip
  function showTip(ev, html) {
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.hidden = false;
    const pad = 14;
    let x = ev.clientX + pad, y = ev.clientY + pad;
    const r = tip.getBoundingClientRect();
    if (x + r.width > innerWidth) x = ev.clientX - r.width - pad;
    if (y + r.height > innerHeight) y = ev.clientY - r.height - pad;
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }
  /* What the timeline drew under the mouse: lifetime + 1 (> 0), a summary
   * record -(r + 1) (< 0), or 0. */
  function idAtEvent(ev) {
    if (!plot) return 0;
    const r = tl.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) * dpr) - plot.L;
    const y = Math.floor((ev.clientY - r.top) * dpr) - plot.T;
    if (x < 0 || y < 0 || x >= plot.PW || y >= plot.PH) return 0;
    return plot.ids[y * plot.PW + x];
  }
  /* A summary band: what it stands for, at that column. */
  function summaryFacts(r) {
    const q = plot.sum;
    return { site: q.site[r], n: q.n[r], bytes: q.bytes[r], linger: q.linger[r], s: q.state[r] };
  }
  function tipForSummary(r) {
    const f = summaryFacts(r);
    let h = '<b>' + f.n.toLocaleString() + ' allocation' + (f.n === 1 ? '' : 's') + '</b> from ' + esc(clip(siteLabel(f.site), 160)) +
      ', <b>' + esc(fmtBytes(f.bytes)) + '</b> alive here';
    h += '\naggregate: each is thinner than a pixel or lives less than a pixel at this zoom; zoom in (wheel, shift+wheel) to see them one by one';
    h += '\nat ' + (f.s < 0 ? 'the start' : fmtTime(evT[f.s]));
    if (f.linger) h += '\n<span class="warn">' + f.linger + ' of them alive after their last use (hatched)</span>';
    return h;
  }
  function showAggregate(r) {
    const f = summaryFacts(r);
    view.selected = -1;
    let h = '<dl>';
    h += '<dt>aggregate</dt><dd>' + f.n.toLocaleString() + ' allocation' + (f.n === 1 ? '' : 's') + ' from one call site</dd>';
    h += '<dt>alive</dt><dd>' + fmtBytes(f.bytes) + ' (' + f.bytes + ' B) at ' + (f.s < 0 ? 'the start' : fmtTime(evT[f.s])) + '</dd>';
    if (f.linger) h += '<dt>findings</dt><dd>' + f.linger + ' alive after their last use</dd>';
    h += '</dl><div class="none">Each is too small or too short-lived to draw at this zoom: zoom in to pick one.</div>';
    h += '<h3>Allocation stack</h3>' + stackHTML(f.site);
    $('detail').innerHTML = h;
  }
  function columnState(ev, p, canvas) {
    if (!p) return -2;
    const r = canvas.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) * dpr) - p.L;
    if (x < 0 || x >= p.PW) return -2;
    return p.st[x];
  }
  function tipFor(l, s) {
    detail();
    let h = '<b>' + esc(fmtBytes(lSize[l])) + '</b> ' + esc(clip(lName[l] ? str(lName[l]) : 'allocation #' + l, 160));
    h += '\n' + esc(clip(siteLabel(lSite[l]), 160));
    const ta = lAlloc[l] < 0 ? null : evT[lAlloc[l]];
    h += '\nallocated ' + (ta == null ? 'before the window' : 'at ' + fmtTime(ta)) + ', ' +
      (lEnd[l] >= nE ? 'never freed' : 'freed at ' + fmtTime(evT[lEnd[l]]));
    if (isExt(l)) {
      const k = xRow[l];
      h += '\non ' + esc(extKind(l)) + ', not allocated by vramtrace; last use ' + (xUse[k] >= 0 ? 'at ' + fmtTime(xUse[k]) : ': never');
    }
    if (lFinding[l] >= 0) {
      const f = findings[lFinding[l]];
      h += '\n<span class="warn">' + esc(clip(f.title || f.kind, 200)) + (lLinger[l] <= timeAt(s) ? ' (past its last use here)' : '') + '</span>';
    }
    return h;
  }

  // ------------------------------------------------------------ interaction
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; drawTimeline(); });
  }
  function clampView() {
    const dm = domainMax();
    const minSpan = view.mode === 'time' ? Math.min(dm, 200) : Math.min(dm, 8);
    let span = Math.max(minSpan, Math.min(dm * 1.02, view.v1 - view.v0));
    let v0 = view.v0;
    if (v0 < -dm * 0.01) v0 = -dm * 0.01;
    if (v0 + span > dm * 1.01) v0 = dm * 1.01 - span;
    view.v0 = v0; view.v1 = v0 + span;
  }
  /* The first view: the run, not the wait before it nor the time after it.
   * Time: from the first event to the last (not to the snapshot, which a
   * program writes at exit, maybe seconds later). When the first mark (a
   * step) comes after a long quiet start, a quarter of the span or more (the
   * import of a framework, its first kernels loading between the weights and
   * the first step), the view starts a little before that mark; without
   * marks, the same for one quiet gap that takes over half the span after a
   * few early events. What the view leaves out on the left is said on the
   * plot, and "show all" brings it back. By event index: the same events. */
  function runRange() {
    // A handful of events: the whole recording, up to the snapshot, shows
    // what is alive at its end better than a cut would.
    if (nE < 16) return [0, domainMax()];
    const tFirst = evT[0], tLast = evT[nE - 1];
    let first = 0;   // the first event of the run
    if (meta.marks.length) {
      const m = Math.max(0, Math.min(nE - 1, meta.marks[0][0]));
      if (evT[m] - tFirst > 0.25 * (tLast - tFirst) && tLast > evT[m]) first = m;
    } else {
      let gap = 0, at = 0;
      for (let e = 1; e < nE; e++) if (evT[e] - evT[e - 1] > gap) { gap = evT[e] - evT[e - 1]; at = e; }
      if (gap > 0.5 * (tLast - tFirst) && at <= Math.max(8, 0.05 * nE) && tLast > evT[at]) first = at;
    }
    if (view.mode === 'event') {
      const lead = first ? Math.max(1, Math.round(0.04 * (nE - first))) : 0;
      return [Math.max(0, first - lead) - 0.5, nE + 0.5];
    }
    const span = Math.max(tLast - evT[first], 1);
    // A little lead-in: what the run starts from (weights, the first step's setup).
    const t0 = first ? Math.max(tFirst, evT[first] - 0.04 * span) : tFirst;
    return [t0 - 0.01 * span, tLast + 0.02 * span];
  }
  function resetView() {
    [view.v0, view.v1] = runRange();
    clampView();
    setYMode('fit');
    schedule();
  }
  function showAll() {
    view.v0 = 0; view.v1 = domainMax();
    clampView();
    schedule();
  }
  /* The y range stays inside [0, the tallest stack of the whole run] and
   * never narrower than a few KiB. */
  function clampY() {
    const top = Math.max(1, initAlloc, initResv, peakAlloc, peakResv) * 1.05;
    let span = Math.max(4096, Math.min(top, view.y1 - view.y0));
    let y0 = Math.max(0, view.y0);
    if (y0 + span > top) y0 = Math.max(0, top - span);
    view.y0 = y0; view.y1 = y0 + span;
  }
  function setYMode(mode) {
    view.yMode = mode;
    $('ymode').value = mode;
  }

  /* Wheel zooms x around the cursor; with shift (on the timeline, `yZoom`)
   * it zooms bytes around the cursor instead and locks the y range. Drag
   * pans x, and y too while y is locked. */
  function attachPlotInteraction(canvas, getPlot, yZoom) {
    let drag = null;
    canvas.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      const p = getPlot();
      if (!p) return;
      const r = canvas.getBoundingClientRect();
      if (yZoom && ev.shiftKey) {
        // Browsers turn shift+wheel into a horizontal scroll: take either delta.
        const fy = Math.min(1, Math.max(0, ((ev.clientY - r.top) * dpr - p.T) / p.PH));
        const anchor = view.y0 + (1 - fy) * (view.y1 - view.y0);
        const span = (view.y1 - view.y0) * Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
        view.y0 = anchor - (1 - fy) * span;
        view.y1 = view.y0 + span;
        setYMode('lock');
        clampY();
        schedule();
        return;
      }
      const fx = Math.min(1, Math.max(0, ((ev.clientX - r.left) * dpr - p.L) / p.PW));
      const anchor = view.v0 + fx * (view.v1 - view.v0);
      const k = Math.exp((ev.deltaY || ev.deltaX) * 0.0015);
      const span = (view.v1 - view.v0) * k;
      view.v0 = anchor - fx * span;
      view.v1 = view.v0 + span;
      clampView();
      schedule();
    }, { passive: false });
    canvas.addEventListener('mousedown', (ev) => {
      drag = { x: ev.clientX, y: ev.clientY, v0: view.v0, v1: view.v1, y0: view.y0, y1: view.y1, moved: false };
    });
    window.addEventListener('mousemove', (ev) => {
      if (!drag) return;
      const p = getPlot();
      const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
      if (Math.abs(dx) > 3 || Math.abs(dy) > 3) drag.moved = true;
      if (!drag.moved || !p) return;
      const shift = (-dx * dpr / p.PW) * (drag.v1 - drag.v0);
      view.v0 = drag.v0 + shift; view.v1 = drag.v1 + shift;
      clampView();
      if (yZoom && view.yMode === 'lock') {
        const ysh = (dy * dpr / p.PH) * (drag.y1 - drag.y0);
        view.y0 = drag.y0 + ysh; view.y1 = drag.y1 + ysh;
        clampY();
      }
      schedule();
    });
    window.addEventListener('mouseup', () => { setTimeout(() => { drag = null; }, 0); });
    return () => drag && drag.moved;
  }

  const tlDragging = attachPlotInteraction(tl, () => plot, true);
  const segDragging = attachPlotInteraction(seg, () => segPlot);

  let tipEv = null;   // the last mouse position over the timeline, to refresh its tooltip after a redraw
  function timelineTip(ev) {
    const id = idAtEvent(ev);
    if (id === 0) { showTip(ev, null); return; }
    showTip(ev, id > 0 ? tipFor(id - 1, columnState(ev, plot, tl)) : tipForSummary(-id - 1));
  }
  tl.addEventListener('mousemove', (ev) => { tipEv = { clientX: ev.clientX, clientY: ev.clientY }; timelineTip(ev); });
  tl.addEventListener('mouseleave', () => { tipEv = null; tip.hidden = true; });
  tl.addEventListener('click', (ev) => {
    if (tlDragging()) return;
    const s = columnState(ev, plot, tl);
    const id = idAtEvent(ev);
    if (id < 0) {
      const f = summaryFacts(-id - 1);
      view.moment = f.s;
      showAggregate(-id - 1);
      showTop();
      showFindings();
      schedule();
      return;
    }
    select(id - 1, s === -2 ? view.moment : s);
  });
  // The lane of external storages: hover and click as on the timeline.
  const extDragging = attachPlotInteraction(ext, () => extPlot);
  let extTipEv = null;
  function extIdAt(ev) {
    if (!extPlot) return 0;
    const r = ext.getBoundingClientRect();
    const x = Math.floor((ev.clientX - r.left) * dpr) - extPlot.L;
    const y = Math.floor((ev.clientY - r.top) * dpr) - extPlot.T;
    if (x < 0 || y < 0 || x >= extPlot.PW || y >= extPlot.PH) return 0;
    return extPlot.ids[y * extPlot.PW + x];
  }
  function extTip(ev) {
    const id = extIdAt(ev);
    showTip(ev, id > 0 ? tipFor(id - 1, columnState(ev, extPlot, ext)) : null);
  }
  ext.addEventListener('mousemove', (ev) => { extTipEv = { clientX: ev.clientX, clientY: ev.clientY }; extTip(ev); });
  ext.addEventListener('mouseleave', () => { extTipEv = null; tip.hidden = true; });
  ext.addEventListener('click', (ev) => {
    if (extDragging()) return;
    const id = extIdAt(ev);
    if (id <= 0) return;
    const s = columnState(ev, extPlot, ext);
    select(id - 1, s === -2 ? view.moment : s);
  });
  seg.addEventListener('mousemove', (ev) => {
    const s = columnState(ev, segPlot, seg);
    if (s === -2) { showTip(ev, null); return; }
    const a = allocAt(s), r = resvAt(s);
    showTip(ev, '<b>' + (s < 0 ? 'start' : fmtTime(evT[s])) + '</b>\nreserved ' + fmtBytes(r) +
      (replayCurve && s <= replayEnd ? '\nreplayed reserved ' + fmtBytes(replayAt(s)) : '') +
      '\nallocated ' + fmtBytes(a) +
      '\nunused in cache ' + fmtBytes(Math.max(0, r - a)) + (r > 0 ? ' (' + (100 * Math.max(0, r - a) / r).toFixed(1) + '%)' : ''));
  });
  seg.addEventListener('mouseleave', () => { tip.hidden = true; });
  seg.addEventListener('click', (ev) => {
    if (segDragging()) return;
    const s = columnState(ev, segPlot, seg);
    if (s !== -2) select(view.selected, s);
  });
  function flameAt(ev) {
    const r = flame.getBoundingClientRect();
    const x = (ev.clientX - r.left) * dpr, y = (ev.clientY - r.top) * dpr;
    return flameRects.find((b) => x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + b.h);
  }
  flame.addEventListener('mousemove', (ev) => {
    const b = flameAt(ev);
    if (!b) { showTip(ev, null); return; }
    let h;
    if (b.k === 0) h = '<b>' + fmtBytes(b.bytes) + '</b> live at the peak';
    else {
      const t = frameText(flameTree(view.flameAll).frame[b.k]);
      h = '<b>' + esc(fmtBytes(b.bytes)) + '</b> ' + esc(t.fn) + (t.where ? '\n' + esc(whereDef(t)) : '') +
        (b.self ? '\nallocated right here: ' + fmtBytes(b.self) : '');
    }
    showTip(ev, h + '\n(click: zoom in/out)');
  });
  flame.addEventListener('mouseleave', () => { tip.hidden = true; });
  flame.addEventListener('click', (ev) => {
    const b = flameAt(ev);
    if (!b) return;
    view.flameRoot = b.k === view.flameRoot && b.k !== 0 ? flameTree(view.flameAll).parent[b.k] : b.k;
    drawFlame();
  });
  $('flame-all').addEventListener('change', () => {
    // Tree nodes differ between the two trees: start again from the top.
    view.flameAll = $('flame-all').checked;
    view.flameRoot = 0;
    drawFlame();
  });
  $('top').addEventListener('click', (ev) => {
    const tr = ev.target.closest('tr[data-l]');
    if (tr) select(+tr.dataset.l);
  });
  $('findings').addEventListener('click', (ev) => {
    const d = ev.target.closest('[data-f]');
    if (!d) return;
    // A group's head: opens or closes it (the list is drawn again below, so
    // the state lives in openGroups) and selects its first finding.
    const g = d.tagName === 'SUMMARY' ? d.parentNode.dataset.g : null;
    if (g != null) {
      ev.preventDefault();
      if (openGroups.has(g)) openGroups.delete(g); else openGroups.add(g);
      showFindings();
    }
    const f = findings[+d.dataset.f];
    const l = f.l >= 0 ? f.l : (f.ls && f.ls.length ? f.ls[0][0] : -1);
    if (l < 0 || l >= nL) { showFindingDetail(+d.dataset.f); return; }
    const end = lEnd[l] >= nE ? nE - 1 : lEnd[l] - 1;
    select(l, Math.max(-1, end));
  });
  $('xmode').addEventListener('click', () => {
    // Keep the same stretch of history in view across the switch.
    if (view.mode === 'time') {
      const a = lowerBound(evT, nE, view.v0), b = lowerBound(evT, nE, view.v1);
      view.mode = 'event'; view.v0 = a; view.v1 = Math.max(b, a + 8);
    } else {
      const a = evT[Math.max(0, Math.min(nE - 1, Math.floor(view.v0)))] || 0;
      const b = evT[Math.max(0, Math.min(nE - 1, Math.ceil(view.v1)))] || lastT;
      view.mode = 'time'; view.v0 = a; view.v1 = Math.max(b, a + 200);
    }
    $('xmode').textContent = 'x: ' + (view.mode === 'time' ? 'time' : 'event index');
    clampView();
    schedule();
  });
  $('reset').addEventListener('click', resetView);
  $('all').addEventListener('click', showAll);
  $('ymode').addEventListener('change', () => {
    // 'lock' keeps the range of the last draw; the others fit again.
    view.yMode = $('ymode').value;
    schedule();
  });
  const devSel = $('device');
  devSel.innerHTML = '<option value="-1">all</option>' + meta.devices.map((d, i) =>
    '<option value="' + i + '">cuda:' + d.ord + (d.name ? ' ' + esc(str(d.name)) : '') + '</option>').join('');
  if (meta.devices.length === 1) { devSel.value = '0'; view.device = 0; }
  devSel.addEventListener('change', () => {
    view.device = +devSel.value;
    applyFilter();
    view.flameRoot = 0;
    drawFlame();
    select(view.selected);
  });
  window.addEventListener('resize', () => { dpr = window.devicePixelRatio || 1; schedule(); drawFlame(); });

  // ------------------------------------------------------------------ start
  function header() {
    const i = meta.info;
    $('cmd').textContent = i.command || '';
    $('cmd').title = i.command || '';
    let peakA = 0, peakR = 0;
    for (let e = 0; e < nE; e++) { peakA = Math.max(peakA, allocCurve[e]); peakR = Math.max(peakR, resvCurve[e]); }
    peakA = Math.max(peakA, initAlloc); peakR = Math.max(peakR, initResv);
    let truePeak = null;
    for (const d of meta.devices) if (d.truePeak != null) truePeak = Math.max(truePeak || 0, d.truePeak);
    const parts = [
      '<b>' + fmtBytes(peakA) + '</b> peak allocated' + (truePeak != null || i.eventsOverwritten || i.gaps ? ' in the kept events' : ''),
      '<b>' + fmtBytes(peakR) + '</b> peak reserved',
      '<b>' + (nL - nX).toLocaleString() + '</b> allocations',
      '<b>' + nE.toLocaleString() + '</b> events',
    ];
    let nOutside = 0;
    for (let l = 0; l < nL; l++) if (lFlags[l] & FL_OUTSIDE_POOL) nOutside++;
    if (nOutside) parts.push('<b>' + nOutside.toLocaleString() + '</b> allocations outside the framework\'s pool (in reserved, not drawn)');
    if (truePeak != null) parts.push('<b>' + fmtBytes(truePeak) + '</b> true peak allocated (allocator, whole run)');
    let uncachedAlive = 0;
    for (const x of meta.uncached || []) if (x[3]) uncachedAlive += x[1];
    if (uncachedAlive) parts.push('<b>' + fmtBytes(uncachedAlive) + '</b> alive not served by the cache');
    if (nX) parts.push('<b>' + nX.toLocaleString() + '</b> tracked ' + esc(extKinds.join(', ') || 'external') +
      ' storage' + (nX === 1 ? '' : 's') + ', peak <b>' + fmtBytes(peakExt) + '</b>');
    if (i.gaps) parts.push('<span style="color:#d32f2f">' + i.gaps.toLocaleString() + ' gaps in the events</span>');
    if (i.eventsOverwritten) parts.push('<span style="color:#d32f2f">' + i.eventsOverwritten.toLocaleString() + ' events lost</span>');
    if (i.host) parts.push(esc(i.host) + (i.pid ? ':' + i.pid : ''));
    $('stats').innerHTML = parts.join(' &middot; ');
  }

  applyFilter();
  if (nX) {
    // The lane of external storages: named for what they are on; first
    // when the run allocated nothing on a device.
    const panel = $('ext-panel');
    panel.hidden = false;
    $('ext-label').textContent = '(' + nX.toLocaleString() + ' on ' + (extKinds.join(', ') || 'external') +
      ', not allocated by vramtrace; peak ' + fmtBytes(peakExt) + ')';
    if (nL === nX) panel.parentNode.insertBefore(panel, panel.parentNode.firstElementChild);
    else {
      // Sized by what it holds next to the device's bytes: 112 bytes of CPU
      // tensors get a thin strip, a lane as large as the device a tall one.
      const share = peakExt / Math.max(1, peakExt + peakAlloc);
      $('ext-wrap').style.height = Math.round(Math.min(300, 72 + 260 * Math.sqrt(share))) + 'px';
    }
  } else {
    ext.width = 0; ext.height = 0;   // the hidden lane keeps no backing store
  }
  if (tapePeaks.length) for (const el of document.querySelectorAll('.tape-legend')) el.hidden = false;

  dpr = window.devicePixelRatio || 1;
  resetView();
  drawTimeline();   // first paint right away, not a frame later
  // Shown before the detail columns and the panels cost their time; they
  // are all there together after that.
  await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
  header();
  detail();
  showFindings();
  showTop();
  showUncached();
  showOom();
  drawFlame();

  /* Column c of a plot, rows [top, yPrev): lifetime l's band in its site's
   * colour (a darker top edge when it is 4 rows or more), hatched once past
   * its last use (violet for a tape finding), amber when selected; ids
   * remember which lifetime each pixel shows. */
  function paintBand(px, ids, PW, c, top, yPrev, l, linger, selected) {
    const site = lSiteC[l];
    const col = selected ? SEL : siteRGBA[site];
    const edge = yPrev - top >= 4 ? (selected ? SEL_DARK : siteDark[site]) : col;
    for (let y = top; y < yPrev; y++) {
      const p = y * PW + c;
      if (linger) px[p] = ((c + y) & 7) < 4 ? (lTape[l] ? TAPE_A : HATCH_A) : (selected ? SEL : lTape[l] ? TAPE_B : HATCH_B);
      else px[p] = y === top ? edge : col;
      ids[p] = l + 1;
    }
  }

  /* The selected moment (view.moment), a dashed line across a plot. */
  function drawMoment(ctx, L, T, PW, PH) {
    if (view.moment <= -2) return;
    const x = pxOfX(xOf(view.moment), L, PW);
    if (x < L || x > L + PW) return;
    ctx.save();
    ctx.setLineDash([4 * dpr, 3 * dpr]);
    ctx.strokeStyle = '#2962ff';
    ctx.lineWidth = dpr;
    ctx.beginPath(); ctx.moveTo(x, T); ctx.lineTo(x, T + PH); ctx.stroke();
    ctx.restore();
  }

  /* Client coordinates of a pixel that canvas `cv`, drawn as `p` (its plot:
   * ids of the lifetime drawn at each pixel), shows of lifetime l: the middle
   * of its tallest column run; null if it is not drawn. */
  function locateOn(p, cv, l) {
    if (!p) return null;
    let best = null;
    for (let x = 0; x < p.PW; x++) {
      let run = 0, y0 = -1;
      for (let y = 0; y < p.PH; y++) {
        if (p.ids[y * p.PW + x] === l + 1) { if (run === 0) y0 = y; run++; }
      }
      if (run && (!best || run > best.run)) best = { run, x, y: y0 + run / 2 };
    }
    if (!best) return null;
    const r = cv.getBoundingClientRect();
    return { x: r.left + (p.L + best.x + 0.5) / dpr, y: r.top + (p.T + best.y) / dpr };
  }

  // For tests and benchmarks: read-only facts about the page.
  window.__vt = {
    get firstPaintMs() { return firstPaint; },
    get drawCount() { return drawCount; },
    get lastDrawMs() { return lastDrawMs; },
    nLifetimes: nL - nX,   // device allocations (external storages: nExternal)
    /* External storages (the lane): how many, their names, whether l is one. */
    nExternal: nX,
    externalNames() {
      detail();
      const out = [];
      for (let l = 0; l < nL; l++) if (isExt(l)) out.push(str(lName[l]));
      return out;
    },
    isExternal(l) { return isExt(l); },
    /* Client coordinates of a pixel the external lane drew for lifetime l
     * (the middle of its tallest column run), or null. */
    locateExternal(l) { return locateOn(extPlot, ext, l); },
    /* The lane's drawn bands: distinct lifetimes in its id buffer. */
    externalDrawn() {
      if (!extPlot) return 0;
      const seen = new Set();
      for (const id of extPlot.ids) if (id > 0) seen.add(id);
      return seen.size;
    },
    nEvents: nE,
    /* The OOM: its axis position and the panel's text (null without one),
     * and the client x of its marker in the last draw (null: not drawn). */
    oom: oom ? { ax: oom.ax, size: oom.x.request.size } : null,
    oomPanelText() { return oom ? $('oom').textContent : null; },
    oomMarkerX() {
      if (oomX == null) return null;
      return tl.getBoundingClientRect().left + oomX / dpr;
    },
    /* The rows of the "Not served by the cache" panel, as text. */
    uncachedRows() { return Array.from(document.querySelectorAll('#uncached tr')).map((r) => r.textContent); },
    findLifetime(name) {
      detail();
      for (let l = 0; l < nL; l++) if (lName[l] && str(lName[l]) === name) return l;
      return -1;
    },
    /* Client coordinates of a pixel the timeline drew for lifetime l (the
     * middle of its tallest column run), or null if it is not visible. */
    locate(l) { return locateOn(plot, tl, l); },
    /* The decoded facts of lifetime l, and the one drawn at a canvas pixel. */
    lifetime(l) {
      detail();
      return { size: lSize[l], alloc: lAlloc[l], end: lEnd[l], site: lSite[l], name: str(lName[l]),
        addr: lAddr[l], flags: lFlags[l], finding: lFinding[l] };
    },
    idAt(x, y) { return plot ? plot.ids[y * plot.PW + x] - 1 : -1; },
    /* The icicle's boxes as drawn: function, bytes, client coordinates of
     * the box's middle. */
    flameBoxes() {
      const T = flameTree(view.flameAll), r = flame.getBoundingClientRect();
      return flameRects.filter((b) => b.k > 0).map((b) => ({ fn: frameText(T.frame[b.k]).fn, bytes: b.bytes,
        x: r.left + (b.x + b.w / 2) / dpr, y: r.top + (b.y + b.h / 2) / dpr }));
    },
    /* Client coordinates of the middle of the tallest summary band drawn
     * for a call site whose label contains `text`, or null. */
    locateSummary(text) {
      if (!plot) return null;
      const q = plot.sum;
      let best = -1;
      for (let r = 0; r < q.site.length; r++) {
        if (!siteLabel(q.site[r]).includes(text)) continue;
        if (best < 0 || q.bot[r] - q.top[r] > q.bot[best] - q.top[best]) best = r;
      }
      if (best < 0) return null;
      const rr = tl.getBoundingClientRect();
      return { x: rr.left + (plot.L + q.col[best] + 0.5) / dpr,
        y: rr.top + (plot.T + (q.top[best] + q.bot[best]) / 2) / dpr, px: q.bot[best] - q.top[best] };
    },
    /* The last draw's layout as shares of the plot (0: left or bottom
     * edge, 1: right or top): where the marked steps run (from the first
     * mark to the last event), the top of the tallest allocated stack, the
     * reserved bytes above the plot (0 if none), the events left of it. */
    get layout() {
      if (!plot) return null;
      const xs = (v) => (v - view.v0) / (view.v1 - view.v0);
      let amax = 0;
      for (const s of plot.st) if (s !== -2) amax = Math.max(amax, allocAt(s));
      return {
        stepsFrom: meta.marks.length ? xs(xOf(meta.marks[0][0])) : null,
        stepsTo: nE ? xs(xOf(nE - 1)) : null,
        allocTop: (amax - plot.y0) / (plot.y1 - plot.y0),
        reservedAbove: plot.rAbove,
        leftOut,
      };
    },
    /* The plot's size in canvas pixels (idAt's coordinates). */
    get plotSize() { return plot ? { rows: plot.PH, cols: plot.PW } : { rows: 0, cols: 0 }; },
    /* The last draw's level of detail and y range. */
    get lod() { return lastLod; },
    /* Force the draw's window mode on or off (null: as the view asks) and
     * the sweep's checkpoints off (false) or back (true); for tests that
     * compare what each way draws. */
    lodModes(windowMode, checkpoints) {
      lodWindow = windowMode;
      if (checkpoints === false) ckpt.ready = false;
      else if (checkpoints === true && !ckpt.ready) buildCheckpoints();
    },
    get checkpointsReady() { return ckpt.ready; },
    /* What the draw's sweep holds at each of the axis states `states`
     * (ascending), reset at the first as a draw would be with the given
     * level of detail (window: LONG_W or 0; checkpoints used or not): per
     * state the exact allocations in stacking order and, per site, the
     * small ones' bytes, count and bytes past their last use. */
    sweepStates(states, opts) {
      const keep = ckpt.ready;
      if (!opts.checkpoints) ckpt.ready = false;
      const timeMode = view.mode === 'time';
      dsw.reset(opts.minBytes, opts.minW, timeMode, opts.sel ?? -1, states[0], opts.window ? LONG_W : 0);
      ckpt.ready = keep;
      const col = columnSums(), recent = [], out = [];
      for (const s of states) {
        const t = timeAt(s);
        dsw.column(s, t, col, recent);
        const exact = [];
        for (let i = 0; i < dsw.len; i++) {
          const l = dsw.list[i], v = dsw.st[l];
          if (v === LOD_EXACT) exact.push(l);
        }
        exact.push(...recent);
        const sites = [];
        for (let k = 0; k < NS; k++) {
          const n = dsw.siteN[k] + col.N[k];
          if (n) sites.push([k, dsw.siteB[k] + col.B[k], n, dsw.siteLB[k] + col.LB[k], dsw.siteLN[k] + col.LN[k]]);
        }
        col.clear();
        out.push({ s, exact, sites });
      }
      return out;
    },
    /* The allocated bytes after axis event e, and the state a column over
     * the events [e0, e1) shows (the first highest, else the one before). */
    allocAt: (e) => allocAt(e),
    peakIn: (e0, e1) => peakIn(allocCurve, e0, e1, e0 - 1, allocAt(e0 - 1)),
    /* The axis positions of the sweep's checkpoints. */
    get checkpointPositions() { return ckpt.pos.slice(); },
    /* The last draw's id buffer (lifetime + 1, -(summary + 1), 0) and its
     * summary records, to compare two draws of the same view. */
    drawn() {
      if (!plot) return null;
      const q = plot.sum;
      return { ids: Array.from(plot.ids), sum: q.site.map((k, r) => [k, q.n[r], q.bytes[r], q.linger[r], q.state[r], q.col[r], q.top[r], q.bot[r]]) };
    },
    get yRange() { return { y0: plot ? plot.y0 : 0, y1: plot ? plot.y1 : 0, mode: view.yMode, locked: view.yMode === 'lock' }; },
    /* Client x of an x-axis value (ns or event index) in the last draw. */
    clientXOf(v) {
      if (!plot) return null;
      const rr = tl.getBoundingClientRect();
      return rr.left + (plot.L + ((v - view.v0) / (view.v1 - view.v0)) * plot.PW) / dpr;
    },
    /* Where lifetime l starts on the x axis (ns or event index). */
    startOf(l) { return view.mode === 'time' ? timeAt(lAlloc[l]) : lAlloc[l] + 0.5; },
    /* The first view's x range (the run), as [v0, v1]. */
    get fullRange() { return runRange(); },
    /* Show [v0, v1] on the x axis (ns or event index) and draw now. */
    zoomTo(v0, v1) { view.v0 = v0; view.v1 = v1; clampView(); drawTimeline(); },
    view,
    redraw: drawTimeline,
  };
})();
