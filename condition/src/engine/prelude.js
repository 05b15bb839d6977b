// Runs once per check, before the condition, with the check's `now` (ms since the epoch) and
// a seed. Replaces the only clocks QuickJS has: `Date.now()`, `new Date()` and `Date()` give
// `now`; `Math.random` becomes a generator seeded per check (QuickJS seeds its own from the
// time of day). Returns `now` as an ISO-8601 string.
(function (now, seed) {
  "use strict";
  const RealDate = Date;
  const construct = Reflect.construct;
  const imul = Math.imul;
  const ConditionDate = function Date(...args) {
    if (new.target === undefined) {
      return new RealDate(now).toString();
    }
    return construct(RealDate, args.length === 0 ? [now] : args, new.target);
  };
  const hidden = (value) => ({ value, writable: true, configurable: true });
  Object.defineProperties(ConditionDate, {
    prototype: { value: RealDate.prototype },
    length: { value: 7, configurable: true },
    now: hidden(() => now),
    parse: hidden(RealDate.parse),
    UTC: hidden(RealDate.UTC),
  });
  Object.defineProperty(RealDate.prototype, "constructor", hidden(ConditionDate));
  Object.defineProperty(globalThis, "Date", hidden(ConditionDate));

  let state = seed | 0;
  Object.defineProperty(
    Math,
    "random",
    hidden(function random() {
      state = (state + 0x6d2b79f5) | 0;
      let t = imul(state ^ (state >>> 15), 1 | state);
      t = (t + imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    }),
  );
  return new RealDate(now).toISOString();
})
