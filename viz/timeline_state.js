/*
 * viz/timeline_state.js - the view (x range, device, selection, y mode)
 * and what it draws from: the memory curves of the device filter, a
 * replay's reserved bytes, the external storages' curve, each allocation's
 * level-of-detail facts and the sweeps (viz/sweep.js) over them.
 *
 * Part of the timeline page's one script function: see timeline_data.js.
 */
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
  // CUDA graphs' pools' reserved bytes (within resvCurve), null without pools
  const poolCurve = devPools.length ? new Float64Array(nE) : null;
  let initPool = 0;
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
    initResv = stepsCurve(devCurves, resvCurve);
    peakAlloc = best;
    peakResv = initResv;
    for (let e = 0; e < nE; e++) if (resvCurve[e] > peakResv) peakResv = resvCurve[e];
    if (poolCurve) initPool = stepsCurve(devPools, poolCurve);
    applyReplay();
    checkpointsLater();
  }
  // Per-device steps (axis position, bytes; -1: before the first event) of
  // the devices in view, summed into out (bytes after each axis event):
  // @return the bytes before the first event.
  function stepsCurve(devs, out) {
    out.fill(0);
    let init = 0;
    devs.forEach((c, i) => {
      if (view.device >= 0 && view.device !== i) return;
      let prev = 0;
      for (let k = 0; k < c.pos.length; k++) {
        if (c.pos[k] < 0) init += c.val[k] - prev;
        else out[c.pos[k]] += c.val[k] - prev;
        prev = c.val[k];
      }
    });
    let v = init;
    for (let e = 0; e < nE; e++) { v += out[e]; out[e] = v; }
    return init;
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
  const poolAt = (s) => (!poolCurve ? 0 : s < 0 ? initPool : poolCurve[s]);
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

