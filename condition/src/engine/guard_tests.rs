//! Every native builtin a condition can reach is either wrapped (`native.rs`, `WRAPPED`) or
//! listed, with the reason it may stay as it is, in `unwrapped.tsv`; and every line of that
//! file names a builtin that exists and is not wrapped.
//!
//! A QuickJS update that adds a builtin fails here until someone has read its source and
//! either wrapped it or written down why it needs no wrapper. Whether a builtin is wrapped is
//! found by calling it: a wrapper calls `checkpoint()` before anything else. The test never
//! decides by name or by source text which builtins are wrapped.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use rquickjs::{Context, Function, Runtime, Value};

use super::{Intrinsics, bytecode, native};

/// The builtins left unwrapped: `path<TAB>class<TAB>reason`, `#` comments.
const UNWRAPPED: &str = include_str!("unwrapped.tsv");

/// Walks everything reachable from `globalThis` (own properties, then the prototype, an
/// object once, by the first path found) and calls each native function, getter and setter
/// once (by the first path found) with an `undefined` receiver and no arguments; returns `[path, wrapped]` pairs, where
/// `wrapped` says whether `count()` moved during the call (made through
/// `Function.prototype.call`, which is not wrapped: the call itself moves nothing). Functions written in JavaScript
/// (the guard's own replacements) are not native and not listed.
const WALK: &str = r#"(count) => {
  const found = [];
  const seen = new Set();
  const probed = new Set();
  const sourceOf = Function.prototype.toString;
  const isNative = (f) => {
    try {
      return Reflect.apply(sourceOf, f, []).includes("[native code]");
    } catch {
      return false;
    }
  };
  const probe = (path, f) => {
    if (probed.has(f) || !isNative(f)) return;
    probed.add(f);
    const before = count();
    try {
      f.call(undefined);
    } catch {}
    found.push([path, count() !== before]);
  };
  const nameOf = (key) => (typeof key === "symbol" ? `[${key.description}]` : key);
  const visit = (path, object) => {
    if (object === null || (typeof object !== "object" && typeof object !== "function")) return;
    if (seen.has(object)) return;
    seen.add(object);
    const keys = Reflect.ownKeys(object);
    const children = [];
    for (const key of keys) {
      const descriptor = Reflect.getOwnPropertyDescriptor(object, key);
      const at = path === "" ? nameOf(key) : `${path}.${nameOf(key)}`;
      if (typeof descriptor.value === "function") probe(at, descriptor.value);
      if (descriptor.get) probe(`${at} (get)`, descriptor.get);
      if (descriptor.set) probe(`${at} (set)`, descriptor.set);
      if (key !== "constructor") children.push([at, descriptor.value]);
    }
    for (const [at, value] of children) visit(at, value);
    const prototype = Reflect.getPrototypeOf(object);
    if (prototype !== null) visit(path === "" ? "__proto__" : `${path}.__proto__`, prototype);
  };
  visit("", globalThis);
  return found;
}"#;

/// The native builtins a guarded context holds, with whether each is wrapped.
fn natives() -> BTreeMap<String, bool> {
    let runtime = Runtime::new().unwrap();
    let context = Context::custom::<Intrinsics>(&runtime).unwrap();
    context.with(|ctx| {
        let (_prelude, guard) = bytecode::functions(&ctx).unwrap();
        let calls = Rc::new(Cell::new(0u32));
        let checkpoint = {
            let calls = calls.clone();
            Function::new(ctx.clone(), move || calls.set(calls.get() + 1)).unwrap()
        };
        let count = {
            let calls = calls.clone();
            Function::new(ctx.clone(), move || calls.get()).unwrap()
        };
        let is_proxy = Function::new(ctx.clone(), |value: Value| value.is_proxy()).unwrap();
        let wrap_builtins = native::builtins_wrapper(&ctx, &checkpoint).unwrap();
        guard
            .call::<_, ()>((checkpoint, is_proxy, 1e6, wrap_builtins))
            .unwrap();
        let walk: Function = ctx.eval(WALK).unwrap();
        let found: Vec<Vec<Value>> = walk.call((count,)).unwrap();
        found
            .into_iter()
            .map(|pair| {
                let path: String = pair[0].get().unwrap();
                (path, pair[1].as_bool().unwrap())
            })
            .collect()
    })
}

#[test]
fn every_native_builtin_is_wrapped_or_listed_with_its_reason() {
    let natives = natives();
    let mut listed = BTreeMap::new();
    for (n, line) in UNWRAPPED.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(
            fields.len() == 3 && fields.iter().all(|f| !f.trim().is_empty()),
            "unwrapped.tsv line {}: want path, class and reason, tab-separated: {line:?}",
            n + 1
        );
        assert!(
            ["constant", "polls", "operator", "open"].contains(&fields[1]),
            "unwrapped.tsv line {}: no class {:?}",
            n + 1,
            fields[1]
        );
        assert!(
            listed.insert(fields[0], fields[1]).is_none(),
            "unwrapped.tsv lists {} twice",
            fields[0]
        );
    }
    let unlisted: Vec<&String> = natives
        .iter()
        .filter(|(path, wrapped)| !**wrapped && !listed.contains_key(path.as_str()))
        .map(|(path, _)| path)
        .collect();
    assert!(
        unlisted.is_empty(),
        "native builtins neither wrapped (native.rs, WRAPPED) nor listed in unwrapped.tsv: \
         {unlisted:#?}"
    );
    let stale: Vec<&&str> = listed
        .keys()
        .filter(|path| natives.get(**path) != Some(&false))
        .collect();
    assert!(
        stale.is_empty(),
        "unwrapped.tsv lists builtins that are wrapped or do not exist: {stale:#?}"
    );
    let wrapped = natives.values().filter(|w| **w).count();
    assert!(wrapped > 100, "only {wrapped} builtins wrapped");
}

#[test]
fn wrapping_refuses_holders_that_do_not_match_its_table() {
    let runtime = Runtime::new().unwrap();
    let context = Context::custom::<Intrinsics>(&runtime).unwrap();
    context.with(|ctx| {
        let checkpoint = Function::new(ctx.clone(), || ()).unwrap();
        let wrap_builtins = native::builtins_wrapper(&ctx, &checkpoint).unwrap();
        let wrap: Function = ctx
            .eval(
                "(wrap, holders) => { try { wrap(() => {}, holders); return 'wrapped'; } \
                 catch (e) { return `${e.name}: ${e.message}`; } }",
            )
            .unwrap();
        // `holders`: a JavaScript expression.
        let refused = |holders: &str| -> String {
            let holders: Value = ctx.eval(holders).unwrap();
            wrap.call((wrap_builtins.clone(), holders)).unwrap()
        };
        let empty_objects = |n: usize| format!("Array.from({{ length: {n} }}, () => ({{}}))");
        // One empty object for each row: the first row's `concat` is missing.
        assert_eq!(
            refused(&empty_objects(native::WRAPPED.len())),
            "TypeError: wrapBuiltins: Array.prototype has no function concat"
        );
        // A holder too many, or too few, is refused before anything is replaced.
        let rows = native::WRAPPED.len();
        assert_eq!(
            refused(&empty_objects(rows + 1)),
            format!(
                "TypeError: wrapBuiltins: {} holders for the {rows} rows of WRAPPED",
                rows + 1
            )
        );
        assert_eq!(
            refused(&empty_objects(rows - 1)),
            format!(
                "TypeError: wrapBuiltins: {} holders for the {rows} rows of WRAPPED",
                rows - 1
            )
        );
        assert_eq!(
            refused("({ length: 26 })"),
            "TypeError: wrapBuiltins: holders is not an array"
        );
    });
}
