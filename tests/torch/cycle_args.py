"""The command line the reference-cycle programs share (leak_cycle.py,
gc_cycle.py): ``leak|fixed OUT.json SNAPSHOT [--steps N]``."""

from __future__ import annotations

import argparse


def parse_cycle_args(default_steps: int) -> argparse.Namespace:
    """``kind`` (the leaking program or its fixed twin), ``out`` (the
    program's JSON results), ``snapshot`` and ``steps``."""
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["leak", "fixed"])
    ap.add_argument("out")
    ap.add_argument("snapshot")
    ap.add_argument("--steps", type=int, default=default_steps)
    return ap.parse_args()
