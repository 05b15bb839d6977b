use super::*;

#[test]
fn a_probe_reads_each_piece() {
    let helper = Path::new("/x/outpost");
    let full = Support::read_probe(
        true,
        &format!("namespaces: available\nscopes: available\n{PROBE_OK}\n"),
        "",
        helper,
    );
    assert_eq!(full, Support::full());
    let no_ns = Support::read_probe(
        true,
        &format!(
            "namespaces: unavailable: the kernel refused (EPERM)\nscopes: unavailable\n{PROBE_OK}\n"
        ),
        "",
        helper,
    );
    assert_eq!(no_ns.landlock, Ok(()));
    assert_eq!(no_ns.namespaces, Err("the kernel refused (EPERM)".into()));
    assert!(!no_ns.scopes);
    let none = Support::read_probe(
        false,
        "namespaces: unavailable: x\n",
        "outpost confine: Landlock cannot be enforced: ENOSYS",
        helper,
    );
    assert_eq!(
        none.landlock,
        Err("Landlock cannot be enforced: ENOSYS".into())
    );
    // A binary that exits 0 without knowing the subcommand cannot pass for the helper.
    let other = Support::read_probe(true, "hello\n", "", helper);
    assert!(other.landlock.unwrap_err().contains("does not know"));
}

#[test]
fn leftovers_of_a_dead_process_are_swept_and_a_live_one_s_kept() {
    // Named as `scratch_folder` names them: the run's id, the pid, a number.
    let made = scratch_folder("ex_a-1.1").unwrap();
    let name = made.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("outpost-run-ex_a-1.1-{}-", std::process::id())));
    std::fs::remove_dir_all(&made).unwrap();
    // A pid no process has (above the kernel's pid_max default is not guaranteed; the test
    // takes the largest possible).
    let dead = std::env::temp_dir().join("outpost-run-ex_a-1.1-4194304-0");
    let live = std::env::temp_dir().join(format!("outpost-run-x-{}-0", std::process::id()));
    for dir in [&dead, &live] {
        std::fs::create_dir_all(dir.join("home")).unwrap();
    }
    assert!(sweep_leftovers() >= 1);
    assert!(!dead.exists());
    assert!(live.exists());
    std::fs::remove_dir_all(&live).unwrap();
}
