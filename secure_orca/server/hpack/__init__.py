"""HPACK for the server's connections: the indexed encoder and the bounded table decoder (headers), the Huffman
decoder (huffman) and nghttp2's, through ctypes, for long strings (nghttp2). With ``server.http``, the only
package of ``server`` that imports h2, hpack or hyperframe (an import-linter contract in pyproject.toml)."""
