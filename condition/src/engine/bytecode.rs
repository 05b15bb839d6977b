//! The sandbox's own JavaScript (`prelude.js` and `guard.js`) compiled once per process to
//! QuickJS bytecode, and instantiated in each check's fresh context from that bytecode.
//!
//! Parsing the two files took a third of a check; reading their bytecode takes a tenth of
//! that. Only the compiling is shared: each check still gets a runtime and a context of its
//! own, and the functions the bytecode makes live in that context alone. This module never
//! loads bytes it did not write itself, in this process, from these two files.

use std::sync::OnceLock;

use rquickjs::module::WriteOptions;
use rquickjs::{Context, Ctx, Function, Module, Runtime};

use super::Intrinsics;

const PRELUDE: &str = include_str!("prelude.js");
const GUARD: &str = include_str!("guard.js");

/// The module the two files become: each exports its function, and `forget` empties both
/// exports once the engine has taken them. A loaded module stays importable by its name in
/// its context, and a condition's `import('outpost:sandbox')` must find nothing it can call.
fn source() -> String {
    format!(
        "export let prelude = (\n{PRELUDE}\n);\nexport let guard = (\n{GUARD}\n);\n\
         export function forget() {{ prelude = undefined; guard = undefined; }}\n"
    )
}

/// The compiled module, made on first use; `Err` (the engine's message) if QuickJS could not
/// compile it, which would be a bug in the two files.
static COMPILED: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();

/// The compiled module's bytes, compiled on the first call.
pub(super) fn compiled() -> Result<&'static [u8], String> {
    COMPILED
        .get_or_init(|| {
            let runtime = Runtime::new().map_err(|e| e.to_string())?;
            let context = Context::custom::<Intrinsics>(&runtime).map_err(|e| e.to_string())?;
            context.with(|ctx| {
                Module::declare(ctx, "outpost:sandbox", source())
                    .and_then(|module| {
                        // Without the source and the line tables: less to read in every
                        // check, and a guard function's `toString` shows no source.
                        module.write(WriteOptions {
                            strip_source: true,
                            strip_debug: true,
                            ..WriteOptions::default()
                        })
                    })
                    .map_err(|e| e.to_string())
            })
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(Clone::clone)
}

/// The prelude's and the guard's functions, made in `ctx` from the compiled module (call
/// [`compiled`] first: its error is the caller's to report), and no longer reachable through
/// the module's exports.
pub(super) fn functions<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<(Function<'js>, Function<'js>)> {
    let module = load(ctx)?;
    let (module, evaluated) = module.eval()?;
    evaluated.finish::<()>()?;
    let functions = (module.get("prelude")?, module.get("guard")?);
    module.get::<_, Function>("forget")?.call::<_, ()>(())?;
    Ok(functions)
}

#[allow(unsafe_code)]
fn load<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Module<'js>> {
    let bytes =
        compiled().map_err(|e| rquickjs::Error::new_from_js_message("bytecode", "module", e))?;
    // SAFETY: `Module::load` (QuickJS's `JS_ReadObject`) trusts its bytes to be well-formed
    // bytecode of the same QuickJS: it does not check them. These are exactly what
    // `Module::write` of the QuickJS linked into this binary wrote, in this process, from the
    // two files above, and nothing else can reach this call: the bytes come from `compiled`
    // here, not from a caller. (QuickJS copies what it reads; it keeps no pointer into them.)
    unsafe { Module::load(ctx.clone(), bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_compiles_once_and_each_context_gets_functions_of_its_own() {
        let first = compiled().expect("the two files compile");
        assert!(!first.is_empty());
        assert_eq!(
            compiled().unwrap().as_ptr(),
            first.as_ptr(),
            "compiled once"
        );
        let runtime = Runtime::new().unwrap();
        let (a, b) = (
            Context::custom::<Intrinsics>(&runtime).unwrap(),
            Context::custom::<Intrinsics>(&runtime).unwrap(),
        );
        let installed = |context: &Context| {
            context.with(|ctx| {
                let (prelude, _guard) = functions(&ctx).unwrap();
                let iso: String = prelude.call((0.0, 1)).unwrap();
                let now: f64 = ctx.eval("Date.now()").unwrap();
                (iso, now)
            })
        };
        assert_eq!(installed(&a), ("1970-01-01T00:00:00.000Z".to_owned(), 0.0));
        // The other context's Date is its own: the prelude ran in `a` only.
        let untouched: bool = b.with(|ctx| ctx.eval("Date.now() > 0").unwrap());
        assert!(untouched);
    }
}
