"""deploy/monitoring/ checked by Prometheus's own tool (issue 45, docs/containers.md#monitoring):
the scrape configuration and the alerting rules load, every alert has a unit test in
alerts_test.yml (`promtool test rules`: fires when it should, quiet when it should not), and every
metric the rules and the dashboard use is one the product exposes (docs/operations.md)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.support.servers import ROOT

MONITORING = ROOT / "deploy" / "monitoring"


@pytest.fixture(scope="module")
def promtool() -> str:
    done = subprocess.run([str(ROOT / "scripts" / "ensure_extra_prometheus.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"promtool could not be installed, the monitoring is untested:\n{done.stdout}\n{done.stderr}")
    return "promtool"


def promtool_run(promtool: str, *args: str) -> str:
    done = subprocess.run([promtool, *args], cwd=MONITORING, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def alerts() -> list[str]:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    return [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def test_the_scrape_configuration_and_the_rules_load(promtool):
    assert "SUCCESS" in promtool_run(promtool, "check", "config", "prometheus.yml")
    assert f"SUCCESS: {len(alerts())} rules found" in promtool_run(promtool, "check", "rules", "alerts.yml")


def test_every_alert_has_a_unit_test_and_they_pass(promtool):
    tests = yaml.safe_load((MONITORING / "alerts_test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    assert sorted(tested) == sorted(alerts())
    # Each alert both fires (a case expecting it) and stays quiet (a case expecting nothing).
    for name in alerts():
        cases = [c for t in tests for c in t.get("alert_rule_test", []) if c["alertname"] == name]
        assert any(c.get("exp_alerts") for c in cases), f"{name} never expected to fire"
        assert any(not c.get("exp_alerts") for c in cases), f"{name} never expected quiet"
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", "alerts_test.yml")


def product_metric_names() -> set[str]:
    """Every `mediator_*` name the product's code declares (counters also as `_total`)."""
    names: set[str] = set()
    for path in (ROOT / "apps").rglob("*.py"):
        for name in re.findall(r'"(mediator_[a-z_]+)"', path.read_text()):
            names.update({name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"})
    return names


def test_the_rules_and_the_dashboard_use_only_metrics_the_product_exposes():
    used = set(re.findall(r"\bmediator_[a-z_]+\b", (MONITORING / "alerts.yml").read_text()))
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no query"
    for expr in exprs:
        used.update(re.findall(r"\bmediator_[a-z_]+\b", expr))
    assert used - product_metric_names() == set()
