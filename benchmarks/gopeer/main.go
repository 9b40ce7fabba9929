// The Go peer of benchmarks.workers and benchmarks.reconnect_bursts: Go's net/http (stdlib only, TLS 1.3 and
// HTTP/2) doing the same gate as `secure-orca serve` on /healthz: a client certificate is requested, and the
// load report is attached only when the request opts in and the connection's chain verifies against the
// requestheader CA with its CN among the allowed names, checked per request as kube-apiserver's front-proxy
// authenticator checks it (x509.Certificate.Verify with ExtKeyUsageClientAuth). The report is static: this
// peer measures the gate and the serving, not a sampler.
//
//	gopeer -listen 127.0.0.1:0 -cert server.crt -key server.key -requestheader-ca fp-ca.crt -allowed-names front-proxy-client
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
)

const report = "TEXT cpu_utilization=0.5, mem_utilization=0.25, rps_fractional=100, eps=0, named_metrics.in_flight_requests=1"

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	certFile := flag.String("cert", "", "serving certificate")
	keyFile := flag.String("key", "", "serving key")
	caFile := flag.String("requestheader-ca", "", "front-proxy CA bundle")
	names := flag.String("allowed-names", "", "comma-separated allowed CNs")
	flag.Parse()

	pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		log.Fatal("no certificate in the requestheader CA file")
	}
	allowed := map[string]bool{}
	for _, name := range strings.Split(*names, ",") {
		if name != "" {
			allowed[name] = true
		}
	}
	gate := func(r *http.Request) bool {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return false
		}
		intermediates := x509.NewCertPool()
		for _, c := range r.TLS.PeerCertificates[1:] {
			intermediates.AddCert(c)
		}
		leaf := r.TLS.PeerCertificates[0]
		_, err := leaf.Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		return err == nil && (len(allowed) == 0 || allowed[leaf.Subject.CommonName])
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("endpoint-load-metrics-request") != "" && gate(r) {
			w.Header().Set("endpoint-load-metrics", report)
		}
		w.Write([]byte("ok"))
	})
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequestClientCert, // verified per request by the gate, as the front-proxy check is
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	fmt.Printf("Running on https://%s (Go peer)\n", listener.Addr().String())
	os.Stdout.Sync()
	log.Fatal(server.ServeTLS(listener, "", ""))
}
