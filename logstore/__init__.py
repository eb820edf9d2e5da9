"""logstore: a LogCabin-style replicated log of named logs (design/logstore.md)."""
