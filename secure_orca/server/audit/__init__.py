"""Audit events in kube's ``audit.k8s.io/v1`` shape: the log and its ASGI middleware (log), one event (event),
the log's file with rotation (file) and the redaction of credentials (redaction)."""
