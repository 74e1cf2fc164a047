"""Helpers shared by the tests (not shipped): the reference decode loop, the test data's location."""

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
