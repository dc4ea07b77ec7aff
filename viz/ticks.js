/*
 * viz/ticks.js - axis ticks shared by both pages (inlined by `vramtrace viz`
 * before the timeline's script in a snapshot's page and before ranks.js in the page of
 * several ranks): one copy of the rules that space an axis's ticks.
 */
'use strict';

const vtTicks = Object.freeze({
  /* A step of 1, 2 or 5 times a power of ten that cuts `span` into about `n`. */
  niceStep(span, n) {
    const raw = span / n;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  },
  /* A power of two of bytes that cuts 0..max into at most `n` steps. */
  niceBytesStep(max, n) {
    let step = 1;
    while (max / step > n) step *= 2;
    return step;
  },
});
