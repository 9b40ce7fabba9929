// Prints the Subject CommonName and Organization of each PEM certificate as Go's crypto/x509 reads them
// (pkix.Name: the last CN, every O), as JSON: the reference kube-apiserver's x509 authenticator uses.
package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
)

func main() {
	out := []map[string]any{}
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		block, _ := pem.Decode(data)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			out = append(out, map[string]any{"error": err.Error()})
			continue
		}
		out = append(out, map[string]any{"cn": cert.Subject.CommonName, "o": cert.Subject.Organization})
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
