"""The name of every flag that names a credential file, defined once (kube-apiserver's names)."""

from __future__ import annotations

TLS_CERT = "--tls-cert-file"
TLS_KEY = "--tls-private-key-file"
CLIENT_CA = "--client-ca-file"
REQUESTHEADER_CA = "--requestheader-client-ca-file"
ALLOWED_NAMES = "--requestheader-allowed-names"
ALLOWED_NAMES_FILE = "--requestheader-allowed-names-file"
SECRET = "--endpoint-load-metrics-secret-file"
LOAD_READER_CA = "--endpoint-load-metrics-client-ca-file"
LOAD_READER_NAMES = "--endpoint-load-metrics-allowed-names"
TOKENS = "--token-auth-file"
PROXY_CERT = "--proxy-client-cert-file"
PROXY_KEY = "--proxy-client-key-file"
