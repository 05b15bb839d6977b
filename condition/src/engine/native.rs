//! The guard's wrappers, made natively: `makeWrapper(original, name, length, kind,
//! checkLength)` returns a
//! function with the original's `name` and `length` that tests the check's stop (and, for the
//! generic Array builtins, the lengths `guard.js`'s `checkLength` refuses) before it calls the
//! original with the same `this` and arguments.
//!
//! A wrapper written in JavaScript took a closure, an object literal to make it a method (no
//! `prototype`, not a constructor, as builtins are) and two redefined properties; a native one
//! is one QuickJS object that holds its three values, which QuickJS's collector traces. This
//! module owns the only unsafe code of the crate besides loading the sandbox's bytecode; it
//! never keeps a value past the call that lent it and never frees one it did not get owned. It
//! calls QuickJS through `JS_Call`, the two function constructors, `JS_ToInt32` (which may run
//! a `valueOf`: the guard passes plain numbers), `JS_DefinePropertyValue` and the throws.

#![allow(unsafe_code)]

use std::ffi::c_int;

use rquickjs::{Ctx, FromJs, Function, Value, qjs};

/// What a wrapper tests before it calls its original, the `kind` `guard.js` passes.
const CHECKPOINT: c_int = 0;
/// Also `checkLength(this, 0)`: the generic Array builtins.
const THIS_LENGTH: c_int = 1;
/// Also `checkLength(argument, 1)` for each argument: `Array.prototype.concat`.
const ALL_LENGTHS: c_int = 2;

/// `makeWrapper` for `guard.js`, holding the check's `checkpoint()` (throws once the check
/// must stop). Its fifth argument is the guard's `checkLength(value, which)`, which throws for
/// a length the builtins must not walk (`which`: 0 for `this`, 1 for an argument).
pub(super) fn wrapper_maker<'js>(
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
            Some(make_wrapper),
            c"makeWrapper".as_ptr(),
            5,
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

/// `makeWrapper(original, name, length, kind, checkLength)`; `data` is `[checkpoint]`.
///
/// # Safety
///
/// Called by QuickJS only (a `JS_CLASS_C_FUNCTION_DATA` function made by [`wrapper_maker`]):
/// `ctx` is live, `argv` holds at least the function's length, 5, values (QuickJS pads it
/// with `undefined`), `data` its 1, all lent for the call.
unsafe extern "C" fn make_wrapper(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    _argc: c_int,
    argv: *mut qjs::JSValue,
    _magic: c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as the function's contract says; every value read is lent and only lent on
    // (`JS_NewCFunctionData` takes references of its own, and `JS_DupValue` makes the one the
    // `name` property takes); the wrapper is owned here until it is returned, and freed if
    // its name cannot be set.
    unsafe {
        let (original, name, length, kind, check_length) = (
            *argv,
            *argv.add(1),
            *argv.add(2),
            *argv.add(3),
            *argv.add(4),
        );
        if !qjs::JS_IsFunction(ctx, original) || !qjs::JS_IsFunction(ctx, check_length) {
            return qjs::JS_ThrowTypeError(ctx, c"makeWrapper wraps functions only".as_ptr());
        }
        let (mut length_of, mut kind_of) = (0, 0);
        if qjs::JS_ToInt32(ctx, &mut length_of, length) < 0
            || qjs::JS_ToInt32(ctx, &mut kind_of, kind) < 0
        {
            return qjs::JS_EXCEPTION;
        }
        if !(CHECKPOINT..=ALL_LENGTHS).contains(&kind_of) || length_of < 0 {
            return qjs::JS_ThrowRangeError(ctx, c"makeWrapper: no such kind or length".as_ptr());
        }
        let mut held = [original, *data, check_length];
        let wrapper = qjs::JS_NewCFunctionData(
            ctx,
            Some(call_wrapped),
            length_of,
            kind_of,
            3,
            held.as_mut_ptr(),
        );
        if qjs::JS_IsException(wrapper) {
            return wrapper;
        }
        // The name as the value it is: no atom made from it, as a C string would need.
        let flags = qjs::JS_PROP_CONFIGURABLE as c_int;
        let name = qjs::JS_DupValue(ctx, name);
        if qjs::JS_DefinePropertyValue(ctx, wrapper, qjs::JS_ATOM_name as _, name, flags) < 0 {
            qjs::JS_FreeValue(ctx, wrapper);
            return qjs::JS_EXCEPTION;
        }
        wrapper
    }
}

/// A wrapper's call: `checkpoint()`, the length tests its kind asks for, then the original;
/// `data` is `[original, checkpoint, checkLength]`, `magic` the kind.
///
/// # Safety
///
/// Called by QuickJS only (a function made by [`make_wrapper`]): `ctx` is live, `this`,
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
