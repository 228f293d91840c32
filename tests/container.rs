//! The container image, built from the repository root with the offline recipe's
//! command exactly as docs/deploy.md and the Dockerfile's header state it (buildah,
//! `--target runtime`, docker format so the HEALTHCHECK is kept, REVISION the git
//! commit). Only buildah's global options are added: this test's own storage (`--root`,
//! `--runroot`, `--storage-driver vfs`); `BUILDAH_ISOLATION=chroot` in the environment.
//! KPRESS_BINARY is the binary this test runs: `target/release/kpress` as documented
//! under `cargo test --release`, the documented debug path `target/debug/kpress`
//! otherwise (CI builds debug: a release build costs minutes of both cores). The base
//! `debian:bookworm-slim` is built locally from `scripts/setup.sh`'s mmdebstrap root
//! file system (`FROM scratch`, `ADD`), so nothing is pulled; its `RUN apt-get` steps
//! run. Then the image is inspected and run with `buildah run`: its OCI labels (version
//! as `kpress --version` prints it, revision the commit, source, licenses, title,
//! description); `kpress check-config` on the shipped policy as `nobody`; with
//! `--build-arg QATZIP=true`, QATzip loaded (its software backup, no device here); and
//! `kpress run` in front of a real 4.1.1 broker on the host (host network), the
//! image's own HEALTHCHECK command against its admin endpoint, kcat producing lz4
//! through it into a topic the policy stores in zstd, every record read back through
//! it and every stored batch zstd (DumpLogSegments).
//!
//! Images live in `target/kpress-tests/containers` (cleared at the start of each run).
//! ~70 s on the 2-core dev machine, half of it the two image builds' `apt-get`.

use anyhow::{ensure, Context};
use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::{write_records, Dataset};
use kpress_tests::java_client::JavaClient;
use kpress_tests::kcat;
use kpress_tests::kpress::kpress_binary;
use kpress_tests::paths;
use kpress_tests::ports::{free_port, free_port_range, wait_for_port};
use kpress_tests::proc_status::pids_with_argument;
use kpress_tests::process::{run, run_ok, ChildGuard, Finished};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const BUILD_TIMEOUT: Duration = Duration::from_secs(900);
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const BASE_IMAGE: &str = "docker.io/library/debian:bookworm-slim";
/// The offline recipe's image build, word for word as the docs state it.
const DOCUMENTED_BUILD: &str = "buildah bud --format docker --target runtime \
     --build-arg KPRESS_BINARY=target/release/kpress \
     --build-arg REVISION=$(git rev-parse HEAD) -t kpress .";
/// What `-t kpress` names.
const IMAGE: &str = "localhost/kpress:latest";
const QAT_IMAGE: &str = "localhost/kpress:qat";

/// buildah's global options that give this test its own storage, so nothing of the
/// host's images is touched.
fn buildah_global_options() -> Vec<String> {
    let dir = paths::scratch_dir().join("containers");
    let path = |p: PathBuf| p.to_str().expect("UTF-8 scratch path").to_string();
    vec![
        "--root".into(),
        path(dir.join("storage")),
        "--runroot".into(),
        path(dir.join("run")),
        "--storage-driver".into(),
        "vfs".into(),
    ]
}

fn buildah() -> Command {
    let mut cmd = Command::new("buildah");
    cmd.args(buildah_global_options());
    cmd
}

fn buildah_ok(args: &[&str], timeout: Duration) -> Finished {
    run_ok(buildah().args(args), timeout).unwrap_or_else(|err| panic!("{err:#}"))
}

/// The root file system tar `scripts/setup.sh` made with mmdebstrap.
fn base_rootfs() -> PathBuf {
    let suite = std::fs::read_to_string(paths::workspace_root().join("scripts/versions.sh"))
        .expect("scripts/versions.sh")
        .lines()
        .find_map(|l| l.strip_prefix("CONTAINER_BASE_SUITE=").map(str::to_string))
        .expect("scripts/versions.sh sets CONTAINER_BASE_SUITE");
    let tar = paths::cache_dir()
        .join("container")
        .join(format!("{suite}-minbase.tar"));
    assert!(
        tar.exists(),
        "{} not found: run scripts/setup.sh (it builds it with mmdebstrap)",
        tar.display()
    );
    tar
}

/// `text`'s lines with `#` comment markers and `\` continuations undone and spaces
/// collapsed, as a shell would read the commands a doc or a Dockerfile header shows.
fn shell_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches('#').trim();
        let (words, continued) = match line.strip_suffix('\\') {
            Some(rest) => (rest, true),
            None => (line, false),
        };
        current.push(' ');
        current.push_str(words);
        if !continued {
            lines.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
            current.clear();
        }
    }
    lines
}

/// Panics unless `file` (relative to the workspace) shows `command` as a line.
fn assert_shows(file: &str, command: &str) {
    let text = std::fs::read_to_string(paths::workspace_root().join(file)).expect(file);
    assert!(
        shell_lines(&text).iter().any(|line| line.contains(command)),
        "{file} does not show `{command}`"
    );
}

/// The binary this test runs, as a path in the build context (the repository root).
fn binary_in_context() -> String {
    let root = paths::workspace_root()
        .canonicalize()
        .expect("workspace root");
    let binary = kpress_binary().canonicalize().expect("kpress binary");
    let relative = binary.strip_prefix(&root).unwrap_or_else(|_| {
        panic!(
            "{} is outside the repository, the build context: KPRESS_BIN and \
             CARGO_TARGET_DIR must keep it under target/",
            binary.display()
        )
    });
    relative.to_str().expect("UTF-8 path").to_string()
}

/// Runs the documented build (with `extra` before its `-t kpress`, and `tag` for
/// `kpress`) through `sh` in the repository root, with this test's storage.
fn documented_build(extra: &str, tag: &str) {
    let documented = DOCUMENTED_BUILD
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert_shows("docs/deploy.md", &documented);
    assert_shows("Dockerfile", &documented);
    let binary = binary_in_context();
    let mut command = documented.clone();
    if binary != "target/release/kpress" {
        let argument = format!("KPRESS_BINARY={binary}");
        assert_shows("docs/deploy.md", &argument);
        command = command.replace("KPRESS_BINARY=target/release/kpress", &argument);
    }
    command = command.replace(" -t kpress .", &format!("{extra} -t {tag} ."));
    let global: Vec<String> = buildah_global_options()
        .iter()
        .map(|option| format!("'{option}'"))
        .collect();
    let script = command.replacen("buildah ", &format!("buildah {} ", global.join(" ")), 1);
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(&script)
        .current_dir(paths::workspace_root())
        .env("BUILDAH_ISOLATION", "chroot");
    let started = std::time::Instant::now();
    run_ok(&mut cmd, BUILD_TIMEOUT).unwrap_or_else(|err| panic!("{script}: {err:#}"));
    eprintln!("{script}\nbuilt in {:.0?}", started.elapsed());
}

/// The image of the documented build, once per test process on a freshly built base.
fn image() -> &'static str {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        // Leftovers of an earlier run would only grow the vfs storage.
        buildah_ok(&["rm", "--all"], RUN_TIMEOUT);
        let _ = run(buildah().args(["rmi", "--all", "--force"]), RUN_TIMEOUT);
        let context = tempfile::Builder::new()
            .prefix("kpress-base-")
            .tempdir()
            .expect("temp dir");
        let tar = context.path().join("rootfs.tar");
        if std::fs::hard_link(base_rootfs(), &tar).is_err() {
            std::fs::copy(base_rootfs(), &tar).expect("copy the root file system");
        }
        std::fs::write(
            context.path().join("Containerfile"),
            "FROM scratch\nADD rootfs.tar /\nCMD [\"bash\"]\n",
        )
        .unwrap();
        let mut cmd = buildah();
        cmd.args([
            "bud",
            "--isolation",
            "chroot",
            "--pull=never",
            "-t",
            BASE_IMAGE,
        ])
        .arg(context.path());
        run_ok(&mut cmd, BUILD_TIMEOUT).unwrap_or_else(|err| panic!("base image: {err:#}"));
        documented_build("", "kpress");
    });
    IMAGE
}

/// A working container of `image`, removed on drop.
struct WorkingContainer {
    name: String,
    /// Its root file system on the host (vfs: a plain directory).
    root: PathBuf,
}

impl WorkingContainer {
    fn of(image: &str) -> WorkingContainer {
        let finished = buildah_ok(&["from", "--pull=never", image], RUN_TIMEOUT);
        let name = finished.stdout_text().trim().to_string();
        let mounted = buildah_ok(&["mount", &name], RUN_TIMEOUT);
        WorkingContainer {
            root: PathBuf::from(mounted.stdout_text().trim()),
            name,
        }
    }

    /// `buildah run` on the host's network, as the image's user.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = buildah();
        cmd.args(["run", "--isolation", "chroot", "--network", "host"])
            .arg(&self.name)
            .arg("--")
            .args(args);
        cmd
    }

    /// Runs `args` to completion. Their output goes to files in the container, read
    /// through its root on the host: under load, buildah's chroot isolation drops or
    /// cuts short what a process writes just before it exits.
    fn run(&self, args: &[&str]) -> Finished {
        let mut wrapped = vec!["sh", "-c", "\"$@\" >/tmp/.run.out 2>/tmp/.run.err", "sh"];
        wrapped.extend_from_slice(args);
        let finished =
            run(&mut self.command(&wrapped), RUN_TIMEOUT).unwrap_or_else(|err| panic!("{err:#}"));
        let output = |name: &str| {
            std::fs::read(self.root.join("tmp").join(name))
                .unwrap_or_else(|err| panic!("{name} of {args:?}: {err}"))
        };
        Finished {
            status: finished.status,
            stdout: output(".run.out"),
            stderr: output(".run.err"),
        }
    }

    /// Copies `file` in, readable by the image's user (temp files are 0600).
    fn copy_in(&self, file: &Path, destination: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).expect("chmod 0644");
        buildah_ok(
            &["copy", &self.name, file.to_str().unwrap(), destination],
            RUN_TIMEOUT,
        );
    }
}

impl Drop for WorkingContainer {
    fn drop(&mut self) {
        let _ = run(buildah().args(["rm", &self.name]), RUN_TIMEOUT);
    }
}

/// The kpress processes started with `config` (buildah run and its helpers carry the
/// same argument).
fn kpress_pids(config: &str) -> Vec<u32> {
    pids_with_argument(Path::new(config))
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline.split(|b| *b == 0).next() == Some(b"/usr/local/bin/kpress")
            })
        })
        .collect()
}

#[test]
fn image_checks_its_shipped_policy_as_nobody_and_carries_the_healthcheck() {
    let image = image();
    // buildah 1.28's templates have no `json`: Go's %v of the lists.
    let config = buildah_ok(
        &[
            "inspect",
            "--format",
            "{{.Docker.Config.Healthcheck.Test}} {{.Docker.Config.Entrypoint}} {{.Docker.Config.Cmd}} {{.Docker.Config.User}}",
            image,
        ],
        RUN_TIMEOUT,
    )
    .stdout_text();
    assert_eq!(
        config.trim(),
        "[CMD /usr/local/bin/kpress healthcheck http://127.0.0.1:9464/healthz] \
         [/usr/local/bin/kpress] [run --config /etc/kpress/kpress.toml] nobody"
    );

    let container = WorkingContainer::of(image);
    let user = container.run(&["id", "-u"]);
    assert_eq!(user.stdout_text().trim(), "65534", "{}", user.stderr_text());
    let checked = container.run(&[
        "/usr/local/bin/kpress",
        "check-config",
        "/etc/kpress/kpress.toml",
    ]);
    assert!(
        checked.status.success(),
        "{}{}",
        checked.stdout_text(),
        checked.stderr_text()
    );
    let text = checked.stdout_text();
    assert!(text.starts_with("/etc/kpress/kpress.toml: ok"), "{text}");
    assert!(
        text.contains("isal: available"),
        "libisal2 in the image: {text}"
    );
    // Nothing listens: the healthcheck fails, and says why.
    let port = free_port();
    let unhealthy = container.run(&[
        "/usr/local/bin/kpress",
        "healthcheck",
        &format!("http://127.0.0.1:{port}/healthz"),
    ]);
    assert_eq!(unhealthy.status.code(), Some(1));
    assert!(
        unhealthy.stderr_text().contains("connecting to"),
        "{}",
        unhealthy.stderr_text()
    );
}

/// `key = "value"` of the workspace's `[workspace.package]`.
fn workspace_package(key: &str) -> String {
    let manifest =
        std::fs::read_to_string(paths::workspace_root().join("Cargo.toml")).expect("Cargo.toml");
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| {
            let (name, value) = line.split_once('=')?;
            (name.trim() == key).then(|| value.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("[workspace.package] sets no {key}"))
}

fn git(args: &[&str]) -> Finished {
    let mut cmd = Command::new("git");
    cmd.args(args).current_dir(paths::workspace_root());
    run(&mut cmd, RUN_TIMEOUT).unwrap_or_else(|err| panic!("{err:#}"))
}

#[test]
fn image_labels_name_the_binary_inside_and_its_commit() {
    let image = image();
    let label = |name: &str| {
        let format =
            format!("{{{{index .Docker.Config.Labels \"org.opencontainers.image.{name}\"}}}}");
        buildah_ok(&["inspect", "--format", &format, image], RUN_TIMEOUT)
            .stdout_text()
            .trim()
            .to_string()
    };
    let container = WorkingContainer::of(image);
    let version = container.run(&["/usr/local/bin/kpress", "--version"]);
    assert!(version.status.success(), "{}", version.stderr_text());
    assert_eq!(
        format!("kpress {}", label("version")),
        version.stdout_text().trim(),
        "the version label and `kpress --version` in the image"
    );
    let help = container.run(&["/usr/local/bin/kpress", "--help"]);
    assert_eq!(
        label("description"),
        help.stdout_text().lines().next().unwrap_or_default(),
        "the description label and kpress's own"
    );
    assert_eq!(label("title"), "kpress");
    assert_eq!(label("licenses"), workspace_package("license"));
    assert_eq!(label("source"), workspace_package("repository"));

    // The commit the build's `git rev-parse HEAD` named; others may commit to this
    // tree meanwhile, so an ancestor of HEAD is accepted when HEAD moved.
    let revision = label("revision");
    assert!(
        revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit()),
        "revision label {revision:?}"
    );
    let head = git(&["rev-parse", "HEAD"]).stdout_text().trim().to_string();
    if revision != head {
        let ancestor = git(&["merge-base", "--is-ancestor", &revision, "HEAD"]);
        assert!(
            ancestor.status.success(),
            "revision label {revision} is neither HEAD ({head}) nor an ancestor of it"
        );
    }
}

#[test]
fn image_built_with_qatzip_loads_it() {
    image();
    documented_build(" --build-arg QATZIP=true", "kpress:qat");
    let container = WorkingContainer::of(QAT_IMAGE);
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        "[listener]\nbind = \"127.0.0.1:19092\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n\
         [[topics]]\nmatch = \"gzip.*\"\ncompression.type = \"gzip\"\ncompression.gzip.provider = \"qat\"\n",
    )
    .unwrap();
    container.copy_in(policy.path(), "/tmp/qat.toml");
    let checked = container.run(&["/usr/local/bin/kpress", "check-config", "/tmp/qat.toml"]);
    let text = checked.stdout_text();
    assert!(checked.status.success(), "{text}{}", checked.stderr_text());
    assert!(
        text.contains("qat: available, software: QATzip libqatzip.so.3: QZ_NO_HW"),
        "{text}"
    );

    // Without the argument there is no QATzip, and a policy naming it is refused.
    let plain = WorkingContainer::of(IMAGE);
    plain.copy_in(policy.path(), "/tmp/qat.toml");
    let refused = plain.run(&["/usr/local/bin/kpress", "check-config", "/tmp/qat.toml"]);
    assert!(!refused.status.success(), "{}", refused.stdout_text());
}

#[test]
fn image_runs_kpress_in_front_of_a_real_broker() {
    let image = image();
    let cluster = KafkaCluster::start(paths::kafka_version(), 1).expect("broker");
    let topic = "zstd.container";
    JavaClient::new(paths::kafka_version())
        .create_topic(
            &cluster.bootstrap(),
            topic,
            1,
            &["compression.type=producer"],
        )
        .expect("create topic");

    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let node_port_base = free_port_range(cluster.node_ids().into_iter().max().unwrap_or(0) as u16);
    // A path of this run's own, so its kpress process can be found by its arguments.
    let in_container = format!("/etc/kpress/container-test-{}.toml", std::process::id());
    let policy = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        policy.path(),
        format!(
            "[listener]\nbind = \"{listen}\"\nnode_port_base = {node_port_base}\n\
             [upstream]\nbootstrap_servers = [\"{}\"]\n\
             [admin]\nbind = \"{admin}\"\n\
             [[topics]]\nmatch = \"zstd.*\"\ncompression.type = \"zstd\"\n",
            cluster.bootstrap()
        ),
    )
    .unwrap();
    let container = WorkingContainer::of(image);
    container.copy_in(policy.path(), &in_container);

    let log = tempfile::NamedTempFile::new().unwrap();
    let mut cmd = container.command(&["/usr/local/bin/kpress", "run", "--config", &in_container]);
    cmd.stdout(log.reopen().unwrap())
        .stderr(log.reopen().unwrap());
    let mut proxy = ChildGuard::spawn(&mut cmd).expect("buildah run");
    let result = (|| -> anyhow::Result<()> {
        ensure!(
            wait_for_port(listen, Duration::from_secs(60)),
            "kpress in the container never listened on {listen}"
        );
        // The image's own HEALTHCHECK command, run in the image.
        let healthy = container.run(&[
            "/usr/local/bin/kpress",
            "healthcheck",
            &format!("http://{admin}/healthz"),
        ]);
        ensure!(
            healthy.status.success(),
            "healthcheck: {}",
            healthy.stderr_text()
        );
        let mut ready = false;
        for _ in 0..60 {
            let probe = container.run(&[
                "/usr/local/bin/kpress",
                "healthcheck",
                &format!("http://{admin}/readyz"),
            ]);
            if probe.status.success() {
                ready = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        ensure!(ready, "/readyz never answered 200");

        let records = Dataset::ApacheAccessLog.records();
        let dir = tempfile::tempdir()?;
        let file = write_records(&dir.path().join("records"), &records);
        let bootstrap = listen.to_string();
        kcat::produce_file(&bootstrap, topic, 0, Compression::Lz4, &file, &[])
            .context("kcat producing through the container")?;
        if let Some(problem) = kcat::read_back_problem(&bootstrap, topic, 0, &[], &records) {
            anyhow::bail!("{problem}");
        }
        let dump = cluster.dump_partition_0(&[topic])?;
        let problems = dump[0].problems_storing(topic, Compression::Zstd, &records);
        ensure!(problems.is_empty(), "{}", problems.join("\n"));
        Ok(())
    })();

    // SIGTERM to kpress itself (not to buildah run, which waits for it), which drains
    // and exits 0; buildah run then exits with its status.
    let pids = kpress_pids(&in_container);
    for pid in &pids {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    // buildah run exits once kpress has; signalling it as well would race kpress's own
    // drain and turn a clean exit into "exited on killed".
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut status = None;
    while status.is_none() && std::time::Instant::now() < deadline {
        status = proxy.try_wait();
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.or_else(|| proxy.terminate(Duration::from_secs(10)));
    let output = std::fs::read_to_string(log.path()).unwrap_or_default();
    for pid in kpress_pids(&in_container) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    if let Err(err) = result {
        panic!("{err:#}\nkpress in the container:\n{output}");
    }
    assert_eq!(pids.len(), 1, "kpress processes: {pids:?}\n{output}");
    assert!(
        status.is_some_and(|s| s.success()),
        "buildah run ended {status:?}\n{output}"
    );
}
