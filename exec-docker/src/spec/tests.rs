//! The isolation decisions, without an engine.

use std::time::Duration;

use outpost_core::grant::{CanonicalPath, CredentialDenylist, Mount};
use outpost_core::manifest::Manifest;

use super::*;

fn folder(tag: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "outpost-spec-{}-{tag}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.canonicalize().unwrap()
}

fn launch(extra: &str) -> Launch {
    launch_as("oneshot", extra)
}

fn launch_as(lifecycle: &str, extra: &str) -> Launch {
    let manifest = Manifest::parse(&format!(
        "name: t\nenvironment: docker\nlifecycle: {lifecycle}\ndocker_image: img:1\nentry: sh\n\
         args: [\"-c\", \"x\"]\n{extra}"
    ))
    .unwrap();
    Launch {
        run_id: "r1".into(),
        dir: folder("cap"),
        entry_bytes: None,
        manifest,
        extra_args: vec!["more".into()],
        mounts: Vec::new(),
        denylist: CredentialDenylist::empty(),
        cwd: None,
        timeout: Duration::from_secs(1),
        egress: Egress::None,
        confined: false,
        context: String::new(),
    }
}

fn settings() -> SpecSettings {
    SpecSettings {
        user: "1000:1000".into(),
        grace_secs: 2,
    }
}

fn granted(path: &Path, mode: FolderMode) -> Mount {
    Mount {
        path: CanonicalPath::new(path.to_string_lossy().into_owned()).unwrap(),
        mode,
        excluded: Vec::new(),
    }
}

#[test]
fn a_container_gets_no_privileges_and_the_manifest_s_limits() {
    let spec = container_spec(
        &launch("env: {A: b}\nlimits: {memory_mb: 64, cpu_millicores: 250, pids_max: 32}\n"),
        &settings(),
    )
    .unwrap();
    let body = &spec.body;
    assert_eq!(body.entrypoint, Some(vec!["sh".to_owned()]));
    assert_eq!(
        body.cmd,
        Some(vec!["-c".to_owned(), "x".to_owned(), "more".to_owned()])
    );
    assert_eq!(body.env, Some(vec!["A=b".to_owned()]));
    assert_eq!(body.user.as_deref(), Some("1000:1000"));
    assert_eq!(body.labels.as_ref().unwrap()[LABEL_RUN], "r1");
    let hc = body.host_config.as_ref().unwrap();
    assert_eq!(hc.privileged, Some(false));
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_owned()]));
    assert_eq!(hc.init, Some(true));
    assert_eq!(
        hc.restart_policy.as_ref().unwrap().name,
        Some(RestartPolicyNameEnum::NO)
    );
    assert_eq!(hc.memory, Some(64 << 20));
    assert_eq!(hc.memory_swap, Some(64 << 20), "no swap beyond the limit");
    assert_eq!(hc.nano_cpus, Some(250_000_000));
    assert_eq!(hc.pids_limit, Some(32));
    assert_eq!(hc.network_mode.as_deref(), Some("none"));
    // No network sandbox at all: it starts faster (see the oneshot benchmark).
    assert_eq!(body.network_disabled, Some(true));
    assert_eq!(
        hc.mounts,
        Some(Vec::new()),
        "nothing but the declared volumes"
    );
    assert_eq!(spec.port, None);
}

#[test]
fn the_network_follows_the_manifest_and_the_grant() {
    let asks = "permissions: [\"connect:api.example.org:443\"]\n";
    let mut l = launch(asks);
    let err = container_spec(&l, &settings()).unwrap_err();
    assert_eq!(err.code(), "egress_denied");
    assert!(err.to_string().contains("api.example.org:443"), "{err}");
    l.egress = Egress::Allowlist {
        hosts: vec!["api.example.org:443".into()],
    };
    // An allowlist: loopback and the gate, offered through the proxy variables.
    let gated = container_spec(&l, &settings()).unwrap();
    assert_eq!(gated.network, Network::Gated);
    let env = gated.body.env.clone().unwrap_or_default();
    assert!(
        env.contains(&"HTTPS_PROXY=http://127.0.0.1:3128".to_owned()),
        "{env:?}"
    );
    assert_eq!(gated.body.exposed_ports, None);
    l.egress = Egress::All;
    let bridged = container_spec(&l, &settings()).unwrap();
    assert_eq!(bridged.network, Network::Bridge);
    assert_eq!(bridged.body.network_disabled, Some(false));
    // Egress alone gives nothing to a capability that does not ask.
    let mut quiet = launch("");
    quiet.egress = Egress::All;
    assert_eq!(
        container_spec(&quiet, &settings()).unwrap().network,
        Network::None
    );
}

#[test]
fn a_service_port_gives_no_network() {
    let l = launch_as("persistent", "port: 8080\n");
    let spec = container_spec(&l, &settings()).unwrap();
    assert_eq!(spec.network, Network::None);
    assert_eq!(spec.port, Some(8080));
    assert_eq!(spec.body.exposed_ports, Some(vec!["8080/tcp".to_owned()]));
    assert_eq!(spec.body.env, Some(vec!["PORT=8080".to_owned()]));
    assert_eq!(
        spec.body.host_config.unwrap().network_mode.as_deref(),
        Some("none")
    );
}

#[test]
fn volumes_are_checked_masked_and_give_the_working_directory() {
    let data = folder("data");
    std::fs::create_dir_all(data.join("sub")).unwrap();
    std::fs::write(data.join("token"), "secret").unwrap();
    let mut l = launch(&format!(
        "volumes: [{{host: {}, guest: /data, mode: ro}}]\n",
        data.display()
    ));
    assert_eq!(
        container_spec(&l, &settings()).unwrap_err().code(),
        "path_refused",
        "an ungranted volume"
    );
    l.mounts = vec![granted(&data, FolderMode::Ro)];
    l.denylist = CredentialDenylist::empty()
        .with_extra([
            CanonicalPath::new(data.join("token").to_string_lossy().into_owned()).unwrap(),
        ]);
    l.cwd = Some(data.join("sub"));
    let spec = container_spec(&l, &settings()).unwrap();
    let mounts = spec
        .body
        .host_config
        .as_ref()
        .unwrap()
        .mounts
        .clone()
        .unwrap();
    assert_eq!(mounts.len(), 2);
    assert_eq!(mounts[0].source.as_deref(), Some(data.to_str().unwrap()));
    assert_eq!(mounts[0].target.as_deref(), Some("/data"));
    assert_eq!(mounts[0].read_only, Some(true));
    assert_eq!(
        mounts[1].source.as_deref(),
        Some("/dev/null"),
        "the token is masked"
    );
    assert_eq!(mounts[1].target.as_deref(), Some("/data/token"));
    assert_eq!(spec.body.working_dir.as_deref(), Some("/data/sub"));

    l.cwd = Some(std::env::temp_dir());
    assert_eq!(
        container_spec(&l, &settings()).unwrap_err().code(),
        "path_refused",
        "a working directory outside every volume"
    );
}
