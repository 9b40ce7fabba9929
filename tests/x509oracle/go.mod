module x509oracle

go 1.26.0
