/*
 * viz/timeline_names.js - how the page names and colours things: bytes and
 * times for people, frames, stacks and call sites, each site's colour, the
 * hatch and selection colours.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
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
  // Python frames (the recorder's, or a PyTorch snapshot's).
  function isPython(fr) { return str(F.mod[fr]) === 'python'; }
  /* The program's own code (not torch, the standard library or site-packages). */
  function isUser(fr) { return !!(F.user && F.user[fr]); }
  /* An installed library's code other than torch's (a framework: transformers' Trainer). */
  function isLibrary(fr) { return !!(F.lib && F.lib[fr]); }
  /* Plumbing between the program and the memory, folded as the text views
   * fold it: the renderer marks each frame by their rule (vt__frame_fold):
   * 1 in a stack with Python frames (`python`: torch's dispatch layers, the
   * interpreter's own native frames), 2 always (a recorder's own). */
  function isFolded(fr, python) {
    const k = F.fold[fr];
    return k === 2 || (k === 1 && python);
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
    const user = frs.findIndex(isUser);
    let pick = user >= 0 ? frs[user] : undefined;
    if (pick === undefined) pick = frs.find((fr) => isPython(fr) && !isFolded(fr, true));
    if (pick === undefined) pick = frs.find((fr) => F.fn[fr] > 0);
    if (pick === undefined) pick = frs[0];
    // The file's base name: labels sit in narrow columns and tooltips; the
    // detail panel's stacks show the full paths.
    const label = (fr) => {
      const t = frameText(fr);
      return t.fn + (t.where ? ' (' + t.where.replace(/^.*\//, '') + ')' : '');
    };
    s = label(pick);
    // Under the program's line, the innermost line of a library other than
    // torch that made it (a framework's: what `summary` and `oom` name
    // "inside it"; vt__snapshot_library_frame's rule).
    const lib = user > 0 ? frs.slice(0, user).find(isLibrary) : undefined;
    if (lib !== undefined) s += ', inside: ' + label(lib);
    siteCache.set(node, s);
    return s;
  }
  /* A library's own memory (cuBLAS's workspace, a handle): the innermost
   * frame of stack `node` that the renderer marks as making one
   * (vt__frame_makes_library_workspace), or -1. */
  const workspaceCache = new Map();
  function workspaceFrame(node) {
    if (node === 0 || !F.ws) return -1;
    let fr = workspaceCache.get(node);
    if (fr === undefined) {
      fr = -1;
      for (const f of stackFrames(node)) if (F.ws[f]) { fr = f; break; }
      workspaceCache.set(node, fr);
    }
    return fr;
  }
  /* What allocation l is called: its tensor's name; else, for a library's
   * own workspace (no tensor: a block under the line that ran the first
   * matrix product), the function that made it; else ''. */
  function allocName(l) {
    if (lName[l]) return str(lName[l]);
    const fr = workspaceFrame(lSite[l]);
    return fr < 0 ? '' : 'library workspace: ' + frameText(fr).fn;
  }
  function lifetimeTitle(l) {
    detail();
    return allocName(l) || 'allocation #' + l;
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

