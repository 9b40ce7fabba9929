// The Go peer: Go's net/http (stdlib only, TLS 1.3 and HTTP/2) in two roles.
//
// Without -endpoint-load-metrics-auth (benchmarks.workers, benchmarks.reconnect_bursts) it does the same gate as
// `secure-orca serve` on /healthz: the load report is attached when the request opts in and the connection's
// chain verifies against the requestheader CA with its CN among the allowed names.
//
// With -endpoint-load-metrics-auth MODE (benchmarks.go_options) it is KEP-6315 as a kube-apiserver filter would
// do it, around every path: the opt-in header is read and deleted before the handler (as kube's
// staging/src/k8s.io/apiserver/pkg/server/loadmetrics/handler.go does at 99d293ae0e24), and the report is set
// only when MODE grants it:
//
//	off            no filter (the feature off: WithEndpointLoadMetrics returns the handler itself)
//	header-only    option 1: the first value is exactly TEXT, no authorization (the upstream handler's rule)
//	front-proxy    option 2: TEXT, and the client certificate verifies against -requestheader-ca with
//	               ExtKeyUsageClientAuth and its CN in -allowed-names, per request, as kube's x509 Verifier does
//	               (request/x509/x509.go at ac8a1b5d43ff, wired by headerrequest/requestheader.go at 02058680c571)
//	load-reader    option 2b: the same against -load-reader-ca and -load-reader-allowed-names
//	shared-secret  option 3: "TEXT; secret=S", S compared in constant time against every line of -secret-file
//
// In the cert and secret modes the opt-in must occur once. The peer also answers /version and POST
// selfsubjectreviews with kube's authentication (requestheader, then -client-ca, else anonymous; a certificate
// that verifies against neither is refused with 401), so `secure-orca probe` can read identities back, and
// /debug/request-header-names, the header names that reached the handler. The report is static: the peer measures the
// gate and the serving, not a sampler.
//
//	gopeer -listen 127.0.0.1:0 -cert server.crt -key server.key -requestheader-ca fp-ca.crt -allowed-names front-proxy-client
package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
)

const (
	optInHeader  = "endpoint-load-metrics-request"
	reportHeader = "endpoint-load-metrics"
	textFormat   = "TEXT"
	maxOptIn     = 512 // the longest opt-in value read (secure_orca.orca.optin.MAX_LENGTH)
	report       = "TEXT cpu_utilization=0.5, mem_utilization=0.25, rps_fractional=100, eps=0, named_metrics.in_flight_requests=1"
	reviewsPath  = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	headersPath  = "/debug/request-header-names" // the names the handler received, one a line (tests)
)

// certVerifier is kube's x509 request Verifier: the leaf verifies for client auth against roots, with the
// peer's other certificates as intermediates, and its CN is among the allowed names (any CN when none).
type certVerifier struct {
	roots   *x509.CertPool
	allowed map[string]bool
}

func (v certVerifier) verify(r *http.Request) bool {
	if v.roots == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	intermediates := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		intermediates.AddCert(c)
	}
	leaf := r.TLS.PeerCertificates[0]
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: v.roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err == nil && (len(v.allowed) == 0 || v.allowed[leaf.Subject.CommonName])
}

func newVerifier(caFile, names string) certVerifier {
	if caFile == "" {
		return certVerifier{}
	}
	allowed := map[string]bool{}
	for _, name := range strings.Split(names, ",") {
		if name != "" {
			allowed[name] = true
		}
	}
	return certVerifier{roots: loadPool(caFile), allowed: allowed}
}

func loadPool(file string) *x509.CertPool {
	pem, err := os.ReadFile(file)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		log.Fatalf("no certificate in %s", file)
	}
	return roots
}

// secretSet holds the SHA-256 digests of the shared secrets: equal-length values to compare, so the comparison
// takes the same time whatever the candidate's length, and every secret is compared whatever matches.
type secretSet [][sha256.Size]byte

func loadSecrets(file string) secretSet {
	data, err := os.ReadFile(file)
	if err != nil {
		log.Fatal(err)
	}
	var set secretSet
	for _, line := range strings.Split(string(data), "\n") {
		if value := strings.TrimSpace(line); value != "" && !strings.HasPrefix(value, "#") {
			set = append(set, sha256.Sum256([]byte(value)))
		}
	}
	if len(set) == 0 {
		log.Fatalf("no secret in %s", file)
	}
	return set
}

func (s secretSet) matches(candidate string) bool {
	given := sha256.Sum256([]byte(candidate))
	found := 0
	for i := range s {
		found |= subtle.ConstantTimeCompare(given[:], s[i][:])
	}
	return found == 1
}

// secretOf reads "TEXT; secret=S" (blanks around ';' and at the ends allowed) and returns S.
func secretOf(value string) (string, bool) {
	if len(value) > maxOptIn {
		return "", false
	}
	format, rest, found := strings.Cut(value, ";")
	if !found || strings.Trim(format, " \t") != textFormat {
		return "", false
	}
	secret, found := strings.CutPrefix(strings.TrimLeft(rest, " \t"), "secret=")
	secret = strings.TrimRight(secret, " \t")
	return secret, found && secret != ""
}

// grant decides from the first opt-in value and how many there were.
type grant func(r *http.Request, first string, count int) bool

func grantFor(mode string, frontProxy, loadReader certVerifier, secretFile string) grant {
	bare := func(verifier certVerifier) grant {
		return func(r *http.Request, first string, count int) bool {
			return count == 1 && first == textFormat && verifier.verify(r)
		}
	}
	switch mode {
	case "off":
		return nil
	case "header-only":
		return func(r *http.Request, first string, count int) bool { return first == textFormat }
	case "front-proxy":
		return bare(frontProxy)
	case "load-reader":
		return bare(loadReader)
	case "shared-secret":
		secrets := loadSecrets(secretFile)
		return func(r *http.Request, first string, count int) bool {
			secret, ok := secretOf(first)
			return count == 1 && ok && secrets.matches(secret)
		}
	}
	log.Fatalf("unknown -endpoint-load-metrics-auth %q", mode)
	return nil
}

// withLoadMetrics deletes the opt-in before the handler sees it and sets the report when granted.
func withLoadMetrics(next http.Handler, grants grant) http.Handler {
	if grants == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values(optInHeader)
		r.Header.Del(optInHeader)
		if len(values) > 0 && grants(r, values[0], len(values)) {
			w.Header().Set(reportHeader, report)
		}
		next.ServeHTTP(w, r)
	})
}

type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// authenticate is kube's chain for a request: the requestheader identity when the front proxy's certificate
// verifies and names a user, else the client-CA certificate's CN and O, else anonymous without a certificate.
func authenticate(r *http.Request, frontProxy, clientCA certVerifier) (*userInfo, bool) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return &userInfo{Username: "system:anonymous", Groups: []string{"system:unauthenticated"}}, true
	}
	if frontProxy.verify(r) {
		if name := r.Header.Get("X-Remote-User"); name != "" {
			user := &userInfo{Username: name, UID: r.Header.Get("X-Remote-Uid"), Extra: map[string][]string{}}
			for _, group := range r.Header.Values("X-Remote-Group") {
				if group != "" {
					user.Groups = append(user.Groups, group)
				}
			}
			for key, values := range r.Header {
				if suffix, ok := strings.CutPrefix(key, "X-Remote-Extra-"); ok {
					extra, err := url.PathUnescape(strings.ToLower(suffix))
					if err != nil {
						extra = strings.ToLower(suffix)
					}
					user.Extra[extra] = append(user.Extra[extra], values...)
				}
			}
			user.Groups = append(user.Groups, "system:authenticated")
			return user, true
		}
	}
	if clientCA.verify(r) {
		leaf := r.TLS.PeerCertificates[0]
		groups := append(append([]string{}, leaf.Subject.Organization...), "system:authenticated")
		return &userInfo{Username: leaf.Subject.CommonName, Groups: groups}, true
	}
	return nil, false
}

func kubeShaped(frontProxy, clientCA certVerifier) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc(headersPath, func(w http.ResponseWriter, r *http.Request) { // what reached the handler
		for name := range r.Header {
			fmt.Fprintln(w, strings.ToLower(name))
		}
	})
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"gitVersion":"v0.0.0-gopeer","platform":"` + runtime.GOOS + "/" + runtime.GOARCH + `"}`))
	})
	mux.HandleFunc(reviewsPath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		user, ok := authenticate(r, frontProxy, clientCA)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{
			"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
			"status": map[string]any{"userInfo": user},
		})
	})
	return mux
}

func legacy(frontProxy certVerifier) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(optInHeader) != "" && frontProxy.verify(r) {
			w.Header().Set(reportHeader, report)
		}
		w.Write([]byte("ok"))
	})
	return mux
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	certFile := flag.String("cert", "", "serving certificate")
	keyFile := flag.String("key", "", "serving key")
	caFile := flag.String("requestheader-ca", "", "front-proxy CA bundle")
	names := flag.String("allowed-names", "", "comma-separated allowed CNs of the front proxy")
	mode := flag.String("endpoint-load-metrics-auth", "", "off, header-only, front-proxy, load-reader or shared-secret (unset: the /healthz gate of the benchmarks)")
	loadReaderCA := flag.String("load-reader-ca", "", "load-reader CA bundle (option 2b)")
	loadReaderNames := flag.String("load-reader-allowed-names", "", "comma-separated allowed CNs of a load reader")
	secretFile := flag.String("secret-file", "", "shared secrets, one per line (option 3)")
	clientCAFile := flag.String("client-ca", "", "client CA bundle (users, for selfsubjectreviews)")
	flag.Parse()

	pair, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		log.Fatal(err)
	}
	frontProxy := newVerifier(*caFile, *names)
	var handler http.Handler
	if *mode == "" {
		if frontProxy.roots == nil {
			log.Fatal("-requestheader-ca is required")
		}
		handler = legacy(frontProxy)
	} else {
		grants := grantFor(*mode, frontProxy, newVerifier(*loadReaderCA, *loadReaderNames), *secretFile)
		handler = withLoadMetrics(kubeShaped(frontProxy, newVerifier(*clientCAFile, "")), grants)
	}
	// A write to a connection the client has closed fails with EPIPE instead of raising SIGPIPE: Go ignores
	// that signal on sockets anyway, and callgrind aborts on a signal delivered to Go's handler.
	signal.Ignore(syscall.SIGPIPE)
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	server := &http.Server{
		Handler: handler,
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pair},
			ClientAuth:   tls.RequestClientCert, // verified per request, as kube-apiserver's secure serving leaves it
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	fmt.Printf("Running on https://%s (Go peer)\n", listener.Addr().String())
	os.Stdout.Sync()
	log.Fatal(server.ServeTLS(listener, "", ""))
}
