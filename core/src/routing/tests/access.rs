//! `check_access`: every refusal code, and the order they are checked in.

use super::*;

fn code(
    requester: &str,
    ctx: &ContextView,
    target: &ExecuteTarget,
) -> Result<RunKind, &'static str> {
    check_access(&user(requester), ctx, target).map_err(|e| e.code())
}

fn fs() -> ExecuteTarget {
    ExecuteTarget {
        requires: vec![Requirement::Fs],
        ..ExecuteTarget::chain()
    }
}

fn commands() -> ExecuteTarget {
    ExecuteTarget {
        wants_commands: true,
        ..ExecuteTarget::chain()
    }
}

fn shared_with_bo() -> ContextView {
    ContextView {
        opted_in: vec![BO.into()],
        ..view("box")
    }
}

#[test]
fn the_operator_runs_as_operator_and_an_opted_in_member_as_shared() {
    assert_eq!(
        code(ANA, &view("box"), &ExecuteTarget::chain()),
        Ok(RunKind::Operator)
    );
    assert_eq!(
        code(BO, &shared_with_bo(), &ExecuteTarget::chain()),
        Ok(RunKind::Shared)
    );
}

#[test]
fn only_the_operator_and_opted_in_members_can_run() {
    // Not shared: nobody but the operator, and nobody is told to opt in.
    let not_shared = ContextView {
        shared_with_all_members: false,
        ..view("box")
    };
    assert_eq!(
        code(BO, &not_shared, &ExecuteTarget::chain()),
        Err("not_shared")
    );
    assert_eq!(
        code(ANA, &not_shared, &ExecuteTarget::chain()),
        Ok(RunKind::Operator)
    );
    assert_eq!(
        code(BO, &view("box"), &ExecuteTarget::chain()),
        Err("not_opted_in")
    );
    let all_members = ContextView {
        shared_with_all_members: true,
        ..view("box")
    };
    assert_eq!(
        code(BO, &all_members, &ExecuteTarget::chain()),
        Err("not_opted_in")
    );
}

#[test]
fn operator_left_fails_closed_for_everyone() {
    let left = ContextView {
        operator_is_member: false,
        ..shared_with_bo()
    };
    assert_eq!(
        code(BO, &left, &ExecuteTarget::chain()),
        Err("operator_left")
    );
    assert_eq!(
        code(ANA, &left, &ExecuteTarget::chain()),
        Err("operator_left")
    );
}

#[test]
fn host_folders() {
    let with_fs = ContextView {
        grant_has_fs: true,
        local_fs_available: true,
        ..shared_with_bo()
    };
    assert_eq!(code(ANA, &with_fs, &fs()), Ok(RunKind::Operator));
    assert_eq!(code(BO, &with_fs, &fs()), Err("fs_operator_only"));
    assert_eq!(code(ANA, &view("box"), &fs()), Err("no_fs"));
    let no_local = ContextView {
        local_fs_available: false,
        ..with_fs.clone()
    };
    assert_eq!(code(ANA, &no_local, &fs()), Err("no_local_fs"));
}

#[test]
fn old_daemons_with_folders_take_no_shared_runs() {
    let outdated = ContextView {
        grant_has_fs: true,
        features: vec!["fs".into()],
        ..shared_with_bo()
    };
    assert_eq!(
        code(BO, &outdated, &ExecuteTarget::chain()),
        Err("fs_daemon_outdated")
    );
    assert_eq!(
        code(ANA, &outdated, &ExecuteTarget::chain()),
        Ok(RunKind::Operator)
    );
    let no_folders = ContextView {
        grant_has_fs: false,
        ..outdated
    };
    assert_eq!(
        code(BO, &no_folders, &ExecuteTarget::chain()),
        Ok(RunKind::Shared)
    );
}

#[test]
fn host_commands() {
    let on = ContextView {
        commands_enabled: true,
        ..shared_with_bo()
    };
    assert_eq!(code(ANA, &on, &commands()), Ok(RunKind::Operator));
    assert_eq!(code(BO, &on, &commands()), Err("commands_operator_only"));
    assert_eq!(code(ANA, &view("box"), &commands()), Err("commands_off"));
}

#[test]
fn identity_is_checked_before_capabilities() {
    // Someone who has not opted in learns that, not what the machine offers.
    assert_eq!(code(BO, &view("box"), &fs()), Err("not_opted_in"));
    assert_eq!(code(BO, &view("box"), &commands()), Err("not_opted_in"));
}

#[test]
fn refusals_a_person_can_act_on_say_how() {
    assert!(
        AccessDenied::CommandsOff
            .to_string()
            .contains("the machine's owner can turn them on")
    );
    assert!(
        AccessDenied::NoLocalFs
            .to_string()
            .contains("can add a folder to the local policy")
    );
    assert!(
        AccessDenied::NotOptedIn
            .to_string()
            .contains("opt in first")
    );
}

#[test]
fn every_refusal_is_found_again_by_its_code() {
    for denied in AccessDenied::ALL {
        assert_eq!(AccessDenied::from_code(denied.code()), Some(denied));
    }
    assert_eq!(AccessDenied::from_code("busy"), None);
}
