//! `plan`: order, fallback, skips, queueing and errors.

use super::*;

#[test]
fn the_chain_is_tried_in_order_and_falls_back_to_the_server() {
    let contexts = [busy("build-box"), offline("laptop")];
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["build-box", "laptop", "cloud"]),
        &contexts,
    ));
    assert_eq!(route.current(), &Candidate::Cloud);
    assert_eq!(
        outcomes(route.attempts()),
        vec![
            ("ec_build-box", "busy", "busy"),
            ("ec_laptop", "offline", "offline")
        ]
    );
    let ran_on = route.ran_on();
    assert!(ran_on.fell_back_to_cloud && !ran_on.yours);
    assert_eq!(
        friendly_line(&ran_on),
        "Ran on the server after build-box was busy and laptop was offline."
    );
}

#[test]
fn the_first_usable_context_wins_and_later_ones_are_not_judged() {
    let contexts = [view("build-box"), offline("laptop")];
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["build-box", "laptop", "cloud"]),
        &contexts,
    ));
    assert_eq!(route.current().id(), "ec_build-box");
    assert!(route.attempts().is_empty());
    assert_eq!(route.candidates().len(), 3);
    assert_eq!(
        friendly_line(&route.ran_on()),
        "Ran on build-box (your machine)."
    );
}

#[test]
fn a_named_context_is_strict_by_default() {
    let contexts = [view("build-box"), view("laptop")];
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::named("ec_laptop"),
        &chain(&["build-box", "cloud"]),
        &contexts,
    ));
    assert_eq!(
        route.candidates(),
        &[ChainEntry::Context("ec_laptop".into())]
    );
    let code = |ctx: ContextView| {
        plan(
            &user(ANA),
            &ExecuteTarget::named("ec_laptop"),
            &chain(&["build-box", "cloud"]),
            &[view("build-box"), ctx],
        )
        .unwrap_err()
        .code()
    };
    assert_eq!(code(busy("laptop")), "execution_context_busy");
    assert_eq!(code(offline("laptop")), "execution_context_offline");
    assert_eq!(
        code(ContextView {
            unusable: Some("revoked".into()),
            ..view("laptop")
        }),
        "execution_context_unusable"
    );
    // Refused on the one named context: the access code itself, so the person learns why.
    assert_eq!(
        code(ContextView {
            operator: "u_other".into(),
            ..view("laptop")
        }),
        "not_opted_in"
    );
    assert_eq!(
        code(ContextView {
            operator_is_member: false,
            ..view("laptop")
        }),
        "operator_left"
    );
}

#[test]
fn a_named_context_with_fallback_goes_first_then_the_chain_without_it() {
    let target = ExecuteTarget {
        fallback: Fallback::Chain,
        ..ExecuteTarget::named("ec_laptop")
    };
    let contexts = [view("build-box"), busy("laptop")];
    let route = dispatch(plan(
        &user(ANA),
        &target,
        &chain(&["laptop", "build-box", "cloud"]),
        &contexts,
    ));
    assert_eq!(route.current().id(), "ec_build-box");
    assert_eq!(
        outcomes(route.attempts()),
        vec![("ec_laptop", "busy", "busy")]
    );
    assert_eq!(
        route.candidates(),
        &[
            ChainEntry::Context("ec_build-box".into()),
            ChainEntry::Cloud
        ]
    );
}

#[test]
fn requirements_keep_the_run_off_the_server_and_say_so_when_nothing_is_left() {
    let target = ExecuteTarget {
        requires: vec![Requirement::Lan],
        ..ExecuteTarget::chain()
    };
    let err = plan(
        &user(ANA),
        &target,
        &chain(&["build-box", "cloud"]),
        &[offline("build-box")],
    )
    .unwrap_err();
    assert_eq!(err.code(), "no_usable_context");
    assert_eq!(
        outcomes(err.attempts()),
        vec![
            ("ec_build-box", "offline", "offline"),
            ("cloud", "unusable", "requires_lan")
        ]
    );
    assert_eq!(
        err.to_string(),
        "no usable execution context: build-box was offline and the server was unusable"
    );
    let route = dispatch(plan(
        &user(ANA),
        &target,
        &chain(&["build-box", "cloud"]),
        &[view("build-box")],
    ));
    assert_eq!(route.cloud_skipped_for(), Some(Requirement::Lan));
    assert!(!route.candidates().contains(&ChainEntry::Cloud));
}

#[test]
fn unknown_contexts_are_refused() {
    let err = plan(
        &user(ANA),
        &ExecuteTarget::named("ec_ghost"),
        &Chain::default(),
        &[],
    )
    .unwrap_err();
    assert_eq!(err.code(), "unknown_context");
    assert_eq!(err.to_string(), "there is no execution context `ec_ghost`");
    let err = plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["ghost", "cloud"]),
        &[],
    )
    .unwrap_err();
    assert_eq!(err.code(), "unknown_context");
}

#[test]
fn no_chain_and_a_named_cloud_both_mean_the_server() {
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &Chain::default(),
        &[],
    ));
    assert_eq!(route.current(), &Candidate::Cloud);
    assert_eq!(friendly_line(&route.ran_on()), "Ran on the server.");
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::named("cloud"),
        &chain(&["build-box"]),
        &[view("build-box")],
    ));
    assert_eq!(route.current(), &Candidate::Cloud);
    assert!(!route.ran_on().fell_back_to_cloud);
}

#[test]
fn a_strict_chain_never_reaches_the_server() {
    let err = plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["build-box"]),
        &[busy("build-box")],
    )
    .unwrap_err();
    assert_eq!(err.code(), "no_usable_context");
    assert_eq!(
        outcomes(err.attempts()),
        vec![("ec_build-box", "busy", "busy")]
    );
}

#[test]
fn an_offline_named_context_can_be_queued_for_if_the_requester_may_use_it() {
    let target = ExecuteTarget {
        when_offline: WhenOffline::queue(30).unwrap(),
        ..ExecuteTarget::named("ec_laptop")
    };
    let queued = plan(&user(ANA), &target, &Chain::default(), &[offline("laptop")]).unwrap();
    assert_eq!(
        queued,
        Plan::Queue(QueuedRun {
            id: "ec_laptop".into(),
            name: "laptop".into(),
            minutes: 30
        })
    );
    let err = plan(&user(BO), &target, &Chain::default(), &[offline("laptop")]).unwrap_err();
    assert_eq!(
        outcomes(err.attempts()),
        vec![("ec_laptop", "denied", "not_opted_in")]
    );
    // Refused on the one named context: the error carries the access code and its advice.
    assert_eq!(err.code(), "not_opted_in");
    assert!(
        err.to_string().starts_with("laptop: you have not opted in"),
        "{err}"
    );
    let route = dispatch(plan(
        &user(ANA),
        &target,
        &Chain::default(),
        &[view("laptop")],
    ));
    assert_eq!(route.current().id(), "ec_laptop");
}

#[test]
fn a_malformed_target_is_refused_before_routing() {
    let target = ExecuteTarget {
        when_offline: WhenOffline::Queue { minutes: 0 },
        ..ExecuteTarget::named("ec_a")
    };
    let err = plan(&user(ANA), &target, &Chain::default(), &[view("a")]).unwrap_err();
    assert_eq!(err.code(), "queue_minutes_out_of_range");
}

#[test]
fn a_draining_context_is_busy_with_its_own_reason() {
    let draining = ContextView {
        draining: true,
        ..busy("build-box")
    };
    let err = plan(
        &user(ANA),
        &ExecuteTarget::named("ec_build-box"),
        &Chain::default(),
        std::slice::from_ref(&draining),
    )
    .unwrap_err();
    assert_eq!(err.code(), "execution_context_busy");
    assert_eq!(
        outcomes(err.attempts()),
        vec![("ec_build-box", "busy", "draining")]
    );
    assert!(
        err.to_string().starts_with("build-box is draining"),
        "{err}"
    );
    assert!(
        busy_message_of(busy("build-box")).contains("every slot is taken"),
        "a busy one says so"
    );
    // Falling through, the attempt keeps the reason.
    let route = dispatch(plan(
        &user(ANA),
        &ExecuteTarget::chain(),
        &chain(&["build-box", "cloud"]),
        &[draining],
    ));
    assert_eq!(
        outcomes(route.attempts()),
        vec![("ec_build-box", "busy", "draining")]
    );
}

#[test]
fn a_paused_context_says_so_and_may_be_waited_for_unlike_a_draining_one() {
    let paused = ContextView {
        draining: true,
        paused: true,
        ..busy("build-box")
    };
    let err = plan(
        &user(ANA),
        &ExecuteTarget::named("ec_build-box"),
        &Chain::default(),
        std::slice::from_ref(&paused),
    )
    .unwrap_err();
    assert_eq!(
        outcomes(err.attempts()),
        vec![("ec_build-box", "busy", "paused")]
    );
    assert!(
        err.to_string()
            .starts_with("build-box is paused by an operator"),
        "{err}"
    );
    let target = ExecuteTarget {
        when_busy: WhenOffline::queue(5).unwrap(),
        ..ExecuteTarget::named("ec_build-box")
    };
    assert!(matches!(
        plan(
            &user(ANA),
            &target,
            &Chain::default(),
            std::slice::from_ref(&paused)
        ),
        Ok(Plan::Queue(_))
    ));
    // A drain to stop is not waited for: the machine is going away.
    let draining = ContextView {
        draining: true,
        ..busy("build-box")
    };
    assert!(plan(&user(ANA), &target, &Chain::default(), &[draining]).is_err());
}

fn busy_message_of(view: ContextView) -> String {
    plan(
        &user(ANA),
        &ExecuteTarget::named("ec_build-box"),
        &Chain::default(),
        &[view],
    )
    .unwrap_err()
    .to_string()
}

#[test]
fn a_busy_named_context_can_be_queued_for_and_only_when_busy() {
    let target = ExecuteTarget {
        when_busy: WhenOffline::queue(7).unwrap(),
        ..ExecuteTarget::named("ec_build-box")
    };
    let queued = plan(&user(ANA), &target, &Chain::default(), &[busy("build-box")]).unwrap();
    assert_eq!(
        queued,
        Plan::Queue(QueuedRun {
            id: "ec_build-box".into(),
            name: "build-box".into(),
            minutes: 7
        })
    );
    // A free slot: it runs at once; offline: whenBusy does not wait for that.
    let route = dispatch(plan(
        &user(ANA),
        &target,
        &Chain::default(),
        &[view("build-box")],
    ));
    assert_eq!(route.current().id(), "ec_build-box");
    let err = plan(
        &user(ANA),
        &target,
        &Chain::default(),
        &[offline("build-box")],
    )
    .unwrap_err();
    assert_eq!(err.code(), "execution_context_offline");
    // A requester who may not use it is refused, not queued.
    let err = plan(&user(BO), &target, &Chain::default(), &[busy("build-box")]).unwrap_err();
    assert_eq!(err.code(), "not_opted_in");
}
