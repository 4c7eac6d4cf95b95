"""How the jobs size their reads and shuffles to the rows they have: one JDBC read and one shuffle
partition for small inputs (each partition is a task to schedule), more for large ones, never more
than the configured maximum (for the export's reads, by default the machine's cores)."""

from __future__ import annotations

import os

import pytest

from spark_reports.extract import jdbc_partitions
from spark_reports.usage_report import shuffle_partitions


@pytest.mark.parametrize(
    ("rows", "expected"),
    [(0, 1), (1, 1), (100_000, 1), (250_000, 1), (250_001, 2), (1_000_000, 4), (5_000_000, 4)],
)
def test_jdbc_partitions_follow_the_row_count_up_to_the_maximum(rows, expected, monkeypatch):
    monkeypatch.delenv("SPARK_JDBC_PARTITIONS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert jdbc_partitions(rows) == expected


@pytest.mark.parametrize(("cores", "expected"), [(None, 1), (1, 1), (2, 2), (16, 16)])
def test_jdbc_partitions_maximum_is_the_machines_cores_by_default(cores, expected, monkeypatch):
    monkeypatch.delenv("SPARK_JDBC_PARTITIONS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert jdbc_partitions(100_000_000) == expected


def test_jdbc_partitions_maximum_is_configurable(monkeypatch):
    monkeypatch.setenv("SPARK_JDBC_PARTITIONS", "32")
    assert (jdbc_partitions(1_000_000), jdbc_partitions(100_000_000)) == (4, 32)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [(0, 1), (100_000, 1), (5_000_000, 1), (5_000_001, 2), (20_000_000, 4), (100_000_000, 4)],
)
def test_shuffle_partitions_follow_the_row_count_up_to_the_maximum(rows, expected, monkeypatch):
    monkeypatch.delenv("SPARK_SHUFFLE_PARTITIONS", raising=False)
    assert shuffle_partitions(rows) == expected


def test_shuffle_partitions_maximum_is_configurable(monkeypatch):
    monkeypatch.setenv("SPARK_SHUFFLE_PARTITIONS", "64")
    assert shuffle_partitions(100_000_000) == 20
