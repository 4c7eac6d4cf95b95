"""The application image in its compose layout (issue 45, docs/containers.md): `make image`'s build
on a local Debian base, `deploy/compose.yaml` started by podman-compose with PostgreSQL and Redis
containers (Debian's packages, tests/containers/images/), the one-shot migrate job, then the DCTRL
story and a DIDComm forward + pickup against the containers, and a SIGKILLed HTTP container under
load that loses no acknowledged command and is healthy again. Every container shares the host's
network and binds 127.0.0.1 on free ports.

Where podman cannot run, the module fails with the reason: it does not skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from apps.wire.client import Identity, MediatorClient, agree_contract
from apps.wire.ws import open_authenticated
from tests.support.didcomm_agent import CM2, ENCRYPTED, PICKUP, Agent, forward_for
from tests.support.push_story import run_push_story
from tests.support.servers import ROOT, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.containers]

PODMAN = [str(ROOT / "scripts" / "podman.sh")]
COMPOSE = [str(Path(sys.executable).parent / "podman-compose"), "-f", str(ROOT / "deploy" / "compose.yaml")]
BASE = "localhost/mediator-base:bookworm"
IMAGE = "localhost/mediator:latest"
POSTGRES_IMAGE = "localhost/mediator-test-postgres:15"
REDIS_IMAGE = "localhost/mediator-test-redis:7"
MONITORING = ROOT / "deploy" / "monitoring"
DOMAIN = "mediator.test"
DAY = 86_400


def run(cmd: list[str], *, env: dict | None = None, timeout: float = 600, check: bool = True) -> str:
    """`cmd`'s output, read from a file: podman's conmon, detached, keeps a pipe open after podman
    exits, and reading a pipe would wait for the container to end."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, timeout=timeout)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode}:\n{text[-3000:]}\n{errors[-3000:]}")
    return text


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    return run([*PODMAN, *args], env=os.environ | {"CONTAINERS_CONF": ""} | _conf(), check=check, timeout=timeout)


def _conf() -> dict:
    return {"CONTAINERS_CONF": str(ROOT / "deploy" / "podman" / "containers.conf")}


def prepare_images() -> None:
    """podman, debootstrap and podman-compose (installed when absent), the local base, the
    application image (make image's script: cached layers when nothing changed) and the stand-ins
    for the public PostgreSQL and Redis images."""
    run([str(ROOT / "scripts" / "ensure_extra_podman.sh")])
    probe = subprocess.run(
        ["podman", "info", "--format", "{{.Host.OCIRuntime.Name}}"], env=os.environ | _conf(), capture_output=True
    )
    if probe.returncode != 0:
        pytest.fail(f"podman cannot run on this machine, the image is untested:\n{probe.stderr.decode()[-2000:]}")
    run([str(ROOT / "scripts" / "build_image.sh")], env=os.environ | {"LOCAL_BASE": "1", "IMAGE": IMAGE}, timeout=900)
    for image, name in ((POSTGRES_IMAGE, "postgres"), (REDIS_IMAGE, "redis")):
        if _exists(image):
            continue
        podman(
            "build", "-q", "--format", "docker", "--network", "host", "--ulimit", "nofile=16384:16384",
            "--build-arg", f"BASE_IMAGE={BASE}", "-f", f"tests/containers/images/Containerfile.{name}",
            "-t", image, "tests/containers/images", timeout=600,
        )  # fmt: skip


def _exists(image: str) -> bool:
    return subprocess.run(["podman", "image", "exists", image], env=os.environ | _conf()).returncode == 0


class Stack:
    """One compose project on free loopback ports."""

    def __init__(self, tmp: Path):
        self.project = f"mediator-ct{os.getpid()}"
        self.ports = {name: free_port() for name in ("POSTGRES_PORT", "REDIS_PORT", "HTTP_PORT", "WS_PORT")}
        secrets = tmp / "secrets"
        run(
            [str(ROOT / "scripts" / "compose_secrets.sh"), str(secrets)],
            env=os.environ | {"POSTGRES_PORT": str(self.ports["POSTGRES_PORT"])},
        )
        self.env = (
            os.environ
            | _conf()
            | {k: str(v) for k, v in self.ports.items()}
            | {
                "PODMAN_COMPOSE": COMPOSE[0],
                "MEDIATOR_IMAGE": IMAGE,
                "POSTGRES_IMAGE": POSTGRES_IMAGE,
                "REDIS_IMAGE": REDIS_IMAGE,
                "MEDIATOR_SECRETS_DIR": str(secrets),
                "MEDIATOR_OPERATOR_HOSTS": "ops.test",
                "MEDIATOR_PUBLIC_SCHEME": "http",
            }
        )
        self.http_url = f"http://127.0.0.1:{self.ports['HTTP_PORT']}"
        self.ws_port = self.ports["WS_PORT"]

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        return run([*COMPOSE, "-p", self.project, *args], env=self.env, timeout=timeout, check=check)

    def name(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def inspect(self, service: str, fmt: str) -> str:
        return podman("inspect", "--format", fmt, self.name(service)).strip()

    def logs(self, service: str) -> str:
        return podman("logs", "--tail", "40", self.name(service), check=False)

    def healthy(self, service: str) -> bool:
        """podman runs HEALTHCHECK on a timer of systemd's; without systemd (here) it is run on demand."""
        done = subprocess.run(
            ["podman", "healthcheck", "run", self.name(service)], env=self.env, capture_output=True, timeout=30
        )
        return done.returncode == 0

    def wait_healthy_container(self, name: str, timeout: float) -> float:
        started = time.monotonic()
        while subprocess.run(["podman", "healthcheck", "run", name], env=self.env, capture_output=True).returncode:
            running = podman("inspect", "--format", "{{.State.Running}}", name).strip() == "true"
            assert running and time.monotonic() - started < timeout, podman("logs", "--tail", "30", name, check=False)
            time.sleep(0.1)
        return time.monotonic() - started

    def wait_healthy(self, services: tuple[str, ...], timeout: float = 120) -> float:
        started = time.monotonic()
        pending = set(services)
        while pending:
            for service in sorted(pending):
                if self.healthy(service):
                    pending.discard(service)
            if time.monotonic() - started > timeout:
                pytest.fail(f"not healthy after {timeout:.0f} s: {pending}\n" + "\n".join(map(self.logs, pending)))
            time.sleep(0.2)
        return time.monotonic() - started

    def exec_python(self, code: str) -> str:
        return podman("exec", self.name("http"), "python", "-c", code)


def start_prometheus(stack: Stack, workdir: Path) -> subprocess.Popen:
    """A real Prometheus (Debian's, scripts/ensure_extra_prometheus.sh) on a free loopback port with
    deploy/monitoring/prometheus.yml's jobs pointed at this stack's HTTP and sockets containers,
    scraping every second, with the alerting rules loaded."""
    run([str(ROOT / "scripts" / "ensure_extra_prometheus.sh")])
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(MONITORING / "alerts.yml")]
    targets = {"mediator-http": stack.ports["HTTP_PORT"], "mediator-sockets": stack.ports["WS_PORT"]}
    config["scrape_configs"] = [job for job in config["scrape_configs"] if job["job_name"] in targets]
    for job in config["scrape_configs"]:
        job["static_configs"][0]["targets"] = [f"127.0.0.1:{targets[job['job_name']]}"]
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    stack.prometheus_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None and time.monotonic() < deadline, (workdir / "prometheus.log").read_text()[-3000:]
        try:
            if httpx.get(stack.prometheus_url + "/-/ready", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prepare_images()
    s = Stack(tmp_path_factory.mktemp("compose"))
    s.compose("down", "-v", check=False)
    try:
        started = time.monotonic()
        run([str(ROOT / "scripts" / "compose_up.sh"), "-p", s.project], env=s.env, timeout=600)
        s.up_seconds = time.monotonic() - started
        assert s.inspect("migrate", "{{.State.ExitCode}}") == "0", s.logs("migrate")
        for service in ("worker", "push-worker", "beat"):
            assert s.inspect(service, "{{.State.Status}}") == "running", s.logs(service)
        # A tenant without per-DID limits (the load below sends from one DID), made in the container.
        s.tenant_did = s.exec_python(
            "import django; django.setup(); from apps.tenants.services import tenant_create; "
            f"t = tenant_create(slug='ct', domain='{DOMAIN}', public_url='http://{DOMAIN}', "
            "rate_limit_per_did=0, rate_limit_per_ip=0); print(t.did)"
        ).strip()
        s.prometheus = start_prometheus(s, tmp_path_factory.mktemp("prometheus"))
        yield s
    finally:
        if getattr(s, "prometheus", None) is not None:
            s.prometheus.terminate()
            s.prometheus.wait(timeout=30)
        s.compose("down", "-v", "-t", "20", check=False)


def client(stack: Stack) -> MediatorClient:
    return MediatorClient(stack.http_url, host=DOMAIN, timeout=30)


def test_the_containers_run_read_only_as_a_user_with_json_logs_on_stdout(stack):
    for service in ("http", "sockets", "worker", "push-worker", "beat"):
        assert stack.inspect(service, "{{.HostConfig.ReadonlyRootfs}}") == "true"
        assert stack.inspect(service, "{{.Config.User}}") == "10001:10001"
    assert "10001" in podman("exec", stack.name("http"), "id", "-u")
    assert (
        podman("exec", stack.name("http"), "sh", "-c", "touch /opt/mediator/x 2>&1 || true")
        .strip()
        .endswith("Read-only file system")
    )
    with httpx.Client(headers={"Host": DOMAIN}) as http:
        assert http.get(stack.http_url + "/health").status_code == 200
        # Daphne, the sockets role, answers /health too (its HEALTHCHECK).
        assert http.get(f"http://127.0.0.1:{stack.ws_port}/health").status_code == 200
    # A command's one log line (docs/operations.md), as a JSON object on the HTTP container's stdout.
    mc = client(stack)
    assert mc.post_raw(b"{}")[0] == 400
    mc.close()
    deadline = time.monotonic() + 10
    while True:
        lines = [json.loads(x) for x in podman("logs", stack.name("http")).splitlines() if x.startswith("{")]
        commands = [x for x in lines if x.get("logger") == "mediator.command"]
        if commands or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert commands and commands[-1]["code"] == "INVALID_COMMAND" and commands[-1]["status"] == 400


def test_the_dctrl_story_against_the_containers(stack):
    """The push story (tests/support/push_story.py): TWO_WAY_PRIVATE to the HTTP container, its push
    on a socket of the sockets container (it crossed the Redis container)."""
    mc = client(stack)
    run_push_story(mc, f"ws://{DOMAIN}/ws", mediator_did=stack.tenant_did, connect_to=("127.0.0.1", stack.ws_port))
    mc.close()


def test_a_didcomm_forward_is_picked_up_from_the_containers(stack):
    with httpx.Client(base_url=stack.http_url, headers={"Host": DOMAIN}, timeout=30) as http:
        mediator_did = http.get("/didcomm/invitation").json()["from"]

        def send(agent: Agent, message: dict) -> dict:
            resp = http.post("/didcomm", content=agent.pack(message, mediator_did), headers={"Content-Type": ENCRYPTED})
            assert resp.status_code == 200, resp.text
            return agent.unpack(resp.content)[0]

        wallet, rcpt = Agent(), Agent()
        assert send(wallet, wallet.message(CM2 + "mediate-request"))["body"] == {"routing_did": mediator_did}
        update = {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}
        assert send(wallet, wallet.message(CM2 + "keylist-update", update))["body"]["updated"][0]["result"] == "success"
        forwarded = http.post("/didcomm", content=forward_for(rcpt, mediator_did), headers={"Content-Type": ENCRYPTED})
        assert (forwarded.status_code, forwarded.content) == (202, b"")
        delivery = send(wallet, wallet.message(PICKUP + "delivery-request", {"limit": 10}))
        assert delivery["type"] == PICKUP + "delivery" and len(delivery["attachments"]) == 1
        inner, _ = rcpt.unpack(delivery["attachments"][0]["data"]["json"])
        assert inner["body"] == {"n": 1}
        ids = [a["id"] for a in delivery["attachments"]]
        status = send(wallet, wallet.message(PICKUP + "messages-received", {"message_id_list": ids}))
        assert status["body"] == {"message_count": 0, "live_delivery": False}


def test_sigterm_to_the_sockets_container_closes_each_socket_with_1012(stack):
    """`podman stop` (SIGTERM) of the sockets container: an authenticated /ws socket gets a close
    frame, 1012 (service restart: its client reconnects elsewhere, docs/realtime.md), not a dropped
    connection; the container is started again and healthy for the tests after this one."""
    mc = client(stack)
    bob = Identity.create("bob", mc.did)
    mc.register(bob, lifetime_s=DAY)
    mc.close()

    async def stopped() -> tuple[int | None, str]:
        sock = await open_authenticated(f"ws://{DOMAIN}/ws", bob, connect_to=("127.0.0.1", stack.ws_port))
        stop = asyncio.create_task(asyncio.to_thread(podman, "stop", "-t", "20", stack.name("sockets")))
        code = await sock.wait_closed(timeout=30)
        await stop
        received = sock.conn.protocol.close_rcvd
        return code, received.reason if received else "no close frame"

    try:
        code, reason = asyncio.run(stopped())
    finally:
        podman("start", stack.name("sockets"))
        stack.wait_healthy(("sockets",), timeout=90)
    print(f"SIGTERM to the sockets container: close {code} {reason!r}")
    assert (code, reason) == (1012, "")


def test_podman_run_to_healthy_and_memory_per_role_at_rest(stack):
    """The figures of docs/containers.md: each role's memory at rest (podman stats, after the
    stories above), and the time from `podman run` of one more HTTP container, the database ready,
    to its first healthy check. Written to var/image/measurements.json; the bound asserted is a
    sanity bound for a shared box, the docs give the measured figures against the target (10 s)."""
    memory = {}
    for service in ("http", "sockets", "worker", "push-worker", "beat", "postgres", "redis"):
        usage = podman("stats", "--no-stream", "--format", "{{.MemUsage}}", stack.name(service)).split("/")[0]
        memory[service] = usage.strip()
    secrets = Path(stack.env["MEDIATOR_SECRETS_DIR"])
    port = free_port()
    name = f"{stack.project}_http_extra"
    env = {
        "DATABASE_URL_FILE": "/run/secrets/database_url",
        "DJANGO_SECRET_KEY_FILE": "/run/secrets/django_secret_key",
        "MEDIATOR_DEPLOYMENT_KEY_FILE": "/run/secrets/deployment_key",
        "REDIS_URL": f"redis://127.0.0.1:{stack.ports['REDIS_PORT']}/0",
        "HTTP_HOST": "127.0.0.1",
        "HTTP_PORT": str(port),
        "HTTP_WORKERS": "1",
        "MEDIATOR_OPERATOR_HOSTS": "ops.test",
        "MEDIATOR_PUBLIC_SCHEME": "http",
    }
    mounts = [f"-v={secrets / k}:/run/secrets/{k}:ro" for k in ("database_url", "django_secret_key", "deployment_key")]
    started = time.monotonic()
    podman("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp", *mounts,
           *(f"-e={k}={v}" for k, v in env.items()), IMAGE, "http")  # fmt: skip
    try:
        stack.wait_healthy_container(name, timeout=60)
        healthy_after = time.monotonic() - started
    finally:
        podman("rm", "-f", "-v", "-t", "0", name, check=False)
    measured = {"podman_run_to_healthy_s": round(healthy_after, 2), "memory_at_rest": memory}
    out = ROOT / "var" / "image" / "measurements.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps(measured))
    assert healthy_after < 60


def test_a_sigkilled_http_container_loses_no_acknowledged_command_and_is_healthy_again(stack):
    """A sender posts TWO_WAY_PRIVATE continuously while the HTTP container is SIGKILLed; the
    container is restarted by its policy, becomes healthy, and every command that was answered
    SUCCESS is in the recipient's queue afterwards."""
    mc = client(stack)
    alice, bob = Identity.create("alice", mc.did), Identity.create("bob", mc.did)
    for who in (alice, bob):
        mc.register(who, lifetime_s=DAY)
    signed, _, _ = agree_contract(alice, bob, lifetime_s=DAY)
    mc.command(bob, {"type": "SAVE_COMMUNICATION_CONTRACT", "signed_communication_contract": signed})
    acknowledged: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def sender() -> None:
        sender_client = MediatorClient(stack.http_url, host=DOMAIN, timeout=5)
        sender_client._doc = mc.mediator  # the DID document was read before the kill
        n = 0
        while not stop.is_set():
            n += 1
            envelope = alice.sign_command(recipient_did=bob.did, payload=f"blob-{n}", channel="TWO_WAY_PRIVATE")
            try:
                reply = sender_client.send(envelope, raise_errors=False)
            except httpx.HTTPError as exc:
                failures.append(type(exc).__name__)
                time.sleep(0.05)
                continue
            if reply.get("type") == "SUCCESS":
                acknowledged.append(reply["pendingEventId"])
            else:
                failures.append(str(reply.get("code")))
        sender_client.close()

    restarts = int(stack.inspect("http", "{{.RestartCount}}"))
    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while len(acknowledged) < 50:
            assert time.monotonic() < deadline and thread.is_alive(), failures[-5:]
            time.sleep(0.05)
        # SIGKILL to the container's first process from outside, as the kernel's OOM killer or a
        # crash would end it (`podman kill` counts as stopped by the user, which a restart policy
        # leaves stopped).
        os.kill(int(stack.inspect("http", "{{.State.Pid}}")), signal.SIGKILL)
        killed_at = len(acknowledged)
        deadline = time.monotonic() + 90
        while int(stack.inspect("http", "{{.RestartCount}}")) == restarts:
            assert time.monotonic() < deadline, stack.logs("http")
            time.sleep(0.2)
        back = stack.wait_healthy(("http",), timeout=90)
        # Commands are acknowledged again after the restart.
        while len(acknowledged) < killed_at + 50:
            assert time.monotonic() < deadline + back, failures[-5:]
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert failures, "the kill interrupted nothing: the test did not test"
    queued: set[str] = set()
    page = 0
    while True:
        reply = mc.pending_events(bob, page=page, page_size=100)
        events = reply["pending_events"]
        queued.update(e["id"] for e in events)
        if len(events) < 100:
            break
        page += 1
    print(
        f"SIGKILL under load: {len(acknowledged)} acknowledged, {len(failures)} refused or cut, healthy {back:.1f} s after the restart began"
    )
    assert set(acknowledged) <= queued, f"lost: {sorted(set(acknowledged) - queued)[:5]}"
    assert len(acknowledged) == len(set(acknowledged))
    mc.close()


def test_every_dashboard_query_returns_data_from_a_prometheus_scraping_the_containers(stack):
    """After the stories and the load above (and one DIDComm message left queued, for the per-tenant
    panel), every query of deploy/monitoring/grafana-dashboard.json returns at least one series from
    the Prometheus that has scraped the HTTP and sockets containers throughout."""
    with httpx.Client(base_url=stack.http_url, headers={"Host": DOMAIN}, timeout=30) as http:
        mediator_did = http.get("/didcomm/invitation").json()["from"]
        wallet, rcpt = Agent(), Agent()
        for message in (
            wallet.message(CM2 + "mediate-request"),
            wallet.message(CM2 + "keylist-update", {"updates": [{"recipient_did": rcpt.did, "action": "add"}]}),
        ):
            sent = http.post(
                "/didcomm", content=wallet.pack(message, mediator_did), headers={"Content-Type": ENCRYPTED}
            )
            assert sent.status_code == 200
        queued = http.post("/didcomm", content=forward_for(rcpt, mediator_did), headers={"Content-Type": ENCRYPTED})
        assert queued.status_code == 202
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = {t["expr"]: p["title"] for p in dashboard["panels"] for t in p["targets"]}
    with httpx.Client(base_url=stack.prometheus_url, timeout=10) as prom:
        deadline = time.monotonic() + 60
        while True:
            empty = []
            for expr, title in queries.items():
                reply = prom.get("/api/v1/query", params={"query": expr}).json()
                assert reply["status"] == "success", (title, expr, reply)
                if not reply["data"]["result"]:
                    empty.append(f"{title}: {expr}")
            if not empty or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert empty == []
        up = prom.get("/api/v1/query", params={"query": 'up{job=~"mediator-.*"}'}).json()["data"]["result"]
        assert sorted((r["metric"]["job"], r["value"][1]) for r in up) == [
            ("mediator-http", "1"),
            ("mediator-sockets", "1"),
        ]
        rules = prom.get("/api/v1/rules").json()["data"]["groups"][0]["rules"]
        assert len(rules) == 11 and all(r["health"] == "ok" for r in rules), rules
