/* LD_PRELOAD shim: h2load (nghttp2 1.52) has no option for a TLS client certificate. This wraps
 * SSL_CTX_new so every client context h2load creates presents the certificate chain and key named by
 * H2LOAD_CLIENT_CERT and H2LOAD_CLIENT_KEY (PEM). Without both variables it changes nothing.
 * Built by secure_orca/lab/loadgen.py with: cc -shared -fPIC -O2 -o h2load_client_cert.so h2load_client_cert.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_method_st SSL_METHOD;
#define PEM_FILETYPE 1 /* SSL_FILETYPE_PEM */

SSL_CTX *SSL_CTX_new(const SSL_METHOD *method) {
    SSL_CTX *(*real_new)(const SSL_METHOD *) = (SSL_CTX * (*)(const SSL_METHOD *)) dlsym(RTLD_NEXT, "SSL_CTX_new");
    int (*use_chain)(SSL_CTX *, const char *) =
        (int (*)(SSL_CTX *, const char *))dlsym(RTLD_NEXT, "SSL_CTX_use_certificate_chain_file");
    int (*use_key)(SSL_CTX *, const char *, int) =
        (int (*)(SSL_CTX *, const char *, int))dlsym(RTLD_NEXT, "SSL_CTX_use_PrivateKey_file");
    if (real_new == NULL || use_chain == NULL || use_key == NULL) {
        fprintf(stderr, "h2load_client_cert: libssl symbols not found\n");
        exit(97);
    }
    SSL_CTX *ctx = real_new(method);
    const char *cert = getenv("H2LOAD_CLIENT_CERT");
    const char *key = getenv("H2LOAD_CLIENT_KEY");
    if (ctx != NULL && cert != NULL && key != NULL) {
        if (use_chain(ctx, cert) != 1 || use_key(ctx, key, PEM_FILETYPE) != 1) {
            fprintf(stderr, "h2load_client_cert: cannot load %s / %s\n", cert, key);
            exit(98);
        }
        fprintf(stderr, "h2load_client_cert: presenting %s\n", cert);
    }
    return ctx;
}
