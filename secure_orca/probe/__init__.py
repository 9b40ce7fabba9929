"""The bypass-client audit: vectors (pure), transport (I/O), statistics, and the audit that gives the verdict."""
