"""Nemesis: real processes of the system put through network partitions, pauses and power
loss, with every client history checked (design/nemesis.md).

`python -m tests.nemesis --seed N --faults partition,pause --duration S` runs one seeded
schedule; tests/nemesis/test_*.py run bounded seeds in CI (markers integration, nemesis).
"""
