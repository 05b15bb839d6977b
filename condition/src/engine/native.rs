//! The guard's wrappers, made natively: `wrapBuiltins(checkLength, holders)` replaces each
//! builtin [`WRAPPED`] lists by a function with the original's `name` and `length` that tests
//! the check's stop (and, for the generic Array builtins, the lengths `guard.js`'s
//! `checkLength` refuses) before it calls the original with the same `this` and arguments.
//!
//! A wrapper written in JavaScript took a closure, an object literal to make it a method (no
//! `prototype`, not a constructor, as builtins are) and two redefined properties; a native one
//! is one QuickJS object that holds its three values, which QuickJS's collector traces. The
//! list of what is wrapped lives here rather than in `guard.js`: walking it natively costs a
//! check about a third of what reading it from bytecode and looping over it in JavaScript did.
//! This module owns the only unsafe code of the crate besides loading the sandbox's bytecode;
//! it never keeps a value past the call that lent it and never frees one it did not get
//! owned. It calls QuickJS through `JS_Call`, the two function constructors, the property
//! reads and writes, `JS_ToInt32` (of a builtin's own `length`, a plain number), the atoms
//! and the throws.

#![allow(unsafe_code)]

use std::ffi::{CString, c_int};

use rquickjs::{Ctx, FromJs, Function, Value, qjs};

/// What a wrapper tests before it calls its original: the kind of a [`WRAPPED`] row.
const CHECKPOINT: c_int = 0;
/// Also `checkLength(this, 0)`: the generic Array builtins.
const THIS_LENGTH: c_int = 1;
/// Also `checkLength(argument, 1)` for each argument: `Array.prototype.concat`.
const ALL_LENGTHS: c_int = 2;

/// The builtins `wrapBuiltins` replaces, one row per holder and kind, in the order `guard.js`
/// passes the holders: the holder's name (for errors), what its wrappers test, and its keys,
/// separated by spaces (`@@x` is the well-known symbol `Symbol.x`). Every native builtin a
/// condition can reach and this table leaves alone is in `unwrapped.tsv` with the reason (its
/// cost does not grow with its input, or its loop asks the interrupt handler itself);
/// `guard_tests.rs` fails on any native builtin in neither.
#[rustfmt::skip]
pub(super) const WRAPPED: [(&str, c_int, &str); 26] = [
    ("Array.prototype", ALL_LENGTHS, "concat"),
    ("Array.prototype", THIS_LENGTH, "copyWithin fill includes indexOf join lastIndexOf reverse \
        shift slice sort splice toLocaleString toReversed toSorted toSpliced unshift with"),
    ("Array", CHECKPOINT, "from"),
    ("String.prototype", CHECKPOINT, "anchor concat endsWith fontcolor fontsize includes indexOf \
        isWellFormed lastIndexOf link localeCompare match matchAll normalize padEnd padStart \
        repeat replace replaceAll search split startsWith toLocaleLowerCase toLocaleUpperCase \
        toLowerCase toUpperCase toWellFormed trim trimEnd trimLeft trimRight trimStart"),
    ("String", CHECKPOINT, "fromCharCode fromCodePoint raw"),
    ("%TypedArray%.prototype", CHECKPOINT, "copyWithin fill includes indexOf join lastIndexOf \
        reverse set slice sort toReversed toSorted with"),
    ("%TypedArray%", CHECKPOINT, "from of"),
    ("Uint8Array", CHECKPOINT, "fromBase64 fromHex"),
    ("Uint8Array.prototype", CHECKPOINT, "setFromBase64 setFromHex toBase64 toHex"),
    ("RegExp", CHECKPOINT, "escape"),
    ("RegExp.prototype", CHECKPOINT, "exec compile test toString @@replace @@match @@matchAll \
        @@search @@split"),
    ("BigInt.prototype", CHECKPOINT, "toString"),
    ("Number.prototype", CHECKPOINT, "toString"),
    ("JSON", CHECKPOINT, "parse rawJSON stringify"),
    ("Object", CHECKPOINT, "assign create defineProperties entries freeze fromEntries \
        getOwnPropertyDescriptors getOwnPropertyNames getOwnPropertySymbols isFrozen isSealed \
        keys seal values"),
    ("Reflect", CHECKPOINT, "ownKeys"),
    ("ArrayBuffer.prototype", CHECKPOINT, "resize slice sliceToImmutable transfer \
        transferToImmutable transferToFixedLength"),
    ("SharedArrayBuffer.prototype", CHECKPOINT, "grow slice"),
    ("Map.prototype", CHECKPOINT, "delete get getOrInsert getOrInsertComputed has set"),
    ("Set.prototype", CHECKPOINT, "add delete difference has intersection isDisjointFrom \
        isSupersetOf symmetricDifference union"),
    ("WeakMap.prototype", CHECKPOINT, "delete"),
    ("WeakSet.prototype", CHECKPOINT, "delete"),
    ("FinalizationRegistry.prototype", CHECKPOINT, "unregister"),
    ("%IteratorPrototype%", CHECKPOINT, "chunks includes join toArray windows"),
    ("Math", CHECKPOINT, "hypot max min sumPrecise"),
    ("globalThis", CHECKPOINT, "decodeURI decodeURIComponent encodeURI encodeURIComponent escape \
        unescape"),
];

/// `wrapBuiltins(checkLength, holders)` for `guard.js`, holding the check's `checkpoint()`
/// (throws once the check must stop): replaces each builtin [`WRAPPED`] names, on the holders
/// in `holders` (an array, one holder per row of [`WRAPPED`]), by a wrapper.
/// `checkLength(value, which)` is the guard's, which throws for a length the builtins must not
/// walk (`which`: 0 for `this`, 1 for an argument).
pub(super) fn builtins_wrapper<'js>(
    ctx: &Ctx<'js>,
    checkpoint: &Function<'js>,
) -> rquickjs::Result<Function<'js>> {
    let mut data = [checkpoint.as_raw()];
    // SAFETY: `ctx` is live (we are inside its `with`); `JS_NewCFunctionData2` reads `data`'s
    // one value and takes a reference of its own (`js_dup`), so ours stays ours; the name is a
    // NUL-terminated literal it copies into an atom. It returns an owned value or
    // `JS_EXCEPTION`, which `owned` takes over.
    let raw = unsafe {
        qjs::JS_NewCFunctionData2(
            ctx.as_raw().as_ptr(),
            Some(wrap_builtins),
            c"wrapBuiltins".as_ptr(),
            2,
            0,
            1,
            data.as_mut_ptr(),
        )
    };
    Function::from_js(ctx, owned(ctx, raw)?)
}

/// Takes over `raw`, an owned value or `JS_EXCEPTION` (then the exception is pending in `ctx`).
fn owned<'js>(ctx: &Ctx<'js>, raw: qjs::JSValue) -> rquickjs::Result<Value<'js>> {
    // SAFETY: `JS_IsException` only reads the tag.
    if unsafe { qjs::JS_IsException(raw) } {
        return Err(rquickjs::Error::Exception);
    }
    // SAFETY: `raw` is owned and of `ctx`'s runtime, as the callers' constructors return it.
    Ok(unsafe { Value::from_raw(ctx.clone(), raw) })
}

/// `wrapBuiltins(checkLength, holders)`; `data` is `[checkpoint]`.
///
/// # Safety
///
/// Called by QuickJS only (a `JS_CLASS_C_FUNCTION_DATA` function made by
/// [`builtins_wrapper`]): `ctx` is live, `argv` holds at least the function's length, 2,
/// values (QuickJS pads it with `undefined`), `data` its 1, all lent for the call.
unsafe extern "C" fn wrap_builtins(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    _argc: c_int,
    argv: *mut qjs::JSValue,
    _magic: c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as the function's contract says; each holder read is owned here and freed once
    // its builtins are replaced.
    unsafe {
        let (check_length, holders, checkpoint) = (*argv, *argv.add(1), *data);
        if !qjs::JS_IsFunction(ctx, check_length) {
            return qjs::JS_ThrowTypeError(
                ctx,
                c"wrapBuiltins: checkLength is not a function".as_ptr(),
            );
        }
        let mut count = 0i64;
        if !qjs::JS_IsArray(holders) || qjs::JS_GetLength(ctx, holders, &mut count) < 0 {
            return qjs::JS_ThrowTypeError(ctx, c"wrapBuiltins: holders is not an array".as_ptr());
        }
        if usize::try_from(count).ok() != Some(WRAPPED.len()) {
            let wrong = CString::new(format!(
                "wrapBuiltins: {count} holders for the {} rows of WRAPPED",
                WRAPPED.len()
            ))
            .unwrap_or_default();
            return qjs::JS_ThrowTypeError(ctx, c"%s".as_ptr(), wrong.as_ptr());
        }
        for (index, (holder_name, kind, keys)) in (0u32..).zip(WRAPPED) {
            let holder = qjs::JS_GetPropertyUint32(ctx, holders, index);
            if qjs::JS_IsException(holder) {
                return holder;
            }
            let wrapped = Wrapped {
                checkpoint,
                check_length,
                kind,
            };
            let replaced = keys
                .split_ascii_whitespace()
                .all(|key| wrapped.replace(ctx, holder, holder_name, key));
            qjs::JS_FreeValue(ctx, holder);
            if !replaced {
                return qjs::JS_EXCEPTION;
            }
        }
        qjs::JS_UNDEFINED
    }
}

/// What each wrapper of one kind holds besides its original.
struct Wrapped {
    /// The check's `checkpoint()`.
    checkpoint: qjs::JSValue,
    /// The guard's `checkLength(value, which)`.
    check_length: qjs::JSValue,
    /// What the wrapper tests before its original: [`CHECKPOINT`], [`THIS_LENGTH`] or
    /// [`ALL_LENGTHS`].
    kind: c_int,
}

impl Wrapped {
    /// Replaces `holder[key]` (`@@x` is `Symbol.x`) by a wrapper of it; `false` with the
    /// exception pending when it cannot (`holder` has no such function, or out of memory).
    ///
    /// # Safety
    ///
    /// `ctx` is live and `holder` and the values `self` holds are of its runtime, lent for the
    /// call.
    unsafe fn replace(
        &self,
        ctx: *mut qjs::JSContext,
        holder: qjs::JSValue,
        holder_name: &str,
        key: &str,
    ) -> bool {
        // SAFETY: as the function's contract says; an atom made here is freed here (freeing a
        // well-known symbol's predefined atom does nothing); `original` is owned here and
        // freed once the wrapper holds its own reference; `JS_SetProperty` takes the wrapper.
        unsafe {
            let atom = match key {
                "@@replace" => qjs::JS_ATOM_Symbol_replace as qjs::JSAtom,
                "@@match" => qjs::JS_ATOM_Symbol_match as qjs::JSAtom,
                "@@matchAll" => qjs::JS_ATOM_Symbol_matchAll as qjs::JSAtom,
                "@@search" => qjs::JS_ATOM_Symbol_search as qjs::JSAtom,
                "@@split" => qjs::JS_ATOM_Symbol_split as qjs::JSAtom,
                name => qjs::JS_NewAtomLen(ctx, name.as_ptr().cast(), name.len() as _),
            };
            if atom == qjs::JS_ATOM_NULL {
                return false;
            }
            let original = qjs::JS_GetProperty(ctx, holder, atom);
            let replaced = if qjs::JS_IsException(original) {
                false
            } else if !qjs::JS_IsFunction(ctx, original) {
                let missing =
                    CString::new(format!("wrapBuiltins: {holder_name} has no function {key}"))
                        .unwrap_or_default();
                qjs::JS_ThrowTypeError(ctx, c"%s".as_ptr(), missing.as_ptr());
                false
            } else {
                let wrapper = self.wrapper(ctx, original);
                !qjs::JS_IsException(wrapper)
                    && qjs::JS_SetProperty(ctx, holder, atom, wrapper) >= 0
            };
            qjs::JS_FreeValue(ctx, original);
            qjs::JS_FreeAtom(ctx, atom);
            replaced
        }
    }

    /// A wrapper of `original` with its `name` and `length`: an owned value, or
    /// `JS_EXCEPTION` with the exception pending.
    ///
    /// # Safety
    ///
    /// `ctx` is live and `original` (a function) and the values `self` holds are of its
    /// runtime, lent for the call.
    unsafe fn wrapper(&self, ctx: *mut qjs::JSContext, original: qjs::JSValue) -> qjs::JSValue {
        // SAFETY: as the function's contract says; `JS_NewCFunctionData` takes references of
        // its own to what it holds; `length` is owned here and freed, `name` is owned and
        // handed to the property that takes it (or freed with the wrapper if that fails).
        unsafe {
            let length = qjs::JS_GetProperty(ctx, original, qjs::JS_ATOM_length as qjs::JSAtom);
            let mut length_of = 0;
            let read = qjs::JS_ToInt32(ctx, &mut length_of, length);
            qjs::JS_FreeValue(ctx, length);
            if read < 0 {
                return qjs::JS_EXCEPTION;
            }
            let mut held = [original, self.checkpoint, self.check_length];
            let wrapper = qjs::JS_NewCFunctionData(
                ctx,
                Some(call_wrapped),
                length_of.max(0),
                self.kind,
                3,
                held.as_mut_ptr(),
            );
            if qjs::JS_IsException(wrapper) {
                return wrapper;
            }
            // The name as the value it is: no atom made from it, as a C string would need.
            let name = qjs::JS_GetProperty(ctx, original, qjs::JS_ATOM_name as qjs::JSAtom);
            let flags = qjs::JS_PROP_CONFIGURABLE as c_int;
            if qjs::JS_IsException(name)
                || qjs::JS_DefinePropertyValue(ctx, wrapper, qjs::JS_ATOM_name as _, name, flags)
                    < 0
            {
                qjs::JS_FreeValue(ctx, wrapper);
                return qjs::JS_EXCEPTION;
            }
            wrapper
        }
    }
}

/// A wrapper's call: `checkpoint()`, the length tests its kind asks for, then the original;
/// `data` is `[original, checkpoint, checkLength]`, `magic` the kind.
///
/// # Safety
///
/// Called by QuickJS only (a function made by [`Wrapped::wrapper`]): `ctx` is live, `this`,
/// `argv[..argc]` and `data[..3]` are lent for the call.
unsafe extern "C" fn call_wrapped(
    ctx: *mut qjs::JSContext,
    this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
    kind: c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as the function's contract says; `passes` and `JS_Call` borrow what they are
    // given; the original's result is returned as it came (owned, or `JS_EXCEPTION` with the
    // exception pending, as a test's throw leaves it too).
    unsafe {
        let (original, checkpoint, check_length) = (*data, *data.add(1), *data.add(2));
        if !passes(ctx, checkpoint, &mut []) {
            return qjs::JS_EXCEPTION;
        }
        if kind >= THIS_LENGTH
            && !passes(
                ctx,
                check_length,
                &mut [this, qjs::JS_MKVAL(qjs::JS_TAG_INT, 0)],
            )
        {
            return qjs::JS_EXCEPTION;
        }
        if kind == ALL_LENGTHS {
            for i in 0..usize::try_from(argc).unwrap_or(0) {
                let mut args = [*argv.add(i), qjs::JS_MKVAL(qjs::JS_TAG_INT, 1)];
                if !passes(ctx, check_length, &mut args) {
                    return qjs::JS_EXCEPTION;
                }
            }
        }
        qjs::JS_Call(ctx, original, this, argc, argv)
    }
}

/// Calls the test `f(...args)` with an `undefined` receiver: `false` if it threw (the exception
/// pending in `ctx`); what it returned is freed.
///
/// # Safety
///
/// `ctx` is live and `f` and `args` are values of its runtime, lent for the call.
unsafe fn passes(ctx: *mut qjs::JSContext, f: qjs::JSValue, args: &mut [qjs::JSValue]) -> bool {
    // SAFETY: as the function's contract says; `JS_Call` borrows `f` and `args` and returns an
    // owned value, freed here, or `JS_EXCEPTION`, which owns nothing.
    unsafe {
        let argc = c_int::try_from(args.len()).unwrap_or(0);
        let returned = qjs::JS_Call(ctx, f, qjs::JS_UNDEFINED, argc, args.as_mut_ptr());
        if qjs::JS_IsException(returned) {
            return false;
        }
        qjs::JS_FreeValue(ctx, returned);
        true
    }
}
