//! `deploy/`: the plain Kubernetes manifests and the Helm chart. The chart is rendered
//! with `helm template` for several value sets; every manifest is validated offline by
//! `kubernetes-validate --strict` against the Kubernetes schemas it ships (an unknown
//! field or kind fails); each Deployment's projected /etc/kpress volume is laid out in
//! a directory as the kubelet would (the ConfigMap's policy, test certificates for the
//! Secrets' keys) and `kpress check-config` accepts the policy there, so the policy's
//! paths and the mounts agree; the probes hit the policy's admin port, and the Service
//! forwards exactly the ports the policy serves.
//!
//! helm (`go install`, `HELM_VERSION`) and kubernetes-validate come from
//! `scripts/setup.sh`. ~10 s.

use anyhow::{bail, ensure, Context};
use kpress_tests::kpress::kpress_binary;
use kpress_tests::paths;
use kpress_tests::process::{run, run_ok};
use kpress_tests::tls::TestPki;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Reads manifests (a file of YAML documents) and prints one line per fact the test
/// checks; with a pod directory, lays out every Deployment's volume mounts in it: a
/// ConfigMap item from the ConfigMap of the same file, a Secret item from the file of
/// that key in the secrets directory. Only projected volumes are understood: anything
/// else fails here, so a new volume kind gets a test before it ships.
const MANIFEST_FACTS: &str = r#"
import os, shutil, sys, yaml
manifests, pod_dir, secrets_dir = sys.argv[1], sys.argv[2], sys.argv[3]
with open(manifests) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
def put(root, rel, write):
    assert not os.path.isabs(rel) and ".." not in rel.split("/"), rel
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write(path)
for d in docs:
    kind, name = d["kind"], d["metadata"]["name"]
    print("doc", kind, name)
    if kind == "Service":
        for p in d["spec"]["ports"]:
            print("service-port", name, p["port"], p.get("targetPort", p["port"]))
    if kind != "Deployment":
        continue
    pod = d["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    sc = pod.get("securityContext", {})
    print("pod-security", sc.get("runAsNonRoot"), sc.get("runAsUser"))
    for c in pod["containers"]:
        print("args", " ".join(c.get("args", [])))
        named = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        for p in c.get("ports", []):
            print("container-port", p.get("name", "-"), p["containerPort"])
        for probe in ("readinessProbe", "livenessProbe"):
            get = c[probe]["httpGet"]
            print("probe", probe, get["path"], named.get(get["port"], get["port"]))
        csc = c.get("securityContext", {})
        print("container-security", csc.get("allowPrivilegeEscalation"), csc.get("readOnlyRootFilesystem"))
        print("resources", "limits" in c.get("resources", {}), "requests" in c.get("resources", {}))
        for m in c.get("volumeMounts", []):
            root = os.path.join(pod_dir, m["mountPath"].lstrip("/"))
            print("mount", m["mountPath"])
            for src in volumes[m["name"]]["projected"]["sources"]:
                if "configMap" in src:
                    data = configmaps[src["configMap"]["name"]]
                    for it in src["configMap"]["items"]:
                        text = data[it["key"]]
                        put(root, it["path"], lambda p: open(p, "w").write(text))
                        print("file", os.path.join(m["mountPath"], it["path"]), "configmap", it["key"])
                elif "secret" in src:
                    for it in src["secret"]["items"]:
                        key = it["key"]
                        put(root, it["path"], lambda p: shutil.copyfile(os.path.join(secrets_dir, key), p))
                        print("file", os.path.join(m["mountPath"], it["path"]), "secret", src["secret"]["name"], key)
                else:
                    raise SystemExit("volume source the test does not lay out: %r" % src)
"#;

/// The facts `MANIFEST_FACTS` printed about one set of manifests.
#[derive(Debug, Default)]
struct Facts {
    documents: Vec<(String, String)>,
    service_ports: Vec<(String, u16)>,
    container_ports: BTreeSet<u16>,
    args: Vec<String>,
    probes: Vec<(String, String, u16)>,
    mounted_files: Vec<String>,
    lines: Vec<String>,
}

impl Facts {
    fn parse(text: &str) -> anyhow::Result<Facts> {
        let mut facts = Facts::default();
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                ["doc", kind, name] => facts.documents.push((kind.to_string(), name.to_string())),
                ["service-port", name, port, _target] => {
                    facts.service_ports.push((name.to_string(), port.parse()?))
                }
                ["container-port", _name, port] => {
                    facts.container_ports.insert(port.parse()?);
                }
                ["args", args @ ..] => facts.args = args.iter().map(|a| a.to_string()).collect(),
                ["probe", probe, path, port] => {
                    facts
                        .probes
                        .push((probe.to_string(), path.to_string(), port.parse()?))
                }
                ["file", path, ..] => facts.mounted_files.push(path.to_string()),
                _ => {}
            }
            facts.lines.push(line.to_string());
        }
        Ok(facts)
    }

    /// The ports of the Service `name`.
    fn ports_of(&self, service: &str) -> BTreeSet<u16> {
        self.service_ports
            .iter()
            .filter(|(name, _)| name == service)
            .map(|(_, port)| *port)
            .collect()
    }

    fn has_line(&self, line: &str) -> bool {
        self.lines.iter().any(|l| l == line)
    }
}

fn helm() -> PathBuf {
    let helm = paths::cache_dir().join("go/bin/helm");
    assert!(
        helm.exists(),
        "helm not found at {}: run scripts/setup.sh (it builds helm with go install)",
        helm.display()
    );
    helm
}

fn venv_bin(name: &str) -> PathBuf {
    let bin = paths::venv_python()
        .parent()
        .expect("the venv's bin directory")
        .join(name);
    assert!(
        bin.exists(),
        "{name} not found at {}: run scripts/setup.sh",
        bin.display()
    );
    bin
}

fn chart_dir() -> PathBuf {
    paths::workspace_root().join("deploy/helm/kpress")
}

/// `helm template kpress deploy/helm/kpress --namespace kafka` with `--set` pairs and
/// `--set-string`/`--values` given as raw arguments.
fn helm_template(args: &[&str]) -> anyhow::Result<String> {
    let finished = run(
        Command::new(helm())
            .args(["template", "kpress"])
            .arg(chart_dir())
            .args(["--namespace", "kafka"])
            .args(args),
        TIMEOUT,
    )?;
    ensure!(
        finished.status.success(),
        "helm template {args:?} failed: {}",
        finished.stderr_text()
    );
    Ok(finished.stdout_text())
}

/// Runs `kubernetes-validate --strict` on `file` and requires one "passed" line per
/// document and no warning (an unknown kind is only a warning there) or error.
fn validate(file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)?;
    let documents = text
        .split("\n---")
        .filter(|doc| {
            doc.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .count();
    let finished = run(
        Command::new(venv_bin("kubernetes-validate"))
            .arg("--strict")
            .arg(file),
        TIMEOUT,
    )?;
    let output = format!("{}{}", finished.stdout_text(), finished.stderr_text());
    let passed = output
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    let complaints: Vec<&str> = output
        .lines()
        .filter(|l| !l.contains(" passed for resource "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !finished.status.success() || !complaints.is_empty() || passed != documents {
        bail!(
            "kubernetes-validate --strict {}: exit {}, {passed} of {documents} documents passed:\n{output}",
            file.display(),
            finished.status
        );
    }
    Ok(())
}

/// A directory of one test's files, removed afterwards unless the test failed or
/// `KPRESS_KEEP_LOGS` is set.
struct Scratch {
    dir: Option<tempfile::TempDir>,
}

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("kpress-deploy-{name}-"))
            .tempdir()
            .expect("temp dir");
        Scratch { dir: Some(dir) }
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("until dropped").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let keep = std::env::var_os("KPRESS_KEEP_LOGS").is_some() || std::thread::panicking();
        if let Some(dir) = self.dir.take().filter(|_| keep) {
            eprintln!("kept {}", dir.keep().display());
        }
    }
}

/// Test certificates under the keys Kubernetes TLS and CA Secrets use: `tls.crt`,
/// `tls.key` (a server certificate for `names`) and `ca.crt`.
fn secret_keys(dir: &Path, names: &[&str]) -> anyhow::Result<PathBuf> {
    let pki = TestPki::generate(&dir.join("pki"))?;
    let server = pki.server(names)?;
    let keys = dir.join("secret-keys");
    std::fs::create_dir_all(&keys)?;
    std::fs::copy(&server.chain, keys.join("tls.crt"))?;
    std::fs::copy(&server.key, keys.join("tls.key"))?;
    std::fs::copy(pki.ca_cert(), keys.join("ca.crt"))?;
    Ok(keys)
}

/// Everything checked of one set of manifests: validation, facts, the mounted volume
/// laid out under `<scratch>/pod`, and `kpress check-config` on the policy the
/// container's `--config` names there. Returns the facts and check-config's output.
fn check_manifests(scratch: &Path, manifests: &Path) -> anyhow::Result<(Facts, String)> {
    validate(manifests)?;
    let secrets = secret_keys(
        scratch,
        &[
            "*.kafka.test",
            "bootstrap.kafka.test",
            "kpress",
            "kpress.kafka.svc",
        ],
    )?;
    let pod = scratch.join("pod");
    let printed = run_ok(
        Command::new(paths::venv_python())
            .args(["-c", MANIFEST_FACTS])
            .arg(manifests)
            .arg(&pod)
            .arg(&secrets),
        TIMEOUT,
    )
    .with_context(|| format!("reading {}", manifests.display()))?;
    let facts = Facts::parse(&printed.stdout_text())?;

    let config = facts
        .args
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| w[1].clone())
        .context("the container's args have no --config")?;
    ensure!(
        facts.args.first().map(String::as_str) == Some("run"),
        "the container runs {:?}, not `kpress run`",
        facts.args
    );
    ensure!(
        facts.mounted_files.contains(&config),
        "--config {config} is not a file of the mounted volume ({:?})",
        facts.mounted_files
    );
    let policy = pod.join(config.trim_start_matches('/'));
    let checked = run(
        Command::new(kpress_binary())
            .arg("check-config")
            .arg(&policy),
        TIMEOUT,
    )?;
    ensure!(
        checked.status.success(),
        "kpress check-config {} (the policy as the pod sees it) failed:\n{}{}",
        policy.display(),
        checked.stdout_text(),
        checked.stderr_text()
    );
    Ok((facts, checked.stdout_text()))
}

/// The admin port check-config reports, and the probes pointing at it: readiness on
/// `/readyz`, liveness on `/healthz`.
fn assert_probes_on_admin_port(facts: &Facts, checked: &str, admin_port: u16) {
    assert!(
        checked.contains(&format!("admin endpoint http://0.0.0.0:{admin_port} ")),
        "{checked}"
    );
    assert_eq!(
        facts.probes,
        vec![
            (
                "readinessProbe".to_string(),
                "/readyz".to_string(),
                admin_port
            ),
            (
                "livenessProbe".to_string(),
                "/healthz".to_string(),
                admin_port
            ),
        ]
    );
    assert!(facts.container_ports.contains(&admin_port));
    assert!(
        facts.has_line("pod-security True 65534"),
        "{:?}",
        facts.lines
    );
    assert!(
        facts.has_line("container-security False True"),
        "{:?}",
        facts.lines
    );
    assert!(facts.has_line("resources True True"), "{:?}", facts.lines);
}

fn kinds(facts: &Facts) -> Vec<&str> {
    let mut kinds: Vec<&str> = facts.documents.iter().map(|(k, _)| k.as_str()).collect();
    kinds.sort();
    kinds
}

fn ports(list: &[u16]) -> BTreeSet<u16> {
    list.iter().copied().collect()
}

#[test]
fn plain_manifests_validate_and_their_policy_checks_where_the_pod_mounts_it() {
    let scratch = Scratch::new("plain");
    let manifests = scratch.path().join("manifests.yaml");
    let mut all = String::new();
    for name in ["configmap.yaml", "deployment.yaml", "service.yaml"] {
        let text =
            std::fs::read_to_string(paths::workspace_root().join("deploy/kubernetes").join(name))
                .unwrap();
        all.push_str("---\n");
        all.push_str(&text);
    }
    std::fs::write(&manifests, all).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        ["ConfigMap", "Deployment", "Service", "Service"]
    );
    assert!(
        checked.contains("listen 0.0.0.0:9092 (advertised as kpress, broker node N on port 9192+N"),
        "{checked}"
    );
    assert!(checked.contains("clients: TLS"), "{checked}");
    assert_probes_on_admin_port(&facts, &checked, 9464);
    let serving = ports(&[9092, 9192, 9193, 9194]);
    assert_eq!(facts.ports_of("kpress"), serving);
    assert_eq!(facts.ports_of("kpress-admin"), ports(&[9464]));
    let mut container = serving.clone();
    container.insert(9464);
    assert_eq!(facts.container_ports, container);
}

#[test]
fn chart_defaults_render_ports_mode_without_tls() {
    let scratch = Scratch::new("defaults");
    let manifests = scratch.path().join("manifests.yaml");
    std::fs::write(&manifests, helm_template(&[]).unwrap()).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        ["ConfigMap", "Deployment", "Service", "Service"]
    );
    assert!(
        checked.contains(
            "listen 0.0.0.0:9092 (advertised as kpress.kafka.svc, broker node N on port 9192+N"
        ),
        "{checked}"
    );
    assert!(checked.contains("clients: plaintext"), "{checked}");
    assert!(
        checked.contains("rule 1 (line") && checked.contains("logs.*: zstd"),
        "{checked}"
    );
    assert_probes_on_admin_port(&facts, &checked, 9464);
    assert_eq!(facts.ports_of("kpress"), ports(&[9092, 9192, 9193, 9194]));
    assert_eq!(facts.mounted_files, ["/etc/kpress/kpress.toml"]);
}

#[test]
fn chart_ports_mode_with_tls_mtls_upstream_tls_and_own_ports() {
    let scratch = Scratch::new("ports-tls");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&[
        "--set",
        "listener.port=19092,listener.nodePortBase=19100,listener.advertisedHost=kpress.example.com",
        "--set",
        "listener.nodeIds={1,2,3,4,5}",
        "--set",
        "tls.secretName=kpress-tls,tls.clientCaSecretName=clients-ca",
        "--set",
        "upstreamTls.secretName=brokers-tls,upstreamTls.clientCertificate=true,upstreamTls.serverName=kafka.internal",
        "--set",
        "admin.port=9500,replicaCount=3,service.type=LoadBalancer",
        "--set-json",
        r#"brokers=["kafka-0.kafka:9093","kafka-1.kafka:9093"]"#,
    ])
    .unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert!(
        checked.contains(
            "listen 0.0.0.0:19092 (advertised as kpress.example.com, broker node N on port 19100+N"
        ),
        "{checked}"
    );
    assert!(
        checked.contains("-> kafka-0.kafka:9093, kafka-1.kafka:9093"),
        "{checked}"
    );
    assert!(
        checked.contains("clients: TLS") && checked.contains("client certificates required"),
        "{checked}"
    );
    assert!(
        checked.contains("brokers: TLS, certificates checked against")
            && checked.contains("for the name kafka.internal, client certificate"),
        "{checked}"
    );
    assert_probes_on_admin_port(&facts, &checked, 9500);
    assert_eq!(
        facts.ports_of("kpress"),
        ports(&[19092, 19101, 19102, 19103, 19104, 19105])
    );
    assert_eq!(facts.ports_of("kpress-admin"), ports(&[9500]));
    assert_eq!(
        facts.mounted_files,
        [
            "/etc/kpress/kpress.toml",
            "/etc/kpress/tls/tls.crt",
            "/etc/kpress/tls/tls.key",
            "/etc/kpress/client-ca/ca.crt",
            "/etc/kpress/upstream-tls/ca.crt",
            "/etc/kpress/upstream-tls/tls.crt",
            "/etc/kpress/upstream-tls/tls.key",
        ]
    );
}

#[test]
fn chart_sni_mode_with_tls_serves_one_port() {
    let scratch = Scratch::new("sni");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&[
        "--set",
        "mode=sni,tls.secretName=kpress-tls,listener.port=9093",
        "--set",
        "listener.advertisedHostPattern=broker-{node}.kafka.test,listener.bootstrapHost=bootstrap.kafka.test",
        "--set",
        "listener.advertisedPort=443",
    ])
    .unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert!(
        checked.contains(
            "listen 0.0.0.0:9093 (sni mode: broker nodes as broker-{node}.kafka.test:443, bootstrap as bootstrap.kafka.test:443"
        ),
        "{checked}"
    );
    assert!(checked.contains("clients: TLS"), "{checked}");
    assert_probes_on_admin_port(&facts, &checked, 9464);
    assert_eq!(facts.ports_of("kpress"), ports(&[9093]));
    assert_eq!(facts.container_ports, ports(&[9093, 9464]));
}

#[test]
fn chart_takes_a_whole_policy_file() {
    let scratch = Scratch::new("policy");
    let values = scratch.path().join("values.yaml");
    std::fs::write(
        &values,
        r#"
policy: |
  [listener]
  bind = "0.0.0.0:9092"
  advertised_host = "kpress.kafka.svc"
  [upstream]
  bootstrap_servers = ["kafka:9092"]
  [admin]
  bind = "0.0.0.0:9464"
  [limits]
  max_frame_bytes = 16777216
  [[topics]]
  match = "metrics.*"
  compression.type = "lz4"
"#,
    )
    .unwrap();
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&["--values", values.to_str().unwrap()]).unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert!(checked.contains("metrics.*: lz4"), "{checked}");
    assert!(!checked.contains("logs.*"), "{checked}");
    assert_probes_on_admin_port(&facts, &checked, 9464);
}

#[test]
fn chart_refuses_values_kpress_would_refuse() {
    for (args, message) in [
        (vec!["--set", "mode=sni"], "set tls.secretName"),
        (vec!["--set", "mode=single"], "mode must be"),
        (
            vec!["--set", "tls.clientCaSecretName=ca"],
            "tls.clientCaSecretName (mTLS) needs tls.secretName",
        ),
        (vec!["--set-json", "brokers=[]"], "name at least one broker"),
    ] {
        let err = helm_template(&args).expect_err(&format!("{args:?} rendered"));
        assert!(format!("{err:#}").contains(message), "{args:?}: {err:#}");
    }
}

/// The validation above must be able to fail: a misspelt field, a wrong type and an
/// unknown kind in otherwise valid rendered manifests are each refused.
#[test]
fn an_invalid_manifest_fails_validation() {
    let scratch = Scratch::new("invalid");
    let rendered = helm_template(&[]).unwrap();
    let unknown_kind = "---\napiVersion: v1\nkind: ConfigMapp\nmetadata:\n  name: x\n";
    for (what, broken) in [
        (
            "a misspelt field",
            rendered.replacen("readinessProbe:", "readynessProbe:", 1),
        ),
        (
            "a string for an integer",
            rendered.replacen("containerPort: 9464", "containerPort: \"admin\"", 1),
        ),
        ("an unknown kind", format!("{rendered}{unknown_kind}")),
    ] {
        assert_ne!(broken, rendered, "{what}: nothing was changed");
        let file = scratch.path().join("broken.yaml");
        std::fs::write(&file, &broken).unwrap();
        assert!(validate(&file).is_err(), "{what} passed validation");
    }
}
