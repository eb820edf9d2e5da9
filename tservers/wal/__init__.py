"""Write-ahead log: segment codec (`segment`), tablet logs and the group-commit appender."""
