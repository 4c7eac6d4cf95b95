"""deploy/kubernetes/ checked by tools that understand it (issue 45, docs/containers.md#kubernetes):
Kustomize (kubectl's) renders the base and the example overlay; kubernetes-validate checks every
object against the Kubernetes API's schemas, strictly (an unknown field is an error); podman kube
play makes the pods of every Deployment from them (not started), with the image, the ConfigMap and
the Secret, and the pods run read-only as the image's user. kubeconform, the usual schema
validator, downloads its schemas at run time, which this machine cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.servers import ROOT

BIN = Path(sys.executable).parent
KUBE = ROOT / "deploy" / "kubernetes"
CONF = {"CONTAINERS_CONF": str(ROOT / "deploy" / "podman" / "containers.conf")}

pytestmark = [pytest.mark.containers]


def kustomize(path: Path) -> list[dict]:
    done = subprocess.run([str(BIN / "kubectl"), "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def base() -> list[dict]:
    return kustomize(KUBE / "base")


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


@pytest.mark.parametrize("path", ["base", "overlays/example"])
def test_every_object_validates_against_the_kubernetes_schemas(path, tmp_path):
    docs = kustomize(KUBE / path)
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(docs))
    done = subprocess.run(
        [str(BIN / "kubernetes-validate"), "--strict", str(rendered)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(" passed for resource ") == len(docs)


def test_the_overlay_sets_namespace_image_and_replicas():
    docs = kustomize(KUBE / "overlays" / "example")
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"mediator"}
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/mediator:1.0.0", "registry.example.com/mediator-spark:1.0.0"}
    assert by_kind(docs, "Deployment")["mediator-worker"]["spec"]["replicas"] == 2


def test_the_layout_the_issue_asks_for(base):
    deployments = by_kind(base, "Deployment")
    assert sorted(deployments) == [
        "mediator-beat",
        "mediator-http",
        "mediator-push-worker",
        "mediator-sockets",
        "mediator-spark-engine",
        "mediator-worker",
    ]
    # The application's reports are clients of the engine's Service.
    engine_port = by_kind(base, "Service")["mediator-spark-engine"]["spec"]["ports"][0]["port"]
    assert by_kind(base, "ConfigMap")["mediator"]["data"]["SPARK_REMOTE"] == f"sc://mediator-spark-engine:{engine_port}"
    for name in ("mediator-http", "mediator-sockets"):
        pod = deployments[name]["spec"]["template"]["spec"]
        assert pod["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/health"
        assert by_kind(base, "PodDisruptionBudget")[name]["spec"]["minAvailable"] == 1
    sockets = deployments["mediator-sockets"]["spec"]["template"]["spec"]
    assert sockets["terminationGracePeriodSeconds"] >= 30
    beat = deployments["mediator-beat"]["spec"]
    assert (beat["replicas"], beat["strategy"]["type"]) == (1, "Recreate")
    job = by_kind(base, "Job")["mediator-migrate"]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["migrate"]
    ingress = by_kind(base, "Ingress")["mediator"]
    routes = {p["path"]: p["backend"]["service"]["name"] for p in ingress["spec"]["rules"][0]["http"]["paths"]}
    assert routes == {"/ws": "mediator-sockets", "/didcomm/ws": "mediator-sockets", "/": "mediator-http"}
    assert int(ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 120


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], env=os.environ | CONF, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or not check, done.stdout + done.stderr[-3000:]
    return done


def test_podman_kube_play_makes_every_deployments_pods_read_only_as_the_images_user(base, tmp_path):
    """Not started: they would need the deployment's PostgreSQL and Redis; the compose test runs
    the same image and roles. podman 4.3 plays Deployments (not Jobs) with a ConfigMap and Secret."""
    done = subprocess.run(
        [str(ROOT / "scripts" / "build_image.sh")],
        env=os.environ | {"LOCAL_BASE": "1", "SPARK": "1"},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0:
        pytest.fail(
            f"podman or the images (make image SPARK=1) are missing, kube play untested:\n{done.stderr[-3000:]}"
        )
    configmap = tmp_path / "configmap.yaml"
    configmap.write_text(yaml.safe_dump(by_kind(base, "ConfigMap")["mediator"]))
    secret = tmp_path / "secret.yaml"
    secret.write_text(yaml.safe_dump(by_kind(base, "Secret")["mediator"]))
    podman("secret", "rm", "mediator", check=False)
    podman("kube", "play", str(secret))
    played = []
    try:
        for name, deployment in by_kind(base, "Deployment").items():
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump(deployment))
            # Not started, so no network is made: slirp4netns only because kube play refuses
            # containerPort on the host's network.
            podman(
                "kube", "play", "--start=false", "--network", "slirp4netns", "--configmap", str(configmap), str(path)
            )
            played.append(path)
            spec = deployment["spec"]["template"]["spec"]["containers"][0]
            role, args = spec["name"], spec["args"]
            container = f"{name}-pod-0-{role}"
            fmt = "{{.HostConfig.ReadonlyRootfs}} {{.Config.User}} {{.Config.Cmd}}"
            assert podman("inspect", "--format", fmt, container).stdout.split(None, 2) == [
                "true",
                "10001:10001",
                f"[{' '.join(args)}]\n",
            ]
            if role == "spark-engine":
                continue  # no settings or secrets of the application's
            env = podman("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", container).stdout.split()
            assert "DATABASE_URL_FILE=/run/secrets/mediator/database_url" in env
            assert "REDIS_URL=redis://redis:6379/0" in env  # from the ConfigMap
    finally:
        for path in played:
            podman("kube", "down", str(path), check=False)
        # kube play keeps the Secret as a podman secret and, for the pods' secret volume, a volume
        podman("secret", "rm", "mediator", check=False)
        podman("volume", "rm", "-f", "mediator", check=False)
