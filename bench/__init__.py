"""The benchmark suite (`make bench`, docs/benchmarks.md); what its parts share."""

import json
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(name: str, summary: dict, lines: list[str]) -> None:
    """A part's summary as bench/results/<name>-<UTC time>.json and its table as .md beside it
    (ignored by git), and both printed."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    (RESULTS / f"{name}-{stamp}.json").write_text(json.dumps(summary, indent=2))
    (RESULTS / f"{name}-{stamp}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(summary))
    print("\n".join(lines))
