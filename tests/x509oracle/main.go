// Command x509oracle decides front-proxy cases the way kube-apiserver does, with Go's own crypto/x509.
//
// Mirrors k8s.io/apiserver commit 24a394e516bfda066d7e2221d7d92c052de27c54 (go.mod: go 1.26.0):
//   - pkg/server/dynamiccertificates: the requestheader CA bundle becomes the Roots pool through client-go's
//     cert.NewPoolFromBytes (PEM "CERTIFICATE" blocks without headers; any unparsable one fails the bundle);
//   - crypto/tls: every presented certificate goes through x509.ParseCertificate (a failure ends the handshake),
//     and one whose RSA key is over 8192 bits ends it too (handshake_server.go, defaultMaxRSAKeySize);
//   - pkg/authentication/request/x509 Verifier.AuthenticateRequest: Verify with the rest of the chain as
//     Intermediates, KeyUsages [ClientAuth], then Subject.CommonName against the allowed names.
//
// Standard library only. Reads one JSON case per line on stdin, writes one JSON verdict per line on stdout.
package main

import (
	"bufio"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

type testCase struct {
	Name   string   `json:"name"`
	Bundle string   `json:"bundle"`
	Chain  [][]byte `json:"chain"`
	Names  []string `json:"names"`
	Time   string   `json:"time"`
}

type verdict struct {
	Name    string `json:"name"`
	Verdict string `json:"verdict"` // grant, refuse, or bundle (the CA bundle itself is refused)
	Detail  string `json:"detail"`
}

// rootsFromBundle follows client-go's cert.ParseCertsPEM and cert.NewPoolFromBytes.
func rootsFromBundle(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	found := false
	for len(data) > 0 {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		pool.AddCert(cert)
		found = true
	}
	if !found {
		return nil, errors.New("data does not contain any valid RSA or ECDSA certificates")
	}
	return pool, nil
}

func decide(c testCase) verdict {
	out := verdict{Name: c.Name, Verdict: "refuse"}
	roots, err := rootsFromBundle([]byte(c.Bundle))
	if err != nil {
		out.Verdict, out.Detail = "bundle", err.Error()
		return out
	}
	if len(c.Chain) == 0 {
		out.Detail = "no certificate"
		return out
	}
	peer := make([]*x509.Certificate, 0, len(c.Chain))
	for _, der := range c.Chain {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			out.Detail = "tls: failed to parse client certificate: " + err.Error()
			return out
		}
		// crypto/tls handshake_server.go processCertsFromClient: an RSA key over defaultMaxRSAKeySize (8192 bits,
		// handshake_client.go) ends the handshake.
		if key, ok := cert.PublicKey.(*rsa.PublicKey); ok && key.N.BitLen() > 8192 {
			out.Detail = "tls: client sent certificate containing RSA key larger than 8192 bits"
			return out
		}
		peer = append(peer, cert)
	}
	now, err := time.Parse(time.RFC3339, c.Time)
	if err != nil {
		out.Detail = "bad time: " + err.Error()
		return out
	}
	opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: now}
	if len(peer) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, intermediate := range peer[1:] {
			opts.Intermediates.AddCert(intermediate)
		}
	}
	if err := verify(peer[0], opts); err != nil {
		out.Detail = err.Error()
		return out
	}
	cn := peer[0].Subject.CommonName
	if len(c.Names) > 0 && !slices.Contains(c.Names, cn) {
		out.Detail = fmt.Sprintf("x509: subject with cn=%q is not in the allowed list", cn)
		return out
	}
	out.Verdict, out.Detail = "grant", "cn="+cn
	return out
}

// verify is Certificate.Verify, with a panic (Go 1.26's constraints.go indexes an empty DNS name) reported as an
// error: kube-apiserver's handler chain recovers it and the request fails.
func verify(leaf *x509.Certificate, opts x509.VerifyOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in Verify: %v", r)
		}
	}()
	_, err = leaf.Verify(opts)
	return err
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c testCase
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintln(os.Stderr, "x509oracle: bad input line:", err)
			os.Exit(2)
		}
		if err := enc.Encode(decide(c)); err != nil {
			fmt.Fprintln(os.Stderr, "x509oracle:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "x509oracle:", err)
		os.Exit(2)
	}
}
