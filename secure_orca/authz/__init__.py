"""Who may read load: the KEP-6315 options as one policy, kube-apiserver's front-proxy x509 check, shared
secrets (pure), and the loading of the trust material they use (file reads, shared by start-up and reload)."""
