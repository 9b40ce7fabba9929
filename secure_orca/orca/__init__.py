"""The ORCA wire formats (pure): header names, the load report and its encodings, the opt-in grammar."""
