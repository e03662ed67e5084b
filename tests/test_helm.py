"""The Helm chart in deploy/helm/runnel (docs/kubernetes.md), checked offline.

`helm lint --strict` and `helm template` with the chart's default values and with
deploy/helm/values-3-regions.yaml; every rendered object validated against the Kubernetes
JSON schemas that the kubernetes-validate package ships (strict: no unknown fields), for
the Kubernetes version pinned below; then what the chart is for: the StatefulSet, its
volumes and probes, the Services, the PodDisruptionBudget, the location init container and
its RBAC, TLS, Prometheus scraping, the grace period and the quorum voters. Finally the
chart's own scripts run here, with a stand-in kubectl, to write the configuration of the
broker at ordinal 1, and every setting in it must be one that docs/configuration.md lists.

Nothing is downloaded: helm is .cache/go/bin/helm (scripts/helm.sh installs it;
scripts/test.sh runs that), the schemas are inside the package. Nothing here runs on a
real cluster.
"""

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

import kubernetes_validate

ROOT = pathlib.Path(__file__).resolve().parents[1]
HELM = ROOT / ".cache" / "go" / "bin" / "helm"
CHART = ROOT / "deploy" / "helm" / "runnel"
VALUES_3_REGIONS = ROOT / "deploy" / "helm" / "values-3-regions.yaml"
CONFIGURATION_MD = ROOT / "docs" / "configuration.md"
KUBERNETES_MD = ROOT / "docs" / "kubernetes.md"

# The Kubernetes version the objects are rendered for and validated against: one whose
# schemas kubernetes-validate ships (tests/requirements.txt pins the package).
KUBE_VERSION = "1.33.0"
RELEASE, NAMESPACE = "runnel", "kafka"
DOMAIN = f"runnel-headless.{NAMESPACE}.svc.cluster.local"

# Kinds from CustomResourceDefinitions, which kubernetes-validate has no schema for: not
# validated against a schema (their fields are checked by the tests that use them).
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}


def helm(*args):
    if not HELM.exists():
        pytest.fail(f"helm is not installed at {HELM}: run scripts/helm.sh (scripts/test.sh does)")
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"helm {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def helm_fails(*args):
    """Runs a helm command that must fail; returns its error output."""
    if not HELM.exists():
        pytest.fail(f"helm is not installed at {HELM}: run scripts/helm.sh (scripts/test.sh does)")
    r = subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0, f"helm {' '.join(args)} succeeded, expected a refusal:\n{r.stdout}"
    return r.stderr


def template_args(*values_files, sets=()):
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION]
    for f in values_files:
        args += ["--values", str(f)]
    for s in sets:
        args += ["--set", s]
    return args


def render(*values_files, sets=()):
    docs = yaml.safe_load_all(helm(*template_args(*values_files, sets=sets)))
    return [d for d in docs if d]


def one(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def properties(text):
    """key=value lines (server.properties) as a dict; a key given twice is an error."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, _, v = line.partition("=")
        assert k not in out, f"{k} is set twice"
        out[k] = v
    return out


def shared_config(objects):
    return properties(one(objects, "ConfigMap")["data"]["server.properties"])


def broker_container(sts):
    return next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "runnel")


@pytest.fixture(scope="module")
def default_objects():
    return render()


@pytest.fixture(scope="module")
def regions_objects():
    return render(VALUES_3_REGIONS)


@pytest.fixture(scope="module")
def monitored_objects():
    return render(VALUES_3_REGIONS, sets=["metrics.serviceMonitor.enabled=true"])


def test_helm_lint_strict_with_default_and_3_region_values():
    out = helm("lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    out = helm("lint", "--strict", "--kube-version", KUBE_VERSION, "--values", str(VALUES_3_REGIONS), str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out


def test_every_rendered_object_validates_against_the_kubernetes_schemas(
    default_objects, regions_objects, monitored_objects
):
    errors, validated, crds = [], 0, 0
    renders = [("default", default_objects), ("3-regions", regions_objects), ("+monitor", monitored_objects)]
    for name, objects in renders:
        for o in objects:
            what = f"{name}: {o['kind']}/{o['metadata']['name']}"
            if (o["apiVersion"], o["kind"]) in CRD_KINDS:
                crds += 1
                continue
            try:
                kubernetes_validate.validate(o, KUBE_VERSION, strict=True)
                validated += 1
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{what}: {'.'.join(map(str, e.path))}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                errors.append(f"{what}: {e.message} (a CRD kind must be listed in CRD_KINDS)")
    assert not errors, "\n".join(errors)
    assert validated >= 3 * 8 and crds == 1, (validated, crds)


@pytest.mark.parametrize("values", ["default", "3-regions"])
def test_statefulset_of_3_brokers_with_volumes_parallel_start_and_one_at_a_time_updates(
    values, default_objects, regions_objects
):
    objects = default_objects if values == "default" else regions_objects
    sts = one(objects, "StatefulSet", "runnel")
    spec = sts["spec"]
    assert spec["replicas"] == 3
    assert spec["serviceName"] == "runnel-headless"
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    (claim,) = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]
    mounts = {m["name"]: m["mountPath"] for m in broker_container(sts)["volumeMounts"]}
    assert shared_config(objects)["log.dirs"].startswith(mounts["data"] + "/"), "log.dirs is on the volume"
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


def test_headless_and_client_services(default_objects):
    sts = one(default_objects, "StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = one(default_objects, "Service", "runnel-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True, "peers must resolve brokers that are not ready yet"
    assert {p["name"] for p in headless["spec"]["ports"]} == {"kafka", "controller", "admin"}
    client = one(default_objects, "Service", "runnel")
    assert client["spec"].get("clusterIP") != "None"
    assert [p["name"] for p in client["spec"]["ports"]] == ["kafka"], "the admin port is not for clients"
    for svc in (headless, client):
        assert svc["spec"]["selector"].items() <= pod_labels.items()
    named = {p["name"]: p["containerPort"] for p in broker_container(sts)["ports"]}
    assert {p["targetPort"] for p in client["spec"]["ports"] + headless["spec"]["ports"]} <= named.keys()


def test_pod_disruption_budget_allows_one_broker_down(default_objects, regions_objects):
    for objects in (default_objects, regions_objects):
        pdb = one(objects, "PodDisruptionBudget")
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["maxUnavailable"] == 1
        labels = one(objects, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_location_init_container_reads_the_node_topology_labels_with_its_own_rbac(regions_objects):
    sts = one(regions_objects, "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    assert init["command"][-1].endswith("/location.sh")
    env = {e["name"]: e for e in init["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    script = one(regions_objects, "ConfigMap")["data"]["location.sh"]
    assert "kubectl get node" in script
    assert r"topology\.kubernetes\.io/region" in script and r"topology\.kubernetes\.io/zone" in script
    # The API token reaches the init container only.
    assert pod["automountServiceAccountToken"] is False
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    token_mounts = [m for m in init["volumeMounts"] if m["mountPath"] == token_path]
    assert len(token_mounts) == 1
    assert not any(m["name"] == token_mounts[0]["name"] for m in broker_container(sts)["volumeMounts"])
    # Init container and broker share the run directory the location is written to.
    run = {m["name"] for m in init["volumeMounts"]} & {m["name"] for m in broker_container(sts)["volumeMounts"]}
    assert "run" in run
    sa = one(regions_objects, "ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    role = one(regions_objects, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    binding = one(regions_objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]


def test_one_broker_per_region_and_zone_and_never_two_on_a_node(regions_objects):
    pod = one(regions_objects, "StatefulSet")["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    for key in ("topology.kubernetes.io/region", "topology.kubernetes.io/zone"):
        assert spread[key]["maxSkew"] == 1
        assert spread[key]["whenUnsatisfiable"] == "DoNotSchedule"
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_probes_on_the_admin_listener_and_prometheus_annotations(default_objects):
    sts = one(default_objects, "StatefulSet")
    c = broker_container(sts)
    admin_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "admin")
    assert shared_config(default_objects)["admin.listeners"] == f"http://0.0.0.0:{admin_port}"
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "admin"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "admin"}
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "admin"}
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(admin_port)
    assert annotations["prometheus.io/path"] == "/metrics"
    assert not [o for o in default_objects if o["kind"] == "ServiceMonitor"], "off by default"


def test_service_monitor_scrapes_the_admin_port_of_the_headless_service(monitored_objects):
    sm = one(monitored_objects, "ServiceMonitor")
    headless = one(monitored_objects, "Service", "runnel-headless")
    assert sm["spec"]["selector"]["matchLabels"].items() <= headless["metadata"]["labels"].items()
    assert not sm["spec"]["selector"]["matchLabels"].items() <= one(monitored_objects, "Service", "runnel")[
        "metadata"
    ]["labels"].items(), "the client Service has no admin port"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] == "admin" and endpoint["path"] == "/metrics"
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_tls_from_the_secret_when_enabled(default_objects, regions_objects):
    sts = one(regions_objects, "StatefulSet")
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "runnel-tls"
    mounts = {m["name"]: m for m in broker_container(sts)["volumeMounts"]}
    assert mounts["tls"]["mountPath"] == "/etc/runnel/tls" and mounts["tls"]["readOnly"] is True
    config = shared_config(regions_objects)
    assert config["listeners"] == "SSL://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093"
    # CONTROLLER mapped to SSL: mutual TLS between brokers (docs/security.md#between-brokers).
    assert config["listener.security.protocol.map"] == "SSL:SSL,CONTROLLER:SSL"
    assert config["controller.listener.names"] == "CONTROLLER"
    assert config["ssl.keystore.type"] == "PEM"
    assert config["ssl.truststore.type"] == "PEM"
    assert config["ssl.truststore.location"] == "/etc/runnel/tls/ca.crt"
    assert config["ssl.keystore.location"].startswith("/var/run/runnel/")
    plain = shared_config(default_objects)
    assert not [k for k in plain if k.startswith("ssl.")]
    assert plain["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert "tls" not in {v["name"] for v in one(default_objects, "StatefulSet")["spec"]["template"]["spec"]["volumes"]}
    assert "secretName" in helm_fails(*template_args(sets=["tls.enabled=true"]))


def test_grace_period_exceeds_the_controlled_shutdown_timeout(default_objects, regions_objects):
    for objects in (default_objects, regions_objects):
        grace_s = one(objects, "StatefulSet")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        timeout_ms = int(shared_config(objects).get("controlled.shutdown.timeout.ms", "30000"))
        assert grace_s * 1000 > timeout_ms
    err = helm_fails(*template_args(sets=["terminationGracePeriodSeconds=30"]))
    assert "controlled.shutdown.timeout.ms" in err
    err = helm_fails(*template_args(sets=["config.controlled\\.shutdown\\.timeout\\.ms=90000"]))
    assert "controlled.shutdown.timeout.ms" in err


def test_quorum_voters_are_the_first_pods_by_dns_name(regions_objects):
    voters = shared_config(regions_objects)["controller.quorum.voters"]
    assert voters == ",".join(f"{i}@runnel-{i}.{DOMAIN}:9093" for i in range(3))
    five = shared_config(render(sets=["replicas=7", "controllerVoters=5"]))["controller.quorum.voters"]
    assert five == ",".join(f"{i}@runnel-{i}.{DOMAIN}:9093" for i in range(5))
    assert "controllerVoters" in helm_fails(*template_args(sets=["controllerVoters=4"]))
    assert "set by the chart" in helm_fails(*template_args(sets=["config.node\\.id=7"]))


def documented_settings():
    """The backticked names in the first column of docs/configuration.md's tables, as
    regular expressions (`ssl.*` a prefix, `<name>` one dotted part)."""
    patterns = []
    for line in CONFIGURATION_MD.read_text().splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        first = line.split("|")[1]
        for name in re.findall(r"`([^`]+)`", first):
            rx = re.escape(name).replace(r"\*", ".+")
            rx = re.sub(r"<[^>]+>", "[^.]+", rx)
            patterns.append(re.compile(rx + r"\Z"))
    assert len(patterns) > 80, "docs/configuration.md's settings table was not found"
    return patterns


def test_broker_config_for_ordinal_1_uses_only_documented_settings(regions_objects, tmp_path):
    data = one(regions_objects, "ConfigMap")["data"]
    config_dir, run_dir, tls_dir, bin_dir = (tmp_path / d for d in ("config", "run", "tls", "bin"))
    for d in (config_dir, run_dir, tls_dir, bin_dir):
        d.mkdir()
    for name in ("server.properties", "start.sh", "location.sh"):
        (config_dir / name).write_text(data[name])
    (tls_dir / "tls.key").write_text("-----BEGIN PRIVATE KEY-----\nkey\n-----END PRIVATE KEY-----\n")
    (tls_dir / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\ncert\n-----END CERTIFICATE-----\n")
    (tls_dir / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n")
    # A stand-in for kubectl: the labels of node gke-b, in us-west1.
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "get node gke-b" ] || { echo "unexpected: $*" >&2; exit 1; }\n'
        'case "$5" in\n'
        "  *region*) printf us-west1 ;;\n"
        "  *zone*) printf us-west1-a ;;\n"
        "esac\n"
    )
    kubectl.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RUNNEL_CONFIG_DIR": str(config_dir),
        "RUNNEL_RUN_DIR": str(run_dir),
        "RUNNEL_TLS_DIR": str(tls_dir),
    }

    def script(name, *args, **more_env):
        cmd = [shutil.which("sh"), str(config_dir / name), *args]
        return subprocess.run(cmd, env={**env, **more_env}, capture_output=True, text=True, timeout=30)

    r = script("location.sh", NODE_NAME="gke-b")
    assert r.returncode == 0, r.stderr
    r = script("start.sh", "config", POD_NAME="runnel-1")
    assert r.returncode == 0, r.stderr
    config = properties(r.stdout)
    assert config == properties((run_dir / "server.properties").read_text())
    assert config["node.id"] == "1"
    host = f"runnel-1.{DOMAIN}"
    assert config["advertised.listeners"] == f"SSL://{host}:9092,CONTROLLER://{host}:9093"
    assert config["broker.location"] == "region=us-west1,zone=us-west1-a"
    assert config["log.dirs"] == "/var/lib/runnel/data"
    # The PEM key store is the Secret's key and certificate in one file.
    keystore = (run_dir / "tls" / "keystore.pem").read_text()
    assert keystore == (tls_dir / "tls.key").read_text() + (tls_dir / "tls.crt").read_text()
    assert (run_dir / "tls" / "keystore.pem").stat().st_mode & 0o077 == 0

    known = documented_settings()
    unknown = [k for k in config if not any(p.match(k) for p in known)]
    assert not unknown, f"settings docs/configuration.md does not list: {unknown}"

    # docs/kubernetes.md shows this very configuration.
    shown = re.search(r"## A broker's configuration\n.*?```properties\n(.*?)```", KUBERNETES_MD.read_text(), re.S)
    assert shown and properties(shown.group(1)) == config, "docs/kubernetes.md shows another configuration"

    # A pod name without an ordinal is refused, as is a node without topology labels.
    r = script("start.sh", "config", POD_NAME="runnel")
    assert r.returncode != 0 and "ordinal" in r.stderr
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    (unlabelled / "kubectl").write_text("#!/bin/sh\nexit 0\n")
    (unlabelled / "kubectl").chmod(0o755)
    r = script("location.sh", NODE_NAME="bare", PATH=f"{unlabelled}:{os.environ['PATH']}")
    assert r.returncode != 0 and "neither" in r.stderr
