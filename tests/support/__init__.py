"""Shared helpers for tests (linearizability checker, process fixtures)."""
