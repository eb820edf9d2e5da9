"""Replay: the thread that applies the log in order (replayer.py) and the recovery a new
leader runs before serving (recovery.py)."""
