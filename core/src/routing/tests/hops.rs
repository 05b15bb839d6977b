//! `Route::next_after`: a later reject moves to the next candidate, re-judged on fresh views.

use super::*;

#[test]
fn a_busy_reject_moves_on_and_access_is_rechecked_with_fresh_views() {
    let target = ExecuteTarget::chain();
    let bo_in = |name| ContextView {
        opted_in: vec![BO.into()],
        ..view(name)
    };
    let route = dispatch(plan(
        &user(BO),
        &target,
        &chain(&["a", "b", "cloud"]),
        &[bo_in("a"), bo_in("b")],
    ));
    assert_eq!(route.current().id(), "ec_a");
    assert_eq!(
        friendly_line(&route.ran_on()),
        "Ran on a (shared by its operator)."
    );
    // Between hops, bo opted out of `b`.
    let fresh = [bo_in("a"), view("b")];
    let route = route
        .next_after(AttemptOutcome::Busy, "busy", &user(BO), &target, &fresh)
        .unwrap();
    assert_eq!(route.current(), &Candidate::Cloud);
    assert_eq!(
        outcomes(route.attempts()),
        vec![("ec_a", "busy", "busy"), ("ec_b", "denied", "not_opted_in")]
    );
}

#[test]
fn a_busy_reject_on_a_strict_named_context_says_it_was_busy() {
    let target = ExecuteTarget::named("ec_laptop");
    let route = dispatch(plan(
        &user(ANA),
        &target,
        &Chain::default(),
        &[view("laptop")],
    ));
    let err = route
        .next_after(
            AttemptOutcome::Busy,
            "busy",
            &user(ANA),
            &target,
            &[view("laptop")],
        )
        .unwrap_err();
    assert_eq!(err.code(), "execution_context_busy");
    assert!(
        err.to_string()
            .starts_with("laptop is busy (every slot is taken); try again later")
    );
}

#[test]
fn a_context_deleted_between_hops_is_skipped_as_unusable() {
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["a", "b", "cloud"]),
        &[view("a"), view("b")],
    ));
    let route = route
        .next_after(
            AttemptOutcome::Offline,
            "offline",
            &user(ANA),
            &ExecuteTarget::chain(),
            &[view("a")],
        )
        .unwrap();
    assert_eq!(
        outcomes(route.attempts())[1],
        ("ec_b", "unusable", "unknown_context")
    );
}
