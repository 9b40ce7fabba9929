"""Go's ``crypto/x509`` as kube-apiserver uses it, mirrored (pure): DER (``der``), PEM bundles (``pem``),
certificate parsing (``parse``, with ``url`` for URI names), chain building (``verify``), name constraints
(``constraints``), one trust's verifier (``chainverifier``) and its per-chain cache (``cache``)."""
