"""What the load report costs in HPACK: an RFC 7541 walker and a model (pure), and measurement on the wire."""
