"""Tests of the per-tablet Raft core and its deterministic simulator."""
