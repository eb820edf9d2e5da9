"""Tablet storage (`schema`, `tablet`) and lifecycle (`manager`)."""
