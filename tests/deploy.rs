//! `deploy/`: the plain Kubernetes manifests and the Helm chart. The chart is rendered
//! with `helm template` for several value sets; every manifest is validated offline by
//! `kubernetes-validate --strict` against the Kubernetes schemas it ships (an unknown
//! field or kind fails); each Deployment's projected /etc/kpress volume is laid out in
//! a directory as the kubelet would (the ConfigMap's policy, test certificates for the
//! Secrets' keys) and `kpress check-config` accepts the policy there, so the policy's
//! paths and the mounts agree; the probes hit the policy's admin port, and the Service
//! forwards exactly the ports the policy serves.
//!
//! The scaling objects are checked against what they point at: the HorizontalPodAutoscaler
//! scales the Deployment by name on CPU utilisation and that Deployment leaves
//! `replicas` to it; the PodDisruptionBudget's selector picks the Deployment's pods and
//! lets a drain evict one at the fewest replicas; the ServiceMonitor selects a Service
//! whose port of the endpoint's name reaches the container port the policy's `[admin]
//! bind` serves /metrics on. kubernetes-validate has no schema for the ServiceMonitor (a
//! custom resource of the Prometheus operator): `CUSTOM_RESOURCES` validates it against
//! a strict schema of the CRD's fields the manifests use, with Kubernetes' own
//! ObjectMeta and LabelSelector from kubernetes-validate's definitions.
//!
//! helm (`go install`, `HELM_VERSION`) and kubernetes-validate come from
//! `scripts/setup.sh`. ~40 s on a busy 2-core machine.

use anyhow::{bail, ensure, Context};
use kpress_tests::kpress::kpress_binary;
use kpress_tests::paths;
use kpress_tests::process::{run, run_ok};
use kpress_tests::tls::{CertFiles, TestPki};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Reads manifests (a file of YAML documents) and prints one line per fact the test
/// checks; with a pod directory, lays out every Deployment's volume mounts in it: a
/// ConfigMap item from the ConfigMap of the same file, a Secret item from the file
/// `<secrets>/<Secret name>/<key>`, the cluster's Secrets as this test has them. A
/// Secret item the cluster lacks fails here, unless its source is `optional` (then
/// nothing is mounted, as the kubelet does). Projected and Secret volumes are
/// understood, emptyDir ones are made empty: anything else fails here, so a new volume
/// kind gets a test before it ships.
const MANIFEST_FACTS: &str = r#"
import os, shutil, sys, yaml
manifests, pod_dir, secrets_dir, namespace = sys.argv[1:5]
with open(manifests) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
def put(root, rel, write):
    assert not os.path.isabs(rel) and ".." not in rel.split("/"), rel
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write(path)
def secret_items(mount, root, secret):
    """Lays out the items of a Secret (volume or projected source) under root."""
    name, optional = secret.get("name") or secret.get("secretName"), secret.get("optional", False)
    stored = os.path.join(secrets_dir, name)
    items = secret.get("items")
    if items is None:
        if not os.path.isdir(stored):
            if optional:
                print("absent", mount, "secret", name, "-")
                return
            raise SystemExit("the pod mounts Secret %s, which this test's cluster does not have" % name)
        items = [{"key": k, "path": k} for k in sorted(os.listdir(stored))]
    for it in items:
        key, source = it["key"], os.path.join(stored, it["key"])
        if not os.path.isfile(source):
            if optional:
                print("absent", os.path.join(mount, it["path"]), "secret", name, key)
                continue
            raise SystemExit("the pod mounts key %s of Secret %s, which this test's cluster does not have" % (key, name))
        put(root, it["path"], lambda p: shutil.copyfile(source, p))
        print("file", os.path.join(mount, it["path"]), "secret", name, key)
for d in docs:
    kind, name = d["kind"], d["metadata"]["name"]
    print("doc", kind, name)
    if kind == "Service":
        for p in d["spec"]["ports"]:
            print("service-port", name, p["port"], p.get("targetPort", p["port"]))
    if kind == "ServiceAccount":
        annotations = d["metadata"].get("annotations") or {}
        print("service-account", name, d.get("automountServiceAccountToken", "-"),
              ",".join("%s=%s" % kv for kv in sorted(annotations.items())) or "-")
    if kind != "Deployment":
        continue
    pod = d["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    sc = pod.get("securityContext", {})
    print("pod-security", sc.get("runAsNonRoot"), sc.get("runAsUser"))
    print("pod-service-account", name, pod.get("serviceAccountName", "default"),
          pod.get("automountServiceAccountToken", "-"))
    for c in pod["containers"]:
        print("args", " ".join(c.get("args", [])))
        for e in c.get("env", []):
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            value = "secret:%s/%s" % (ref["name"], ref["key"]) if ref else e.get("value", "-")
            print("env", e["name"], value)
        for e in c.get("envFrom", []):
            source = e.get("secretRef") or e.get("configMapRef")
            print("env-from", "secret" if "secretRef" in e else "configmap", source["name"])
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
            mount = m["mountPath"]
            root = os.path.join(pod_dir, mount.lstrip("/"))
            print("mount", mount)
            volume = volumes[m["name"]]
            if "secret" in volume:
                secret_items(mount, root, volume["secret"])
                continue
            if "emptyDir" in volume:
                os.makedirs(root, exist_ok=True)
                continue
            if "projected" not in volume:
                raise SystemExit("volume the test does not lay out: %r" % volume)
            for src in volume["projected"]["sources"]:
                if "configMap" in src:
                    data = configmaps[src["configMap"]["name"]]
                    for it in src["configMap"]["items"]:
                        text = data[it["key"]]
                        put(root, it["path"], lambda p: open(p, "w").write(text))
                        print("file", os.path.join(mount, it["path"]), "configmap", it["key"])
                elif "secret" in src:
                    secret_items(mount, root, src["secret"])
                else:
                    raise SystemExit("volume source the test does not lay out: %r" % src)

def ns(d):
    return d["metadata"].get("namespace", namespace)
def label_text(labels):
    return ",".join("%s=%s" % kv for kv in sorted((labels or {}).items())) or "-"
def selects(selector, labels):
    if selector.get("matchExpressions"):
        raise SystemExit("a selector with matchExpressions: the test matches matchLabels only")
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())
deployments = [d for d in docs if d["kind"] == "Deployment"]
services = [d for d in docs if d["kind"] == "Service"]
def pod_labels(dep):
    return dep["spec"]["template"]["metadata"].get("labels") or {}
def container_port(service, target):
    """The container port a Service port's targetPort reaches, None if none."""
    if isinstance(target, int):
        return target
    if not service["spec"].get("selector"):
        return None
    for dep in deployments:
        if ns(dep) == ns(service) and selects({"matchLabels": service["spec"]["selector"]}, pod_labels(dep)):
            for c in dep["spec"]["template"]["spec"]["containers"]:
                for p in c.get("ports", []):
                    if p.get("name") == target:
                        return p["containerPort"]
    return None
for d in docs:
    kind, name, spec = d["kind"], d["metadata"]["name"], d.get("spec", {})
    if kind == "Deployment":
        print("deployment", name, spec.get("replicas", "-"))
        print("pod-labels", name, label_text(pod_labels(d)))
        annotations = d["spec"]["template"]["metadata"].get("annotations") or {}
        print("pod-annotations", name, ",".join(sorted(annotations)) or "-")
    elif kind == "Service":
        print("service-labels", name, label_text(d["metadata"].get("labels")))
    elif kind == "HorizontalPodAutoscaler":
        t = spec["scaleTargetRef"]
        print("hpa", name, t.get("apiVersion", "-"), t["kind"], t["name"], spec.get("minReplicas", 1), spec["maxReplicas"])
        for m in spec.get("metrics", []):
            if m["type"] == "Resource":
                r = m["resource"]
                print("hpa-metric", name, "Resource", r["name"], r["target"]["type"], r["target"].get("averageUtilization", "-"))
            else:
                print("hpa-metric", name, m["type"], "-", "-", "-")
        window = (spec.get("behavior") or {}).get("scaleDown", {}).get("stabilizationWindowSeconds", "-")
        print("hpa-scale-down-window", name, window)
    elif kind == "PodDisruptionBudget":
        budget = ["%s=%s" % (k, spec[k]) for k in ("maxUnavailable", "minAvailable") if k in spec]
        print("pdb", name, ",".join(budget) or "-")
        selector = spec.get("selector")
        print("pdb-selector", name, label_text((selector or {}).get("matchLabels")))
        for dep in deployments:
            if selector is not None and ns(dep) == ns(d) and selects(selector, pod_labels(dep)):
                print("pdb-selects", name, dep["metadata"]["name"])
    elif kind == "ServiceMonitor":
        print("monitor", name)
        chosen = spec.get("namespaceSelector") or {}
        allowed = None if chosen.get("any") else set(chosen.get("matchNames") or [ns(d)])
        for svc in services:
            if (allowed is None or ns(svc) in allowed) and selects(spec["selector"], svc["metadata"].get("labels") or {}):
                print("monitor-selects", name, svc["metadata"]["name"])
                for e in spec.get("endpoints", []):
                    port = next((p for p in svc["spec"]["ports"] if p.get("name") == e.get("port")), None)
                    target = container_port(svc, port.get("targetPort", port["port"])) if port else None
                    print("monitor-endpoint", name, svc["metadata"]["name"], e.get("port", "-"),
                          e.get("path", "/metrics"), "-" if target is None else target)
"#;

/// Validates the custom resources of a file of manifests that kubernetes-validate has
/// no schema for, printing kubernetes-validate's "passed"/"ERROR" lines for them, and
/// writes the other documents to a second file for kubernetes-validate. The
/// ServiceMonitor's schema holds the fields of the Prometheus operator's CRD
/// (monitoring.coreos.com/v1) that the manifests use, closed like `--strict`: a field
/// outside it fails here, so a new one is checked against the CRD before it ships.
const CUSTOM_RESOURCES: &str = r#"
import sys, yaml, jsonschema
from referencing import Registry, Resource
from kubernetes_validate import utils
manifests, builtin = sys.argv[1], sys.argv[2]
with open(manifests) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
version = utils.latest_version()
definitions = utils.schema_contents(
    "kubernetes-json-schema/v%s-local-strict/_definitions.json" % version, version)
def closed(properties, required=()):
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}
def meta(name):
    return {"$ref": "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1." + name}
string = {"type": "string"}
strings = {"type": "array", "items": string}
duration = {"type": "string",
            "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
endpoint = closed({
    "port": string,
    "path": string,
    "scheme": {"enum": ["http", "https"]},
    "interval": duration,
    "scrapeTimeout": duration,
    "honorLabels": {"type": "boolean"},
}, required=["port"])
service_monitor = closed({
    "apiVersion": {"const": "monitoring.coreos.com/v1"},
    "kind": {"const": "ServiceMonitor"},
    "metadata": meta("ObjectMeta"),
    "spec": closed({
        "selector": meta("LabelSelector"),
        "namespaceSelector": closed({"any": {"type": "boolean"}, "matchNames": strings}),
        "endpoints": {"type": "array", "items": endpoint, "minItems": 1},
        "jobLabel": string,
        "targetLabels": strings,
        "podTargetLabels": strings,
    }, required=["selector", "endpoints"]),
}, required=["apiVersion", "kind", "metadata", "spec"])
service_monitor["$id"] = "https://kubernetes.io/api/servicemonitor.json"
schemas = {("monitoring.coreos.com/v1", "ServiceMonitor"): service_monitor}
registry = Resource.from_contents(definitions) @ Registry()
rest = []
for d in docs:
    schema = schemas.get((d.get("apiVersion"), d.get("kind")))
    if schema is None:
        rest.append(d)
        continue
    resource = "%s/%s" % (d["kind"].lower(), d.get("metadata", {}).get("name"))
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    errors = sorted(validator.iter_errors(d), key=lambda e: list(e.path))
    for e in errors:
        print("ERROR %s did not validate for resource %s: %s: %s"
              % (manifests, resource, ".".join(map(str, e.path)), e.message))
    if not errors:
        print("INFO %s passed for resource %s against the CRD's fields" % (manifests, resource))
with open(builtin, "w") as f:
    yaml.safe_dump_all(rest, f)
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

    /// The fields after `tag` of every line that starts with it.
    fn rows(&self, tag: &str) -> Vec<Vec<&str>> {
        self.lines
            .iter()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next() == Some(tag)).then(|| fields.collect())
            })
            .collect()
    }

    /// The one field after `tag name`, if such a line exists.
    fn value_of(&self, tag: &str, name: &str) -> Option<&str> {
        self.rows(tag)
            .into_iter()
            .find(|row| row.first() == Some(&name))
            .and_then(|row| row.get(1).copied())
    }
}

/// How many pods a PodDisruptionBudget value (`2` or `50%`) counts at `replicas`,
/// rounded up as Kubernetes rounds a budget's percentages.
fn budget_pods(value: &str, replicas: u32) -> anyhow::Result<u32> {
    Ok(match value.strip_suffix('%') {
        Some(percent) => (replicas * percent.parse::<u32>()?).div_ceil(100),
        None => value.parse()?,
    })
}

/// What the scaling objects say of the objects they point at (see the module's doc):
/// each HorizontalPodAutoscaler scales a Deployment of the manifests by name on CPU
/// utilisation and that Deployment has no `replicas`; each PodDisruptionBudget selects
/// the Deployment's pods by a non-empty selector and lets a drain evict one at the
/// fewest replicas; each ServiceMonitor selects a Service whose port of the endpoint's
/// name reaches `admin_port`, where /metrics is served.
fn check_scaling(facts: &Facts, admin_port: u16) -> anyhow::Result<()> {
    let deployments = facts.rows("deployment");
    let mut floors = BTreeMap::new();
    for hpa in facts.rows("hpa") {
        let [name, api, kind, target, min, max] = hpa[..] else {
            bail!("hpa line {hpa:?}");
        };
        ensure!(
            api == "apps/v1" && kind == "Deployment",
            "HPA {name} scales {api} {kind}, not an apps/v1 Deployment"
        );
        let replicas = facts.value_of("deployment", target).with_context(|| {
            format!("HPA {name} scales Deployment {target}, which is not among {deployments:?}")
        })?;
        ensure!(
            replicas == "-",
            "Deployment {target} sets replicas: {replicas} beside HPA {name}: every apply would reset the HPA's count"
        );
        let (min, max): (u32, u32) = (min.parse()?, max.parse()?);
        ensure!(
            1 <= min && min <= max,
            "HPA {name}: {min} to {max} replicas"
        );
        let cpu = facts.rows("hpa-metric").into_iter().any(|m| {
            m.len() == 5
                && m[..4] == [name, "Resource", "cpu", "Utilization"]
                && m[4].parse::<u32>().is_ok_and(|percent| percent > 0)
        });
        ensure!(cpu, "HPA {name} has no CPU utilisation target");
        floors.insert(target, min);
    }
    for pdb in facts.rows("pdb") {
        let [name, budget] = pdb[..] else {
            bail!("pdb line {pdb:?}");
        };
        let selector = facts.value_of("pdb-selector", name).unwrap_or("-");
        ensure!(
            selector != "-",
            "PDB {name} has an empty selector: it would count every pod of the namespace"
        );
        let selected: Vec<&str> = facts
            .rows("pdb-selects")
            .into_iter()
            .filter(|row| row[0] == name)
            .map(|row| row[1])
            .collect();
        ensure!(
            !selected.is_empty(),
            "PDB {name} ({selector}) selects the pods of no Deployment of {deployments:?}"
        );
        for deployment in selected {
            // A Deployment without replicas and without an HPA runs Kubernetes' default, 1.
            let floor = match floors.get(deployment) {
                Some(min) => *min,
                None => match facts.value_of("deployment", deployment) {
                    Some("-") | None => 1,
                    Some(n) => n.parse()?,
                },
            };
            let evictable = match budget.split_once('=') {
                Some(("maxUnavailable", n)) => budget_pods(n, floor)? >= 1,
                Some(("minAvailable", n)) => budget_pods(n, floor)? < floor,
                _ => bail!("PDB {name} has no one budget: {budget}"),
            };
            ensure!(
                evictable,
                "PDB {name} ({budget}) lets no pod of Deployment {deployment} be evicted at {floor} replicas: every drain would wait on it"
            );
        }
    }
    for monitor in facts.rows("monitor") {
        let name = monitor[0];
        let endpoints: Vec<Vec<&str>> = facts
            .rows("monitor-endpoint")
            .into_iter()
            .filter(|row| row[0] == name)
            .collect();
        ensure!(
            !endpoints.is_empty(),
            "ServiceMonitor {name} selects no Service (services: {:?})",
            facts.rows("service-labels")
        );
        for endpoint in endpoints {
            let [_, service, port, path, container_port] = endpoint[..] else {
                bail!("monitor-endpoint line {endpoint:?}");
            };
            ensure!(
                container_port == admin_port.to_string(),
                "ServiceMonitor {name} scrapes port {port} of Service {service}, which reaches container port {container_port}, not the admin endpoint's {admin_port}"
            );
            ensure!(
                path == "/metrics",
                "ServiceMonitor {name} scrapes {path}; kpress serves /metrics"
            );
        }
    }
    Ok(())
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

/// Runs `kubernetes-validate --strict` on `file` (its custom resources through
/// `CUSTOM_RESOURCES`) and requires one "passed" line per document and no warning (an
/// unknown kind is only a warning there) or error.
fn validate(file: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)?;
    let documents = text
        .split("\n---")
        .filter(|doc| {
            doc.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .count();
    let builtin = file.with_extension("builtin.yaml");
    let custom = run(
        Command::new(paths::venv_python())
            .args(["-c", CUSTOM_RESOURCES])
            .arg(file)
            .arg(&builtin),
        TIMEOUT,
    )?;
    let finished = run(
        Command::new(venv_bin("kubernetes-validate"))
            .arg("--strict")
            .arg(&builtin),
        TIMEOUT,
    )?;
    let output = format!(
        "{}{}{}{}",
        custom.stdout_text(),
        custom.stderr_text(),
        finished.stdout_text(),
        finished.stderr_text()
    );
    let passed = output
        .lines()
        .filter(|l| l.contains(" passed for resource "))
        .count();
    let complaints: Vec<&str> = output
        .lines()
        .filter(|l| !l.contains(" passed for resource "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    if !custom.status.success()
        || !finished.status.success()
        || !complaints.is_empty()
        || passed != documents
    {
        bail!(
            "kubernetes-validate --strict {}: exit {} (custom resources: {}), {passed} of {documents} documents passed:\n{output}",
            file.display(),
            finished.status,
            custom.status
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

/// The cluster's Secrets as one test has them, `<dir>/<name>/<key>`: what
/// `MANIFEST_FACTS` mounts from. Certificates come from one test PKI: a server
/// certificate for the names kpress is reached by in these tests, and its CA.
struct Secrets {
    dir: PathBuf,
    pki: TestPki,
    server: CertFiles,
}

impl Secrets {
    /// No Secrets yet, under `<scratch>/secrets`.
    fn new(scratch: &Path) -> anyhow::Result<Secrets> {
        let pki = TestPki::generate(&scratch.join("pki"))?;
        let server = pki.server(&[
            "*.kafka.test",
            "bootstrap.kafka.test",
            "kpress",
            "kpress.kafka.svc",
        ])?;
        let dir = scratch.join("secrets");
        std::fs::create_dir_all(&dir)?;
        Ok(Secrets { dir, pki, server })
    }

    /// Secrets holding the server certificate under the keys of a `kubernetes.io/tls`
    /// Secret (`tls.crt`, `tls.key`) and the CA as cert-manager adds it (`ca.crt`).
    fn tls(self, names: &[&str]) -> anyhow::Result<Secrets> {
        for name in names {
            self.file(name, "tls.crt", &self.server.chain)?;
            self.file(name, "tls.key", &self.server.key)?;
            self.file(name, "ca.crt", self.pki.ca_cert())?;
        }
        Ok(self)
    }

    /// Secret `name` holding the CA bundle under `key`.
    fn ca(self, name: &str, key: &str) -> anyhow::Result<Secrets> {
        self.file(name, key, self.pki.ca_cert())?;
        Ok(self)
    }

    /// Secret `name` holding `text` under `key`.
    fn text(self, name: &str, key: &str, text: &str) -> anyhow::Result<Secrets> {
        let secret = self.dir.join(name);
        std::fs::create_dir_all(&secret)?;
        std::fs::write(secret.join(key), text)?;
        Ok(self)
    }

    fn file(&self, name: &str, key: &str, from: &Path) -> anyhow::Result<()> {
        let secret = self.dir.join(name);
        std::fs::create_dir_all(&secret)?;
        std::fs::copy(from, secret.join(key))?;
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

/// The namespace the manifests are applied in (`helm template --namespace`).
const NAMESPACE: &str = "kafka";

/// `MANIFEST_FACTS` on `manifests`, laying out the pods' volumes under `pod`.
fn read_facts(manifests: &Path, pod: &Path, secrets: &Path) -> anyhow::Result<Facts> {
    let printed = run_ok(
        Command::new(paths::venv_python())
            .args(["-c", MANIFEST_FACTS])
            .arg(manifests)
            .arg(pod)
            .arg(secrets)
            .arg(NAMESPACE),
        TIMEOUT,
    )
    .with_context(|| format!("reading {}", manifests.display()))?;
    Facts::parse(&printed.stdout_text())
}

/// Everything checked of one set of manifests: validation, facts, the mounted volume
/// laid out under `<scratch>/pod`, and `kpress check-config` on the policy the
/// container's `--config` names there. The cluster has the TLS Secrets the chart's
/// tests name (`kpress-tls`, `clients-ca`, `brokers-tls`). Returns the facts and
/// check-config's output.
fn check_manifests(scratch: &Path, manifests: &Path) -> anyhow::Result<(Facts, String)> {
    let secrets = Secrets::new(scratch)?.tls(&["kpress-tls", "clients-ca", "brokers-tls"])?;
    check_manifests_with(scratch, manifests, &secrets)
}

/// [`check_manifests`] in a cluster with `secrets`. An absolute path in the policy
/// under a mount of the pod is read where the mount is laid out, as the pod would.
fn check_manifests_with(
    scratch: &Path,
    manifests: &Path,
    secrets: &Secrets,
) -> anyhow::Result<(Facts, String)> {
    validate(manifests)?;
    let pod = scratch.join("pod");
    let facts = read_facts(manifests, &pod, secrets.path())?;

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
    let text = std::fs::read_to_string(&policy)?;
    let mut in_pod = text.clone();
    for mount in facts.rows("mount") {
        let mount = mount[0].trim_end_matches('/');
        let laid_out = format!("\"{}{mount}/", pod.display());
        in_pod = in_pod.replace(&format!("\"{mount}/"), &laid_out);
    }
    if in_pod != text {
        std::fs::write(&policy, in_pod)?;
    }
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
    for name in [
        "configmap.yaml",
        "serviceaccount.yaml",
        "deployment.yaml",
        "service.yaml",
    ] {
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
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "Service",
            "ServiceAccount"
        ]
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
    // Its own ServiceAccount, with no API token; the credential Secrets are optional
    // and absent from this cluster, so nothing of them is mounted.
    for line in [
        "pod-service-account kpress kpress False",
        "service-account kpress False -",
        "absent /etc/kpress/upstream-sasl/password secret kpress-upstream-sasl password",
        "absent /etc/kpress/upstream-tls/ca.crt secret kpress-upstream-tls ca.crt",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
    assert_eq!(
        facts.mounted_files,
        [
            "/etc/kpress/kpress.toml",
            "/etc/kpress/tls/tls.crt",
            "/etc/kpress/tls/tls.key"
        ]
    );
}

/// The plain manifests' documented way to a SASL_SSL cluster: the configmap's
/// commented [upstream.tls] and [upstream.sasl] lines, the Secrets
/// kpress-upstream-tls and kpress-upstream-sasl.
#[test]
fn plain_manifests_log_in_with_the_optional_credential_secrets() {
    let scratch = Scratch::new("plain-scram");
    let root = paths::workspace_root().join("deploy/kubernetes");
    let commented =
        "    # [upstream.tls]\n    # ca = \"upstream-tls/ca.crt\"\n    # [upstream.sasl]\n    \
                     # mechanism = \"SCRAM-SHA-512\"\n    # username = \"kpress\"\n    \
                     # password_file = \"upstream-sasl/password\"\n";
    let configmap = std::fs::read_to_string(root.join("configmap.yaml")).unwrap();
    assert_eq!(configmap.matches(commented).count(), 1, "{commented}");
    let mut all = format!(
        "---\n{}",
        configmap.replace(commented, &commented.replace("# ", ""))
    );
    for name in ["serviceaccount.yaml", "deployment.yaml", "service.yaml"] {
        all.push_str("---\n");
        all.push_str(&std::fs::read_to_string(root.join(name)).unwrap());
    }
    let manifests = scratch.path().join("manifests.yaml");
    std::fs::write(&manifests, all).unwrap();
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .and_then(|s| s.ca("kpress-upstream-tls", "ca.crt"))
        .and_then(|s| s.text("kpress-upstream-sasl", "password", "plain-password\n"))
        .unwrap();
    let (facts, checked) = check_manifests_with(scratch.path(), &manifests, &secrets).unwrap();
    assert!(
        checked.contains("kpress's own SASL: SCRAM-SHA-512 as \"kpress\", password from file ")
            && checked.contains("/etc/kpress/upstream-sasl/password"),
        "{checked}"
    );
    assert!(
        checked.contains("brokers: TLS, certificates checked against ")
            && checked.contains("/etc/kpress/upstream-tls/ca.crt"),
        "{checked}"
    );
    for line in [
        "file /etc/kpress/upstream-sasl/password secret kpress-upstream-sasl password",
        "file /etc/kpress/upstream-tls/ca.crt secret kpress-upstream-tls ca.crt",
        "absent /etc/kpress/upstream-tls/tls.crt secret kpress-upstream-tls tls.crt",
        "absent /etc/kpress/upstream-sasl/token secret kpress-upstream-sasl token",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }

    // The policy names the password, the cluster has no such Secret: the optional mount
    // is empty and check-config, as the pod would run it, says which file is missing.
    let scratch = Scratch::new("plain-scram-missing");
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .and_then(|s| s.ca("kpress-upstream-tls", "ca.crt"))
        .unwrap();
    let err = check_manifests_with(scratch.path(), &manifests, &secrets).unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("upstream.sasl.password_file") && err.contains("file not found"),
        "{err}"
    );
}

#[test]
fn chart_defaults_render_ports_mode_without_tls() {
    let scratch = Scratch::new("defaults");
    let manifests = scratch.path().join("manifests.yaml");
    std::fs::write(&manifests, helm_template(&[]).unwrap()).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        [
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceAccount"
        ]
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
    // Two replicas, no HPA: the Deployment sets them, and a drain takes one at a time.
    assert!(facts.has_line("deployment kpress 2"), "{:?}", facts.lines);
    assert!(
        facts.has_line("pdb kpress maxUnavailable=1"),
        "{:?}",
        facts.lines
    );
    assert!(
        facts.has_line("pdb-selects kpress kpress"),
        "{:?}",
        facts.lines
    );
    assert!(facts.rows("hpa").is_empty() && facts.rows("monitor").is_empty());
    let annotations = facts.value_of("pod-annotations", "kpress").unwrap();
    assert!(
        annotations.contains("prometheus.io/scrape"),
        "{annotations}"
    );
    check_scaling(&facts, 9464).unwrap();
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
    check_scaling(&facts, 9500).unwrap();
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
    check_scaling(&facts, 9464).unwrap();
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
    check_scaling(&facts, 9464).unwrap();
}

/// The examples in deploy/kubernetes/scaling/ with the plain manifests, after the edit
/// hpa.yaml asks for: deployment.yaml's `replicas: 2` removed.
#[test]
fn plain_scaling_examples_scale_drain_and_scrape_the_plain_deployment() {
    let scratch = Scratch::new("plain-scaling");
    let root = paths::workspace_root().join("deploy/kubernetes");
    let replicas = "\n  replicas: 2\n";
    let mut as_shipped = String::new();
    let mut with_hpa = String::new();
    for name in [
        "configmap.yaml",
        "serviceaccount.yaml",
        "deployment.yaml",
        "service.yaml",
        "scaling/hpa.yaml",
        "scaling/pdb.yaml",
        "scaling/servicemonitor.yaml",
    ] {
        let text = std::fs::read_to_string(root.join(name)).unwrap();
        as_shipped.push_str("---\n");
        as_shipped.push_str(&text);
        with_hpa.push_str("---\n");
        if name == "deployment.yaml" {
            assert_eq!(text.matches(replicas).count(), 1, "{name}: {replicas:?}");
            with_hpa.push_str(&text.replacen(replicas, "\n", 1));
        } else {
            with_hpa.push_str(&text);
        }
    }
    let manifests = scratch.path().join("manifests.yaml");
    std::fs::write(&manifests, &with_hpa).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
    assert_probes_on_admin_port(&facts, &checked, 9464);
    for line in [
        "deployment kpress -",
        "hpa kpress apps/v1 Deployment kpress 2 6",
        "hpa-metric kpress Resource cpu Utilization 70",
        "hpa-scale-down-window kpress 600",
        "pdb kpress maxUnavailable=1",
        "pdb-selects kpress kpress",
        "monitor-selects kpress kpress-admin",
        "monitor-endpoint kpress kpress-admin admin /metrics 9464",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
    assert_eq!(facts.rows("monitor-selects").len(), 1, "{:?}", facts.lines);
    check_scaling(&facts, 9464).unwrap();

    // As shipped, deployment.yaml sets replicas, which the HPA would fight.
    let shipped = scratch.path().join("as-shipped.yaml");
    std::fs::write(&shipped, &as_shipped).unwrap();
    let secrets = scratch.path().join("secrets");
    let facts = read_facts(&shipped, &scratch.path().join("pod-2"), &secrets).unwrap();
    let err = check_scaling(&facts, 9464).unwrap_err();
    assert!(format!("{err:#}").contains("sets replicas: 2"), "{err:#}");
}

#[test]
fn chart_autoscaling_hands_replicas_to_an_hpa_on_cpu() {
    let scratch = Scratch::new("hpa");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&["--set", "autoscaling.enabled=true"]).unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceAccount"
        ]
    );
    assert_probes_on_admin_port(&facts, &checked, 9464);
    for line in [
        "deployment kpress -",
        "hpa kpress apps/v1 Deployment kpress 2 6",
        "hpa-metric kpress Resource cpu Utilization 70",
        "hpa-scale-down-window kpress 600",
        "pdb kpress maxUnavailable=1",
        "pdb-selects kpress kpress",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
    check_scaling(&facts, 9464).unwrap();

    // Own bounds down to one replica, Kubernetes' own behavior: no budget then (with
    // one pod it would protect nothing or block every drain).
    let scratch = Scratch::new("hpa-one");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&[
        "--set",
        "autoscaling.enabled=true,autoscaling.minReplicas=1,autoscaling.maxReplicas=10",
        "--set",
        "autoscaling.targetCPUUtilizationPercentage=80,autoscaling.behavior=null",
    ])
    .unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, _) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "Service",
            "Service",
            "ServiceAccount"
        ]
    );
    for line in [
        "deployment kpress -",
        "hpa kpress apps/v1 Deployment kpress 1 10",
        "hpa-metric kpress Resource cpu Utilization 80",
        "hpa-scale-down-window kpress -",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
    check_scaling(&facts, 9464).unwrap();
}

#[test]
fn chart_disruption_budget_follows_the_replica_count() {
    let scratch = Scratch::new("pdb");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&[
        "--set",
        "replicaCount=3",
        "--set-string",
        "podDisruptionBudget.minAvailable=50%",
    ])
    .unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, _) = check_manifests(scratch.path(), &manifests).unwrap();
    for line in [
        "deployment kpress 3",
        "pdb kpress minAvailable=50%",
        "pdb-selects kpress kpress",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
    assert_eq!(
        facts.value_of("pdb-selector", "kpress"),
        facts.value_of("pod-labels", "kpress")
    );
    check_scaling(&facts, 9464).unwrap();

    for (name, args) in [
        ("pdb-one", ["--set", "replicaCount=1"]),
        ("pdb-off", ["--set", "podDisruptionBudget.enabled=false"]),
    ] {
        let scratch = Scratch::new(name);
        let manifests = scratch.path().join("manifests.yaml");
        std::fs::write(&manifests, helm_template(&args).unwrap()).unwrap();
        let (facts, _) = check_manifests(scratch.path(), &manifests).unwrap();
        assert_eq!(
            kinds(&facts),
            [
                "ConfigMap",
                "Deployment",
                "Service",
                "Service",
                "ServiceAccount"
            ],
            "{args:?}"
        );
    }
}

#[test]
fn chart_service_monitor_scrapes_metrics_on_the_admin_port() {
    let scratch = Scratch::new("servicemonitor");
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&[
        "--set",
        "serviceMonitor.enabled=true,serviceMonitor.namespace=monitoring,admin.port=9500",
        "--set",
        "serviceMonitor.labels.release=kube-prometheus-stack,serviceMonitor.interval=15s",
    ])
    .unwrap();
    std::fs::write(&manifests, rendered).unwrap();
    let (facts, checked) = check_manifests(scratch.path(), &manifests).unwrap();
    assert_eq!(
        kinds(&facts),
        [
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
    assert_probes_on_admin_port(&facts, &checked, 9500);
    assert_eq!(
        facts.rows("monitor-selects"),
        [vec!["kpress", "kpress-admin"]],
        "{:?}",
        facts.lines
    );
    assert!(
        facts.has_line("monitor-endpoint kpress kpress-admin admin /metrics 9500"),
        "{:?}",
        facts.lines
    );
    // The ServiceMonitor replaces the annotations annotation-based scraping reads.
    let annotations = facts.value_of("pod-annotations", "kpress").unwrap();
    assert!(!annotations.contains("prometheus.io"), "{annotations}");
    check_scaling(&facts, 9500).unwrap();
}

/// `check_scaling` must be able to fail: each way a scaling object can miss what it
/// points at, made in otherwise valid rendered manifests, is refused.
#[test]
fn scaling_objects_that_miss_their_targets_fail_the_checks() {
    let scratch = Scratch::new("scaling-broken");
    let rendered = helm_template(&[
        "--set",
        "autoscaling.enabled=true,serviceMonitor.enabled=true",
    ])
    .unwrap();
    let file = scratch.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).unwrap();
    let facts = read_facts(&file, &scratch.path().join("pod"), scratch.path()).unwrap();
    check_scaling(&facts, 9464).unwrap();
    for (i, (what, from, to, message)) in [
        (
            "an HPA scaling another Deployment",
            "    kind: Deployment\n    name: kpress\n",
            "    kind: Deployment\n    name: kpress-old\n",
            "which is not among",
        ),
        (
            "replicas beside the HPA",
            "spec:\n  selector:\n",
            "spec:\n  replicas: 2\n  selector:\n",
            "sets replicas: 2",
        ),
        (
            "an HPA on memory",
            "        name: cpu\n",
            "        name: memory\n",
            "no CPU utilisation target",
        ),
        (
            "a PDB selecting other pods",
            "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: kpress\n",
            "  maxUnavailable: 1\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: kpress-old\n",
            "selects the pods of no Deployment",
        ),
        (
            "a PDB keeping every pod",
            "  maxUnavailable: 1\n",
            "  minAvailable: 2\n",
            "lets no pod of Deployment kpress be evicted at 2 replicas",
        ),
        (
            "a ServiceMonitor naming a port the Service has not",
            "    - port: admin\n      path: /metrics\n",
            "    - port: metrics\n      path: /metrics\n",
            "reaches container port -",
        ),
        (
            "a ServiceMonitor selecting the clients' Service too",
            "      app.kubernetes.io/component: admin\n",
            "",
            "of Service kpress, which reaches container port -",
        ),
        (
            "a ServiceMonitor scraping another path",
            "      path: /metrics\n",
            "      path: /stats\n",
            "scrapes /stats",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let broken = rendered.replacen(from, to, 1);
        assert_ne!(broken, rendered, "{what}: nothing was changed");
        let file = scratch.path().join(format!("broken-{i}.yaml"));
        std::fs::write(&file, &broken).unwrap();
        let facts = read_facts(&file, &scratch.path().join(format!("pod-{i}")), scratch.path())
            .unwrap();
        let err = check_scaling(&facts, 9464).expect_err(what);
        assert!(format!("{err:#}").contains(message), "{what}: {err:#}");
    }
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
        (
            vec![
                "--set",
                "autoscaling.enabled=true,resources.requests.cpu=null",
            ],
            "a share of the CPU request: set resources.requests.cpu",
        ),
        (
            vec![
                "--set",
                "autoscaling.enabled=true,autoscaling.minReplicas=4,autoscaling.maxReplicas=3",
            ],
            "autoscaling.maxReplicas (3) must be at least autoscaling.minReplicas (4)",
        ),
        (
            vec!["--set", "podDisruptionBudget.minAvailable=2"],
            "keeps all of the 2 replicas the Deployment may run",
        ),
        (
            vec![
                "--set",
                "autoscaling.enabled=true,autoscaling.minReplicas=3",
                "--set-string",
                "podDisruptionBudget.minAvailable=100%",
            ],
            "keeps all of the 3 replicas the Deployment may run",
        ),
        (
            vec!["--set", "podDisruptionBudget.maxUnavailable=0"],
            "lets no pod be evicted",
        ),
        (
            vec!["--set", "upstreamSasl.mechanism=SCRAM"],
            r#"upstreamSasl.mechanism must be "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512" or "OAUTHBEARER", not "SCRAM""#,
        ),
        (
            vec!["--set", "upstreamSasl.passwordRef.name=kpress"],
            "upstreamSasl.passwordRef: set upstreamSasl.mechanism too",
        ),
        (
            vec!["--set", "upstreamSasl.mechanism=SCRAM-SHA-512,upstreamSasl.username=kpress"],
            "needs the password: passwordRef (a Secret's key) or passwordEnv",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=PLAIN,upstreamSasl.username=kpress",
                "--set",
                "upstreamSasl.passwordRef.name=kpress,upstreamSasl.passwordEnv=PASSWORD",
            ],
            "set only one of passwordRef and passwordEnv",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=PLAIN,upstreamSasl.username=kpress,upstreamSasl.passwordEnv=PASSWORD",
            ],
            "upstreamSasl.passwordEnv names PASSWORD, which no entry of env sets",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=PLAIN,upstreamSasl.username=kpress",
                "--set",
                "upstreamSasl.passwordRef.name=kpress,upstreamSasl.passwordRef.key=",
            ],
            "upstreamSasl.passwordRef.key: name the key of Secret kpress",
        ),
        (
            vec!["--set", "upstreamSasl.mechanism=OAUTHBEARER"],
            "OAUTHBEARER takes its tokens from a token endpoint (tokenEndpointUrl)",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.username=kpress",
            ],
            "upstreamSasl.username is for PLAIN and SCRAM, not OAUTHBEARER",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenEndpointUrl=https://idp/token",
            ],
            "upstreamSasl.tokenEndpointUrl needs upstreamSasl.clientId",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenEndpointUrl=idp/token",
            ],
            r#"upstreamSasl.tokenEndpointUrl must be an http(s) URL with a host, not "idp/token""#,
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenProvider=aws_msk_iam",
                "--set",
                "upstreamSasl.tokenFile=/t",
            ],
            "set only one token source, not tokenFile and tokenProvider",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenProvider=aws_msk_iam",
                "--set",
                "upstreamSasl.region=eu-west-1",
            ],
            "MSK's IAM listeners take TLS only (port 9098): set upstreamTls.enabled",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenProvider=aws_msk_iam",
                "--set",
                "upstreamTls.enabled=true",
            ],
            "needs upstreamSasl.region",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenFile=/t,upstreamSasl.region=eu-west-1",
            ],
            "upstreamSasl.region is only for tokenProvider, not tokenFile",
        ),
        (
            vec![
                "--set",
                "upstreamSasl.mechanism=OAUTHBEARER,upstreamSasl.tokenFile=token",
            ],
            r#"upstreamSasl.tokenFile must be an absolute path in a volume of extraVolumes, not "token""#,
        ),
        (
            vec!["--set", "upstreamTls.clientCertificate=true"],
            "upstreamTls.clientCertificate: name the Secret holding it",
        ),
        (
            vec!["--set", "upstreamTls.secretName=ca,upstreamTls.caKey=ca crt"],
            r#""ca crt" is not a Secret key"#,
        ),
        (
            vec![
                "--set-json",
                r#"extraVolumeMounts=[{"name":"t","mountPath":"/etc/kpress/token"}]"#,
            ],
            "extraVolumeMounts: /etc/kpress/token is under /etc/kpress",
        ),
        (
            vec![
                "--set",
                "serviceAccount.create=false",
                "--set-string",
                "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r",
            ],
            "serviceAccount.annotations apply to a ServiceAccount the chart creates",
        ),
    ] {
        let err = helm_template(&args).expect_err(&format!("{args:?} rendered"));
        assert!(format!("{err:#}").contains(message), "{args:?}: {err:#}");
    }
}

/// The validation above must be able to fail: a misspelt field, a wrong type and an
/// unknown kind in otherwise valid rendered manifests are each refused, and so are a
/// ServiceMonitor's misspelt field, wrong type and malformed duration.
#[test]
fn an_invalid_manifest_fails_validation() {
    let scratch = Scratch::new("invalid");
    let rendered = helm_template(&["--set", "serviceMonitor.enabled=true"]).unwrap();
    let file = scratch.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).unwrap();
    validate(&file).unwrap();
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
        (
            "a ServiceMonitor's misspelt field",
            rendered.replacen("  endpoints:\n", "  endpoint:\n", 1),
        ),
        (
            "a ServiceMonitor's port as a number",
            rendered.replacen(
                "    - port: admin\n      path:",
                "    - port: 9464\n      path:",
                1,
            ),
        ),
        (
            "a ServiceMonitor's interval that is no duration",
            rendered.replacen("interval: 30s", "interval: 30 seconds", 1),
        ),
        ("a ServiceMonitor's selector's misspelt field", {
            let (others, monitor) =
                rendered.split_at(rendered.find("kind: ServiceMonitor").unwrap());
            format!(
                "{others}{}",
                monitor.replacen("matchLabels:", "matchLabel:", 1)
            )
        }),
    ] {
        assert_ne!(broken, rendered, "{what}: nothing was changed");
        let file = scratch.path().join("broken.yaml");
        std::fs::write(&file, &broken).unwrap();
        assert!(validate(&file).is_err(), "{what} passed validation");
    }
}

/// A worked values file of deploy/helm/kpress/examples/.
fn example(name: &str) -> String {
    chart_dir()
        .join("examples")
        .join(name)
        .to_str()
        .unwrap()
        .to_owned()
}

/// The example renders with `secrets` in the cluster: validated, laid out and checked.
fn check_example(scratch: &Path, name: &str, secrets: &Secrets) -> anyhow::Result<(Facts, String)> {
    let manifests = scratch.join("manifests.yaml");
    std::fs::write(&manifests, helm_template(&["--values", &example(name)])?)?;
    check_manifests_with(scratch, &manifests, secrets)
}

/// The rows of one tag, each joined back into a line: for comparing whole sets.
fn joined_rows(facts: &Facts, tag: &str) -> Vec<String> {
    facts
        .rows(tag)
        .into_iter()
        .map(|row| row.join(" "))
        .collect()
}

#[test]
fn scram_example_mounts_the_password_where_its_policy_names_it() {
    let scratch = Scratch::new("example-scram");
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .and_then(|s| s.ca("my-cluster-cluster-ca-cert", "ca.crt"))
        .and_then(|s| s.text("kpress", "password", "scram-password\n"))
        .unwrap();
    let (facts, checked) = check_example(scratch.path(), "scram.yaml", &secrets).unwrap();
    assert!(checked.contains("clients: TLS"), "{checked}");
    assert!(
        checked.contains("brokers: TLS, certificates checked against ")
            && checked.contains("/etc/kpress/upstream-tls/ca.crt"),
        "{checked}"
    );
    assert!(
        checked.contains("kpress's own SASL: SCRAM-SHA-512 as \"kpress\", password from file ")
            && checked.contains("/etc/kpress/upstream-sasl/password"),
        "{checked}"
    );
    assert!(checked.contains("other topics: topic"), "{checked}");
    assert_eq!(
        joined_rows(&facts, "file"),
        [
            "/etc/kpress/kpress.toml configmap kpress.toml",
            "/etc/kpress/tls/tls.crt secret kpress-tls tls.crt",
            "/etc/kpress/tls/tls.key secret kpress-tls tls.key",
            "/etc/kpress/upstream-tls/ca.crt secret my-cluster-cluster-ca-cert ca.crt",
            "/etc/kpress/upstream-sasl/password secret kpress password",
        ]
    );
    let mounted = scratch.path().join("pod/etc/kpress/upstream-sasl/password");
    assert_eq!(
        std::fs::read_to_string(mounted).unwrap(),
        "scram-password\n"
    );
    assert!(facts.rows("env").is_empty(), "{:?}", facts.lines);
    assert!(
        facts.has_line("pod-service-account kpress kpress False"),
        "{:?}",
        facts.lines
    );
    assert_probes_on_admin_port(&facts, &checked, 9464);

    // Without the password's Secret the pod cannot start: laying it out says which.
    let scratch = Scratch::new("example-scram-missing");
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .and_then(|s| s.ca("my-cluster-cluster-ca-cert", "ca.crt"))
        .unwrap();
    let err = check_example(scratch.path(), "scram.yaml", &secrets).unwrap_err();
    assert!(
        format!("{err:#}").contains("key password of Secret kpress, which this test's cluster"),
        "{err:#}"
    );
}

#[test]
fn oauthbearer_example_mounts_the_client_secret_and_the_token_endpoints_ca() {
    let scratch = Scratch::new("example-oauthbearer");
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .and_then(|s| s.ca("company-ca", "ca.crt"))
        .and_then(|s| s.text("kpress-oauth", "client-secret", "oauth-client-secret\n"))
        .unwrap();
    let (facts, checked) = check_example(scratch.path(), "oauthbearer.yaml", &secrets).unwrap();
    assert!(
        checked.contains(
            "kpress's own SASL: OAUTHBEARER, tokens from \
             https://login.example.com/realms/kafka/protocol/openid-connect/token as client \
             \"kpress\", secret from file "
        ) && checked.contains("/etc/kpress/upstream-sasl/client-secret, scope \"kafka\""),
        "{checked}"
    );
    assert!(
        checked.contains("/etc/kpress/upstream-tls/ca.crt"),
        "{checked}"
    );
    assert_eq!(
        joined_rows(&facts, "file"),
        [
            "/etc/kpress/kpress.toml configmap kpress.toml",
            "/etc/kpress/tls/tls.crt secret kpress-tls tls.crt",
            "/etc/kpress/tls/tls.key secret kpress-tls tls.key",
            "/etc/kpress/upstream-tls/ca.crt secret company-ca ca.crt",
            "/etc/kpress/token-endpoint-ca/ca.crt secret company-ca ca.crt",
            "/etc/kpress/upstream-sasl/client-secret secret kpress-oauth client-secret",
        ]
    );
    // The token endpoint is checked against the mounted bundle.
    assert_eq!(
        joined_rows(&facts, "env"),
        ["SSL_CERT_FILE /etc/kpress/token-endpoint-ca/ca.crt"]
    );
    let bundle = scratch
        .path()
        .join("pod/etc/kpress/token-endpoint-ca/ca.crt");
    assert!(
        std::fs::read_to_string(bundle)
            .unwrap()
            .contains("BEGIN CERTIFICATE"),
        "the mounted CA bundle"
    );
}

#[test]
fn msk_iam_example_signs_with_the_service_accounts_role_and_no_static_keys() {
    let scratch = Scratch::new("example-msk-iam");
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.tls(&["kpress-tls"]))
        .unwrap();
    let (facts, checked) = check_example(scratch.path(), "msk-iam.yaml", &secrets).unwrap();
    assert!(
        checked.contains("kpress's own SASL: OAUTHBEARER, AWS MSK IAM tokens for eu-west-1"),
        "{checked}"
    );
    assert!(
        checked.contains("brokers: TLS, certificates checked against the system's roots"),
        "{checked}"
    );
    assert!(
        checked.contains("-> b-1.orders.a1b2c3.c2.kafka.eu-west-1.amazonaws.com:9098"),
        "{checked}"
    );
    // IRSA: the role on the ServiceAccount the pods run as; its webhook injects
    // AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE. No key, no credential Secret.
    assert_eq!(
        joined_rows(&facts, "service-account"),
        ["kpress False eks.amazonaws.com/role-arn=arn:aws:iam::111122223333:role/kpress-msk"]
    );
    assert!(
        facts.has_line("pod-service-account kpress kpress False"),
        "{:?}",
        facts.lines
    );
    assert!(facts.rows("env").is_empty() && facts.rows("env-from").is_empty());
    assert_eq!(
        facts.mounted_files,
        [
            "/etc/kpress/kpress.toml",
            "/etc/kpress/tls/tls.crt",
            "/etc/kpress/tls/tls.key"
        ]
    );
    assert_eq!(
        facts.ports_of("kpress"),
        ports(&[9092, 9193, 9194, 9195]),
        "MSK's broker ids 1..3"
    );
}

/// env, envFrom, extra volumes, and a token file another container keeps fresh in one.
#[test]
fn chart_takes_env_extra_volumes_and_a_token_file_in_them() {
    let scratch = Scratch::new("extra");
    let values = scratch.path().join("values.yaml");
    std::fs::write(
        &values,
        r#"
upstreamTls:
  enabled: true
upstreamSasl:
  mechanism: OAUTHBEARER
  tokenFile: /var/run/kafka-token/token
serviceAccount:
  create: false
  name: kafka-clients
env:
  - name: KPRESS_LOG
    value: info,kpress_proxy=debug
envFrom:
  - secretRef:
      name: kpress-env
extraVolumes:
  - name: kafka-token
    secret:
      secretName: kafka-token
extraVolumeMounts:
  - name: kafka-token
    mountPath: /var/run/kafka-token
    readOnly: true
"#,
    )
    .unwrap();
    let manifests = scratch.path().join("manifests.yaml");
    let rendered = helm_template(&["--values", values.to_str().unwrap()]).unwrap();
    std::fs::write(&manifests, &rendered).unwrap();
    let secrets = Secrets::new(scratch.path())
        .and_then(|s| s.text("kafka-token", "token", "eyJhbGciOiJub25lIn0.e30.\n"))
        .unwrap();
    let (facts, checked) = check_manifests_with(scratch.path(), &manifests, &secrets).unwrap();
    assert!(
        checked.contains("kpress's own SASL: OAUTHBEARER, tokens from file ")
            && checked.contains("/var/run/kafka-token/token (re-read when it changes)"),
        "{checked}"
    );
    assert!(
        rendered.contains("token_file = \"/var/run/kafka-token/token\""),
        "{rendered}"
    );
    // An existing ServiceAccount is used, not created.
    assert!(
        facts.rows("service-account").is_empty(),
        "{:?}",
        facts.lines
    );
    for line in [
        "pod-service-account kpress kafka-clients False",
        "env KPRESS_LOG info,kpress_proxy=debug",
        "env-from secret kpress-env",
        "file /var/run/kafka-token/token secret kafka-token token",
    ] {
        assert!(facts.has_line(line), "{line}: {:?}", facts.lines);
    }
}

/// The pod template's checksum/config follows the sections kpress fixes at start: a
/// rules change reloads live and leaves it, a [limits], broker or login change rolls
/// the pods.
#[test]
fn chart_rolls_pods_only_for_what_a_reload_cannot_apply() {
    let checksum = |args: &[&str]| -> String {
        let rendered = helm_template(args).unwrap();
        let line = rendered
            .lines()
            .find(|l| l.trim_start().starts_with("checksum/config: "))
            .unwrap_or_else(|| panic!("no checksum/config in {rendered}"));
        line.trim_start()["checksum/config: ".len()..].to_owned()
    };
    let shipped = checksum(&[]);
    assert_eq!(shipped.len(), 64, "{shipped}");
    let live = "[defaults]\ncompression.type = \"zstd\"\n[[topics]]\nmatch = \"a.*\"\n\
                compression.type = \"lz4\"\n[log]\nlevel = \"debug\"\n[shadow]\n\
                candidates = [\"zstd:9\"]\n[overload]\nadaptive = true\n";
    assert_eq!(
        checksum(&["--set-string", &format!("rules={live}")]),
        shipped,
        "rules reload live"
    );
    for args in [
        vec![
            "--set-string",
            "rules=[limits]\nmax_frame_bytes = 16777216\n",
        ],
        vec!["--set-json", r#"brokers=["kafka-9:9092"]"#],
        vec!["--set", "admin.readinessWindowSecs=60"],
        vec!["--set", "upstreamTls.enabled=true"],
    ] {
        assert_ne!(checksum(&args), shipped, "{args:?} must roll the pods");
    }
    // A whole policy file: the same split.
    let policy =
        "[listener]\nbind = \"0.0.0.0:9092\"\n[upstream]\nbootstrap_servers = [\"k:9092\"]\n\
                  [admin]\nbind = \"0.0.0.0:9464\"\n";
    let whole = checksum(&["--set-string", &format!("policy={policy}")]);
    assert_eq!(
        checksum(&["--set-string", &format!("policy={policy}{live}")]),
        whole
    );
    assert_ne!(
        checksum(&[
            "--set-string",
            &format!("policy={policy}[limits]\nmax_connections = 100\n")
        ]),
        whole
    );
}

/// The chart's appVersion (the default image tag) and the plain Deployment's image are
/// the workspace's version.
#[test]
fn chart_and_manifests_name_the_workspace_version() {
    let root = paths::workspace_root();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let workspace = &cargo[cargo.find("[workspace.package]").unwrap()..];
    let version = workspace
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|v| v.trim_matches('"'))
        .expect("[workspace.package] version");
    let chart = std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap();
    assert!(
        chart
            .lines()
            .any(|l| l == format!("appVersion: \"{version}\"")),
        "Chart.yaml's appVersion is not {version}:\n{chart}"
    );
    let rendered = helm_template(&[]).unwrap();
    assert!(
        rendered.contains(&format!("image: \"kpress:{version}\"")),
        "{rendered}"
    );
    let plain = std::fs::read_to_string(root.join("deploy/kubernetes/deployment.yaml")).unwrap();
    assert!(
        plain.contains(&format!("image: kpress:{version}\n")),
        "deploy/kubernetes/deployment.yaml's image is not kpress:{version}"
    );
}
