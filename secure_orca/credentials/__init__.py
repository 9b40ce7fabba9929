"""The one reader of every credential file (certificates, CA bundles, names, secrets, tokens): start-up, reload
and the TLS contexts all take their material from here, read by the same function per kind, as kube reads it."""
