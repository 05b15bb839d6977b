use super::TerminalSize;
use super::*;

const DAILY_REPORT: &str = r#"
name: daily-report
description: "Generate daily code review report"
version: 1
environment: shell
lifecycle: oneshot
entry: report.sh
args: []
env: {}
permissions: [run_command:git, write_file:daily-report-*]
volumes: []
docker_image: ""
confine: false
limits: {timeout_ms: 90000, output_max_bytes: 1048576, memory_mb: 512}
"#;

fn error(text: &str) -> ManifestError {
    Manifest::parse(text).unwrap_err()
}

#[test]
fn the_seed_manifest_parses() {
    let m = Manifest::parse(DAILY_REPORT).unwrap();
    assert_eq!(m.name, "daily-report");
    assert_eq!(m.environment, Environment::Shell);
    assert_eq!(m.lifecycle, Lifecycle::Oneshot);
    assert_eq!(m.entry, "report.sh");
    assert_eq!(m.permissions.len(), 2);
    assert_eq!(m.docker_image, None);
    assert_eq!(m.limits, Limits::DEFAULT);
    assert_eq!(m.run_permission().to_string(), "run_capability:shell");
}

#[test]
fn defaults_fill_what_is_left_out() {
    let m = Manifest::parse("name: t\nenvironment: shell\nlifecycle: ondemand\nentry: a/b.sh\n")
        .unwrap();
    assert_eq!(m.limits, Limits::DEFAULT);
    assert_eq!(m.interpreter, Interpreter::Sh);
    assert_eq!(m.version, 1);
    assert!(m.confine, "asking for nothing is asking to be sandboxed");
}

#[test]
fn every_error_names_the_field_and_the_line() {
    let e = error("name: t\nenvironment: shell\nlifecycle: oneshot\nentry: ../escape.sh\n");
    assert_eq!((e.field.as_str(), e.line), ("entry", Some(4)));
    assert!(e.to_string().starts_with("line 4, field `entry`"), "{e}");

    let e = error("name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nsurprise: 1\n");
    assert_eq!(e.field, "surprise");
    assert_eq!(e.line, Some(5));

    let e = error("name: Bad_Name\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n");
    assert_eq!((e.field.as_str(), e.line), ("name", Some(1)));

    let e = error("name: t\nenvironment: vm\nlifecycle: oneshot\nentry: run.sh\n");
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("vm"), "{e}");

    let e = error(
        "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\nlimits: {timeout_ms: 0}\n",
    );
    assert_eq!((e.field.as_str(), e.line), ("limits.timeout_ms", Some(5)));

    let e = error(
        "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\npermissions: [fly:away]\n",
    );
    assert_eq!(e.field, "permissions[0]");
    assert_eq!(e.code(), "invalid_manifest");
}

#[test]
fn entry_paths_stay_inside_the_folder() {
    for bad in [
        "/etc/passwd",
        "../x",
        "a/../../x",
        "a//b",
        "./x",
        "a\\b",
        "",
    ] {
        assert!(
            check_relative_path(bad).is_err(),
            "{bad:?} should be refused"
        );
    }
    for good in ["run.sh", "bin/tool", "a.b/c-d_e"] {
        assert!(check_relative_path(good).is_ok(), "{good:?}");
    }
}

#[test]
fn a_docker_entry_is_a_command_in_the_image() {
    let base = "name: t\nenvironment: docker\nlifecycle: oneshot\ndocker_image: img\n";
    for good in ["true", "/bin/sh", "/usr/local/bin/serve"] {
        let m = Manifest::parse(&format!("{base}entry: {good}\n")).expect(good);
        assert_eq!(m.entry, good);
    }
    let e = error(&format!("{base}entry: \"sh -c x\"\n"));
    assert_eq!((e.field.as_str(), e.line), ("entry", Some(5)));
    assert!(e.message.contains("args"), "{e}");
    // A shell entry stays a path inside the folder.
    let e = error("name: t\nenvironment: shell\nlifecycle: oneshot\nentry: /bin/sh\n");
    assert_eq!(e.field, "entry");
}

#[test]
fn cpu_and_process_limits_have_defaults_and_bounds() {
    let base = "name: t\nenvironment: docker\nlifecycle: oneshot\nentry: x\ndocker_image: i\n";
    let m = Manifest::parse(base).unwrap();
    assert_eq!((m.limits.cpu_millicores, m.limits.pids_max), (1000, 1024));
    let m = Manifest::parse(&format!(
        "{base}limits: {{cpu_millicores: 500, pids_max: 64}}\n"
    ))
    .unwrap();
    assert_eq!((m.limits.cpu_millicores, m.limits.pids_max), (500, 64));
    assert_eq!(m.limits.memory_mb, Limits::DEFAULT.memory_mb);
    let e = error(&format!("{base}limits: {{pids_max: 0}}\n"));
    assert_eq!(e.field, "limits.pids_max");
    let e = error(&format!("{base}limits: {{cpu_millicores: 256001}}\n"));
    assert_eq!(e.field, "limits.cpu_millicores");
    assert!(e.message.contains("1..=256000"), "{e}");
}

#[test]
fn fields_belong_to_their_environments() {
    let base = "name: t\nlifecycle: oneshot\nentry: x\n";
    let e = error(&format!(
        "{base}environment: shell\ndocker_image: busybox\n"
    ));
    assert_eq!(e.field, "docker_image");
    let e = error(&format!("{base}environment: docker\n"));
    assert_eq!(e.field, "docker_image");
    assert!(
        Manifest::parse(&format!(
            "{base}environment: docker\ndocker_image: outpost-test/busybox:latest\n"
        ))
        .is_ok()
    );
    let e = error(&format!(
        "{base}environment: shell\nvolumes: [{{host: /tmp, guest: /data}}]\n"
    ));
    assert_eq!(e.field, "volumes[0]");
    let e = error(&format!(
        "{base}environment: wasm\nvolumes: [{{host: /tmp, guest: data}}]\n"
    ));
    assert_eq!(e.field, "volumes[0].guest");
    let e = error(&format!("{base}environment: wasm\nconfine: true\n"));
    assert_eq!(e.field, "confine");
    let e = error(&format!("{base}environment: shell\nport: 8080\n"));
    assert_eq!(e.field, "port");
    let e = error(&format!(
        "{base}environment: shell\nenv: {{OUTPOST_TOKEN: x}}\n"
    ));
    assert_eq!(e.field, "env.OUTPOST_TOKEN");
}

#[test]
fn malformed_yaml_is_an_error_not_a_panic() {
    for text in [
        "",
        ":",
        "name: [",
        "- a\n- b",
        "name: t\n  bad: indent\n",
        "\u{0}",
    ] {
        let _ = error(text);
    }
}

#[test]
fn env_keeps_its_order_and_refuses_duplicates() {
    let base = "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: x\n";
    let m = Manifest::parse(&format!("{base}env: {{Z: 1, A: 2, M: 3}}\n")).unwrap();
    let names: Vec<&str> = m.env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, vec!["Z", "A", "M"]);
    assert!(Manifest::parse(&format!("{base}env: {{A: 1, A: 2}}\n")).is_err());
}

#[test]
fn a_pty_capability_opens_a_terminal_of_its_size_and_may_name_a_program() {
    let base = "name: t\nenvironment: pty\nlifecycle: oneshot\n";
    let m = Manifest::parse(&format!("{base}entry: bash\nargs: [--norc]\n")).unwrap();
    assert_eq!(m.entry, "bash");
    assert_eq!(m.terminal, Some(TerminalSize::DEFAULT));
    assert_eq!(m.limits.idle_ms, None);
    let m = Manifest::parse(&format!(
        "{base}entry: bin/tool\nterminal: {{cols: 132, rows: 50}}\nlimits: {{idle_ms: 600000}}\n"
    ))
    .unwrap();
    assert_eq!(
        m.terminal,
        Some(TerminalSize {
            cols: 132,
            rows: 50
        })
    );
    assert_eq!(m.limits.idle_ms, Some(600_000));
    let m = Manifest::parse(&format!("{base}entry: sh\nterminal: {{rows: 10}}\n")).unwrap();
    assert_eq!(m.terminal, Some(TerminalSize { cols: 80, rows: 10 }));
    // Other environments have no terminal.
    let shell = Manifest::parse("name: t\nenvironment: shell\nlifecycle: oneshot\nentry: x\n");
    assert_eq!(shell.unwrap().terminal, None);
}

#[test]
fn pty_fields_are_bounded_and_belong_to_pty() {
    let base = "name: t\nenvironment: pty\nlifecycle: oneshot\nentry: bash\n";
    for (extra, field) in [
        ("terminal: {cols: 0}\n", "terminal.cols"),
        ("terminal: {rows: 1001}\n", "terminal.rows"),
        ("terminal: {cols: 70000}\n", "terminal.cols"),
        ("limits: {idle_ms: 0}\n", "limits.idle_ms"),
        ("interpreter: none\n", "interpreter"),
        ("docker_image: busybox\n", "docker_image"),
        ("port: 8080\n", "port"),
        ("volumes: [{host: /tmp, guest: /data}]\n", "volumes[0]"),
    ] {
        let e = error(&format!("{base}{extra}"));
        assert_eq!((e.field.as_str(), e.line), (field, Some(5)), "{extra}: {e}");
    }
    let e = error(&format!("{base}terminal: {{cols: 80, depth: 3}}\n"));
    assert!(e.message.contains("depth"), "{e}");
    let e = error(&format!("{base}entry2: x\n"));
    assert_eq!(e.field, "entry2");
    // A terminal is sandboxed like a shell run: by default, and `confine: false` is the ask.
    assert!(Manifest::parse(base).unwrap().confine);
    assert!(
        !Manifest::parse(&format!("{base}confine: false\n"))
            .unwrap()
            .confine
    );
    let e = error(&format!(
        "{}terminal: {{cols: 80}}\n",
        "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: x\n"
    ));
    assert_eq!((e.field.as_str(), e.line), ("terminal", Some(5)));
    let e =
        error("name: t\nenvironment: shell\nlifecycle: oneshot\nentry: x\nlimits: {idle_ms: 5}\n");
    assert_eq!((e.field.as_str(), e.line), ("limits.idle_ms", Some(5)));
    // A pty entry is still a path inside the folder, or a bare name.
    let e = error("name: t\nenvironment: pty\nlifecycle: oneshot\nentry: /bin/bash\n");
    assert_eq!(e.field, "entry");
    let e = error("name: t\nenvironment: pty\nlifecycle: oneshot\nentry: ../bash\n");
    assert_eq!(e.field, "entry");
}

#[test]
fn anchors_and_aliases_are_refused_at_their_line_before_any_expansion() {
    let base = "name: t\nenvironment: shell\nlifecycle: oneshot\nentry: run.sh\n";
    let anchored = format!("{base}args: &a [x]\n");
    let e = error(&anchored);
    assert_eq!((e.field.as_str(), e.line), ("", Some(5)), "{e}");
    assert!(e.message.contains("anchor"), "{e}");
    assert_eq!(e.code(), "invalid_manifest");
    // An alias of an anchor that is never defined is still an alias.
    let e = error(&format!("{base}\nargs: *nowhere\n"));
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("alias"), "{e}");
    // Merge keys need an alias too.
    let e = error(&format!("{base}env: {{<<: *base}}\n"));
    assert_eq!(e.line, Some(5), "{e}");
    // A billion-laughs manifest is refused at its first anchor: nothing was recorded to
    // replay, so the refusal costs what reading one line does.
    let mut bomb =
        format!("{base}x0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for i in 1..30 {
        let p = i - 1;
        bomb.push_str(&format!(
            "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let started = std::time::Instant::now();
    let e = error(&bomb);
    assert_eq!(e.line, Some(5), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    // Anchor-like text inside a quoted string is text.
    let ok = Manifest::parse(&format!("{base}args: [\"&a\", \"*b\"]\n")).expect("parses");
    assert_eq!(ok.args, vec!["&a".to_owned(), "*b".to_owned()]);
}
