"""The reports' engine as a role of its own (issue 45, docs/containers.md#the-reports-engine): the
engine image (Containerfile.spark: Java, Spark's jars) serves Spark Connect, and the application
image, whose pyspark has no jars, is its client. Both run read-only on the host's loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from tests.support.servers import ROOT, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.containers]

CONF = {"CONTAINERS_CONF": str(ROOT / "deploy" / "podman" / "containers.conf")}
APP, ENGINE = "localhost/mediator:latest", "localhost/mediator-spark:latest"
CLIENT = """
from pyspark.sql import SparkSession
session = SparkSession.builder.remote("sc://127.0.0.1:{port}").getOrCreate()
print("COUNT", session.range(1000).filter("id % 7 = 0").count())
session.stop()
"""


def podman(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["podman", *args], env=os.environ | CONF, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0 or not check, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_the_application_image_is_a_spark_connect_client_of_the_engine_image():
    build = subprocess.run(
        [str(ROOT / "scripts" / "build_image.sh")],
        env=os.environ | {"LOCAL_BASE": "1", "SPARK": "1"},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if build.returncode != 0:
        pytest.fail(f"the images could not be built (podman, or Debian's mirror for the JRE):\n{build.stderr[-3000:]}")
    # No Java in the application image: the reports' runtime is the engine's.
    assert podman("run", "--rm", "--entrypoint", "sh", APP, "-c", "command -v java || echo none").stdout.split() == [
        "none"
    ]
    port = free_port()
    name = f"mediator-spark-engine-{os.getpid()}"
    podman("run", "-d", "--name", name, "--read-only", "--tmpfs", "/tmp",
           "-e", "SPARK_ENGINE_HOST=127.0.0.1", "-e", f"SPARK_ENGINE_PORT={port}", ENGINE)  # fmt: skip
    try:
        deadline = time.monotonic() + 240  # a JVM and a SparkSession on a shared box
        while True:
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"
            assert running and time.monotonic() < deadline, podman("logs", "--tail", "30", name, check=False).stdout
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        client = podman("run", "--rm", "--read-only", "--tmpfs", "/tmp", "--entrypoint", "python", APP, "-c",
                        CLIENT.format(port=port))  # fmt: skip
        assert "COUNT 143" in client.stdout.splitlines(), client.stdout + client.stderr[-2000:]
    finally:
        podman("rm", "-f", "-v", "-t", "5", name, check=False)
