// Runs once per check, before the condition. QuickJS asks its interrupt handler (deadline,
// cancel, broken limits) only every 10 000 jumps or calls, and many builtins loop natively
// without asking at all. So the builtins whose cost grows with their input are wrapped:
// - `checkpoint()` (the engine's own stop test) runs first, so a loop over expensive
//   builtins stops at its next call instead of 10 000 calls later;
// - the generic Array methods refuse a `this` (and `concat` an argument) longer than
//   `maxLength`, which no dense array fits in the heap: only a sparse array or an array-like
//   is that long, and walking its holes natively would never ask. The length must be a plain
//   number found without running program code (no Proxy, no getter, no valueOf), so what is
//   checked is what the builtin will see;
// - `flat` and `flatMap` are written here in JavaScript (their native versions walk nested
//   arrays, which nothing can check beforehand), so their loops ask like any other loop.
(function (checkpoint, isProxy, maxLength, wrapBuiltins) {
  "use strict";
  const apply = Reflect.apply;
  const ownKeys = Reflect.ownKeys;
  const getDescriptor = Object.getOwnPropertyDescriptor;
  const getPrototypeOf = Object.getPrototypeOf;
  const defineProperty = Object.defineProperty;
  const hasOwn = Object.hasOwn;
  const toObject = Object;
  const isArray = Array.isArray;
  const NumberCtor = Number;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const mathMin = Math.min;
  const mathTrunc = Math.trunc;
  const typedArrayLength = getDescriptor(getPrototypeOf(Uint8Array.prototype), "length").get;

  // A stack trace must never hand the program a function. With `Error.prepareStackTrace` set,
  // QuickJS passes it call sites whose `getFunction()` returns each frame's function: the
  // originals the wrappers hold, and the prelude's real `Date`, whenever program code (a
  // getter, a `valueOf`) runs beneath one of them. The hook is an accessor whose setter is
  // the only way to set it; it becomes `undefined` for good.
  defineProperty(Error, "prepareStackTrace", {
    value: undefined,
    writable: false,
    enumerable: false,
    configurable: false,
  });

  // `which`: 0 for the array a builtin is called on, 1 for an argument.
  const checkLength = (value, which) => {
    const what = which === 1 ? "an argument" : "the array";
    if (value === null || (typeof value !== "object" && typeof value !== "function")) {
      return;
    }
    let holder = value;
    let length;
    for (;;) {
      if (isProxy(holder)) {
        throw new TypeErrorCtor(`${what} is a Proxy, which the condition sandbox does not pass to this builtin`);
      }
      const descriptor = getDescriptor(holder, "length");
      if (descriptor !== undefined) {
        if (hasOwn(descriptor, "value")) {
          length = descriptor.value;
          break;
        }
        if (descriptor.get === typedArrayLength) {
          return;
        }
        throw new TypeErrorCtor(`${what} has a getter for length, which the condition sandbox does not pass to this builtin`);
      }
      holder = getPrototypeOf(holder);
      if (holder === null) {
        return;
      }
    }
    if (typeof length === "object" || typeof length === "function") {
      if (length !== null) {
        throw new TypeErrorCtor(`${what} has a length that is not a number`);
      }
    }
    if (typeof length === "symbol" || typeof length === "bigint") {
      return; // the builtin throws its own TypeError
    }
    const number = NumberCtor(length);
    if (number > maxLength) {
      throw new RangeErrorCtor(`${what} has length ${number}, over the condition sandbox's ${maxLength}`);
    }
  };

  const toLength = (value) => {
    const number = mathTrunc(NumberCtor(value));
    return number > 0 ? mathMin(number, 2 ** 53 - 1) : 0;
  };
  const flattenInto = (target, source, sourceLength, depth, mapper, thisArg) => {
    for (let i = 0; i < sourceLength; i++) {
      if (!(i in source)) {
        continue;
      }
      let element = source[i];
      if (mapper !== undefined) {
        element = apply(mapper, thisArg, [element, i, source]);
      }
      if (depth > 0 && isArray(element)) {
        flattenInto(target, element, toLength(element.length), depth - 1);
      } else {
        defineProperty(target, target.length, {
          value: element,
          writable: true,
          enumerable: true,
          configurable: true,
        });
      }
    }
  };
  const flat = {
    flat(depth) {
      checkpoint();
      const source = toObject(this);
      let levels = depth === undefined ? 1 : mathTrunc(NumberCtor(depth));
      if (!(levels > 0)) {
        levels = 0;
      }
      const target = [];
      flattenInto(target, source, toLength(source.length), levels);
      return target;
    },
  }.flat;
  const flatMap = {
    flatMap(mapper, thisArg) {
      checkpoint();
      const source = toObject(this);
      if (typeof mapper !== "function") {
        throw new TypeErrorCtor("flatMap needs a function");
      }
      const target = [];
      flattenInto(target, source, toLength(source.length), 1, mapper, thisArg);
      return target;
    },
  }.flatMap;

  // `Iterator.prototype.drop` skips its count natively, asking nothing, however many steps
  // that takes (an array iterator re-reads a length the program may raise to 2^32 - 1 after
  // making it). Its skipping is written here instead, as a generator whose loop asks like any
  // other; it closes the iterator it took over when it is closed early, as the native one does.
  const iteratorPrototype = getPrototypeOf(getPrototypeOf([][Symbol.iterator]()));
  const dropDescriptor = getDescriptor(iteratorPrototype, "drop");
  if (dropDescriptor !== undefined && typeof dropDescriptor.value === "function") {
    const stepOf = (iterator, next) => {
      const step = apply(next, iterator, []);
      if (step === null || (typeof step !== "object" && typeof step !== "function")) {
        throw new TypeErrorCtor("the iterator's next() did not return an object");
      }
      return step;
    };
    const dropping = function* (iterator, next, count) {
      let suspended = false;
      try {
        for (let skipped = 0; skipped < count; skipped++) {
          if (stepOf(iterator, next).done) {
            return;
          }
        }
        for (;;) {
          const step = stepOf(iterator, next);
          if (step.done) {
            return;
          }
          suspended = true;
          yield step.value;
          suspended = false;
        }
      } finally {
        // Closed while it waited at a value: close the iterator it took over.
        if (suspended) {
          const close = iterator.return;
          if (close !== undefined && close !== null) {
            apply(close, iterator, []);
          }
        }
      }
    };
    const drop = {
      drop(limit) {
        checkpoint();
        if (this === null || (typeof this !== "object" && typeof this !== "function")) {
          throw new TypeErrorCtor("Iterator.prototype.drop needs an object");
        }
        const number = NumberCtor(limit);
        if (number !== number) {
          throw new RangeErrorCtor("drop needs a number of values to skip");
        }
        const count = mathTrunc(number);
        if (count < 0) {
          throw new RangeErrorCtor("drop needs a number of values to skip of at least 0");
        }
        const iterator = this;
        return dropping(iterator, iterator.next, count);
      },
    }.drop;
    dropDescriptor.value = drop;
    defineProperty(iteratorPrototype, "drop", dropDescriptor);
  }

  // Each builtin `WRAPPED` lists (engine/native.rs) is replaced by a wrapper with the same
  // `name` and `length`, and a call that tests the check's stop first; the generic Array
  // builtins also refuse a `this` longer than `maxLength`, and `concat` each argument too.
  // One holder for each row of `WRAPPED`, in its order.
  const arrayPrototype = Array.prototype;
  arrayPrototype.flat = flat;
  arrayPrototype.flatMap = flatMap;
  const typedArray = getPrototypeOf(Uint8Array);
  wrapBuiltins(checkLength, [
    arrayPrototype, arrayPrototype, Array, String.prototype, String, typedArray.prototype,
    typedArray, Uint8Array, Uint8Array.prototype, RegExp, RegExp.prototype, BigInt.prototype,
    Number.prototype, JSON, Object, Reflect, ArrayBuffer.prototype,
    SharedArrayBuffer.prototype, Map.prototype, Set.prototype, WeakMap.prototype,
    WeakSet.prototype, FinalizationRegistry.prototype, iteratorPrototype, Math, globalThis,
  ]);
})
