"""Write-ahead log: segment codec (`segment`), per-tablet logs and the group-commit appender (`log`)."""
