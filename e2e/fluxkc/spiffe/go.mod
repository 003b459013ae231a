module github.com/fluxcd/pkg/spiffe

go 1.24

require github.com/spiffe/go-spiffe/v2 v2.9.0
