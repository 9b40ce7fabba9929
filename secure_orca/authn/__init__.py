"""Request authentication as kube-apiserver does it, one module per authenticator (pure: no I/O, time passed in).

Mirrors ``k8s.io/apiserver/pkg/authentication`` at commit 24a394e516bfda066d7e2221d7d92c052de27c54:
``request/headerrequest`` (requestheader), ``request/x509`` (x509), ``request/bearertoken`` (bearertoken),
``token/tokenfile`` (tokenfile), ``request/anonymous`` (anonymous), ``request/union`` (union) and ``group``
(group). The chain they form is assembled in ``union.chain`` as ``pkg/kubeapiserver/authenticator/config.go`` does.
"""
